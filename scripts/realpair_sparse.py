"""Decision agreement of the sparse DropMatch variant with the exact rule, on real-pair rounds: not a test.

Decodes ``--n`` GSM8K items with the exact ``dropmatch_js`` rule (greedy, L=5, K=5, p_drop=0.3, the pair's
dtype), keeps every round's verify inputs (the target's hidden states, the drafts, the draft probabilities),
then re-decides each round with ``--seeds`` different mask seeds, exactly and with ``sparse_top_n`` = each of
``--top-n`` (same masks: the same seed), for ``dropmatch_js`` and ``dropmatch_naive``. Prints the share of
rounds whose decision (accepted count and emitted token) agrees, and the share of drafted positions whose
per-position test agrees up to the exact rule's first rejection; and the decision time of each variant.
Load the real pair only under the machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_sparse.py --n 3 --seeds 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--top-n", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256])
    args = ap.parse_args()

    from realpair_decode import load  # this directory (run as a script)

    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from runners.backends import hf_loop
    from runners.backends.base import DecodingConfig
    from runners.backends.seeding import make_generator

    pair, samples, stops = load(args.dtype, args.n)
    rounds: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    real = hf_loop.verify_round

    def capture(hidden, lm_head, drafts, rule, heads, **kw):
        if drafts.shape[1] > 0:
            rounds.append((hidden.clone(), drafts.clone(), kw["draft_probs"].clone()))
        return real(hidden, lm_head, drafts, rule, heads, **kw)

    hf_loop.verify_round = capture
    be = hf_loop.HFLoopBackend(pair)
    dec = DecodingConfig(num_speculative_tokens=5, max_new_tokens=args.max_new, stop=stops)
    t0 = time.perf_counter()
    out = list(be.generate(samples, dec, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3)))
    hf_loop.verify_round = real
    print(
        f"== dtype {pair.dtype}, {len(samples)} GSM8K items, {sum(r.num_output_tokens for r in out)} tokens, "
        f"{len(rounds)} rounds captured in {time.perf_counter() - t0:.0f} s; {args.seeds} mask seeds per round"
    )
    head = LMHead(
        pair.target.get_output_embeddings().weight,
        getattr(pair.target.get_output_embeddings(), "bias", None),
    )
    dev = head.weight.device
    for name in ("dropmatch_js", "dropmatch_naive"):
        rule = CRITERIA.get(name)()
        agree = {
            n: [0, 0, 0, 0] for n in args.top_n
        }  # rounds same, rounds, positions same, positions
        secs: dict[str, list[float]] = {"exact": [], **{f"top_n={n}": [] for n in args.top_n}}
        for hidden, drafts, q in rounds:
            for s in range(args.seeds):
                t = time.perf_counter()
                ex = real(
                    hidden,
                    head,
                    drafts,
                    rule,
                    HeadSpec(5, 0.3),
                    temperature=0.0,
                    generators=[make_generator(s, dev)],
                    draft_probs=q,
                )
                secs["exact"].append(time.perf_counter() - t)
                upto = min(int(ex.num_accepted[0]) + 1, drafts.shape[1])
                ok_ex = ex.accept_mask[0, :upto]
                for n in args.top_n:
                    t = time.perf_counter()
                    sp = real(
                        hidden,
                        head,
                        drafts,
                        rule,
                        HeadSpec(5, 0.3, top_n=n),
                        temperature=0.0,
                        generators=[make_generator(s, dev)],
                        draft_probs=q,
                    )
                    secs[f"top_n={n}"].append(time.perf_counter() - t)
                    a = agree[n]
                    a[0] += int(
                        int(sp.num_accepted[0]) == int(ex.num_accepted[0])
                        and int(sp.next_token_ids[0]) == int(ex.next_token_ids[0])
                    )
                    a[1] += 1
                    a[2] += int((sp.accept_mask[0, :upto] == ok_ex).sum())
                    a[3] += upto
        print(
            f"  {name}: decision time median exact {1e3 * statistics.median(secs['exact']):.1f} ms"
        )
        for n in args.top_n:
            r_same, r_all, p_same, p_all = agree[n]
            print(
                f"    sparse_top_n={n}: rounds agree {r_same}/{r_all} = {100 * r_same / r_all:.2f}%, positions "
                f"agree {p_same}/{p_all} = {100 * p_same / p_all:.3f}%; decision time median "
                f"{1e3 * statistics.median(secs[f'top_n={n}']):.1f} ms"
            )


if __name__ == "__main__":
    os.environ.setdefault("DROPMATCH_THREADS", str(os.cpu_count() or 1))
    main()
