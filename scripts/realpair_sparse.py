"""Decision agreement of the sparse DropMatch variant with the exact rule, on real-pair rounds: not a test.

Decodes ``--n`` GSM8K items with the exact ``dropmatch_js`` rule (greedy, L=5, K=5, p_drop=0.3, the pair's
dtype, ``--batch`` rows at a time), keeps every row's verify inputs of every round (the target's hidden states,
the drafts, the draft probabilities), then re-decides each with ``--seeds`` different mask seeds, exactly and
with ``sparse_top_n`` = each of ``--top-n`` (same masks: the same seed), for ``dropmatch_js`` and
``dropmatch_naive``. Prints the share of rounds whose decision (accepted count and emitted token) agrees, and the
share of drafted positions whose per-position test agrees up to the exact rule's first rejection; the decision
time of each variant; and with ``--explain`` each round's first disagreement with its kind: ``tie`` (the heads'
tokens differ and a head's top two logits tie), ``heads`` (they differ otherwise) or ``js`` (same head tokens,
the JS test decided differently; both sides of Eq. 6 printed). Load the real pair only under the machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_sparse.py --n 10 --batch 10 --seeds 10 --top-n 64,256 --explain
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch


def explain(rule_name, t, exact, sparse, head_row) -> str:
    """One round's first disagreement at position ``t``: its kind and the values that decided it."""
    he, hs = (
        exact.trace["head_token_ids"][0, t].tolist(),
        sparse.trace["head_token_ids"][0, t].tolist(),
    )
    top2 = head_row.float().topk(2, dim=-1).values  # [K, 2]
    tied = bool((top2[:, 0] == top2[:, 1]).any())
    kind = ("tie" if tied else "heads") if he != hs else "js"
    out = f"    {rule_name} t={t} {kind}: exact {bool(exact.accept_mask[0, t])}, heads exact {he} sparse {hs}"
    if "js_draft" in exact.trace:

        def pair(tr):
            return f"{float(tr['js_draft'][0, t]):.4f} vs {float(tr['js_heads_max'][0, t]):.4f}"

        out += (
            f"; JS(draft) vs max JS(head): exact {pair(exact.trace)}, sparse {pair(sparse.trace)}"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--top-n", type=lambda s: [int(x) for x in s.split(",")], default=[16, 64, 256])
    ap.add_argument("--explain", action="store_true")
    args = ap.parse_args()

    from realpair_decode import load  # this directory (run as a script)

    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from criteria.round_heads import head_logits
    from runners.backends import decide, hf_loop
    from runners.backends.base import DecodingConfig
    from runners.backends.seeding import make_generator

    pair, samples, stops = load(args.dtype, args.n)
    rounds: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    real = decide.verify_round  # the loop decides every round through runners.backends.decide

    def capture(hidden, lm_head, drafts, rule, heads, **kw):
        for i in range(drafts.shape[0] if drafts.shape[1] > 0 else 0):
            rounds.append(
                (
                    hidden[i : i + 1].clone(),
                    drafts[i : i + 1].clone(),
                    kw["draft_probs"][i : i + 1].clone(),
                )
            )
        return real(hidden, lm_head, drafts, rule, heads, **kw)

    decide.verify_round = capture
    be = hf_loop.HFLoopBackend(pair, batch_size=args.batch)
    dec = DecodingConfig(num_speculative_tokens=5, max_new_tokens=args.max_new, stop=stops)
    t0 = time.perf_counter()
    out = list(be.generate(samples, dec, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3)))
    decide.verify_round = real
    print(
        f"== dtype {pair.dtype}, {len(samples)} GSM8K items, batch {args.batch}, "
        f"{sum(r.num_output_tokens for r in out)} tokens, {len(rounds)} row-rounds captured in "
        f"{time.perf_counter() - t0:.0f} s; {args.seeds} mask seeds per round"
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
        kinds: dict[int, dict[str, int]] = {n: {} for n in args.top_n}
        secs: dict[str, list[float]] = {"exact": [], **{f"top_n={n}": [] for n in args.top_n}}
        for hidden, drafts, q in rounds:
            for s in range(args.seeds):

                def decide_with(spec, hidden=hidden, drafts=drafts, q=q, rule=rule, s=s):
                    return real(
                        hidden,
                        head,
                        drafts,
                        rule,
                        spec,
                        temperature=0.0,
                        generators=[make_generator(s, dev)],
                        draft_probs=q,
                        trace=args.explain,
                    )

                t = time.perf_counter()
                ex = decide_with(HeadSpec(5, 0.3))
                secs["exact"].append(time.perf_counter() - t)
                upto = min(int(ex.num_accepted[0]) + 1, drafts.shape[1])
                ok_ex = ex.accept_mask[0, :upto]
                for n in args.top_n:
                    t = time.perf_counter()
                    sp = decide_with(HeadSpec(5, 0.3, top_n=n))
                    secs[f"top_n={n}"].append(time.perf_counter() - t)
                    a = agree[n]
                    a[0] += int(
                        int(sp.num_accepted[0]) == int(ex.num_accepted[0])
                        and int(sp.next_token_ids[0]) == int(ex.next_token_ids[0])
                    )
                    a[1] += 1
                    same = sp.accept_mask[0, :upto] == ok_ex
                    a[2] += int(same.sum())
                    a[3] += upto
                    if args.explain and not bool(same.all()):
                        pos = int((~same).nonzero()[0])
                        _, hl, _ = head_logits(
                            hidden, head, HeadSpec(5, 0.3), [make_generator(s, dev)], draft_probs=q
                        )
                        line = explain(name, pos, ex, sp, hl[0, pos])
                        kind = line.split(":")[0].split()[-1]
                        kinds[n][kind] = kinds[n].get(kind, 0) + 1
                        print(f"  top_n={n} seed {s}:{line}", flush=True)
        print(
            f"  {name}: decision time median exact {1e3 * statistics.median(secs['exact']):.1f} ms"
        )
        for n in args.top_n:
            r_same, r_all, p_same, p_all = agree[n]
            print(
                f"    sparse_top_n={n}: rounds agree {r_same}/{r_all} = {100 * r_same / r_all:.2f}%, positions "
                f"agree {p_same}/{p_all} = {100 * p_same / p_all:.3f}%; decision time median "
                f"{1e3 * statistics.median(secs[f'top_n={n}']):.1f} ms"
                + (f"; first disagreements by kind {kinds[n]}" if args.explain else "")
            )


if __name__ == "__main__":
    os.environ.setdefault("DROPMATCH_THREADS", str(os.cpu_count() or 1))
    main()
