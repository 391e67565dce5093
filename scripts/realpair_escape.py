"""The sparse DropMatch JS test with and without ``dropmatch.sparse_escape``, against the exact rule, on real-pair
rounds: not a test.

Decodes ``--n`` items of each of ``--datasets`` with the sparse ``dropmatch_js`` rule (greedy, L=5, K=5,
p_drop=0.3, top-64, bf16, batch ``--batch``), keeps every row-round's verify inputs (the target's hidden states,
the drafts, the draft probabilities), then decides them again in batches of ``--batch`` rows with ``--seeds`` mask
seeds: exactly, sparsely (``lumped``), sparsely with the escape (``escape``: unsure positions at 2 x 512
candidates, then exact heads) and with the escape going straight to the exact heads (``straight``). Prints, per
variant, the drafted positions whose test agrees with the exact rule's up to its first rejection, and the decision
time per batch round (the plain head's matmul included, so compare differences). Load the real pair only under the
machine-wide lock:

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD DROPMATCH_THREADS=2 \\
        .venv/bin/python scripts/realpair_escape.py --n 10 --batch 10 --seeds 2
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def capture(pair, dataset: str, n: int, batch: int, max_new: int) -> list:
    """Every row-round's ``(hidden [1, L+1, d], drafts [1, L], draft_probs [1, L, V])`` of a sparse DM decode."""
    from omegaconf import OmegaConf

    import runners.datasets  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends import decide, hf_loop
    from runners.backends.base import DecodingConfig
    from runners.paths import REPO_ROOT
    from runners.registry import DATASETS, build

    dcfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / f"conf/dataset/{dataset}.yaml"))
    data = build(DATASETS, {**dcfg, "limit": n})
    rounds, real = [], decide.verify_round

    def keep(hidden, lm_head, drafts, rule, heads, **kw):
        for i in range(drafts.shape[0] if drafts.shape[1] > 0 else 0):
            rounds.append(
                (
                    hidden[i : i + 1].clone(),
                    drafts[i : i + 1].clone(),
                    kw["draft_probs"][i : i + 1].clone(),
                )
            )
        return real(hidden, lm_head, drafts, rule, heads, **kw)

    decide.verify_round = keep  # the loop decides every round through runners.backends.decide
    try:
        dec = DecodingConfig(
            num_speculative_tokens=5, max_new_tokens=max_new, stop=list(data.stop or [])
        )
        be = hf_loop.HFLoopBackend(pair, batch_size=batch)
        list(
            be.generate(
                data.load(), dec, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3, top_n=64)
            )
        )
    finally:
        decide.verify_round = real
    return rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--datasets", default="ifeval,gsm8k,humaneval")
    ap.add_argument("--max-new", type=int, default=256)
    args = ap.parse_args()

    from omegaconf import OmegaConf

    import criteria.dropmatch_js as djs
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from criteria.verify import verify_round
    from runners.backends.seeding import make_generator
    from runners.models.loader import load_pair
    from runners.paths import REPO_ROOT

    cfg = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf/pair/qwen25coder_0.5b_1.5b.yaml"))
    pair = load_pair({**cfg, "dtype": "bfloat16"})
    W = pair.target.get_output_embeddings().weight
    head, rule, B = LMHead(W), CRITERIA.get("dropmatch_js")(), args.batch
    refine = djs.REFINE_TOP_N
    variants = {
        "lumped": (HeadSpec(5, 0.3, top_n=64), refine),
        "escape": (HeadSpec(5, 0.3, top_n=64, escape=True), refine),
        "straight": (HeadSpec(5, 0.3, top_n=64, escape=True), None),
    }
    tally = {v: [0, 0, 0.0] for v in ["exact", *variants]}  # positions agree, positions, seconds
    batches = 0
    for ds in args.datasets.split(","):
        t0 = time.perf_counter()
        rounds = capture(pair, ds, args.n, B, args.max_new)
        print(
            f"== {ds}: {len(rounds)} row-rounds captured in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        for i in range(0, len(rounds) - B + 1, B):
            hidden, drafts, q = (torch.cat([r[k] for r in rounds[i : i + B]]) for k in range(3))
            for s in range(args.seeds):

                def decide(spec, s=s, hidden=hidden, drafts=drafts, q=q):
                    gens = [make_generator(1000 * s + j, W.device) for j in range(B)]
                    t = time.perf_counter()
                    res = verify_round(
                        hidden,
                        head,
                        drafts,
                        rule,
                        spec,
                        temperature=0.0,
                        generators=gens,
                        draft_probs=q,
                    )
                    return res, time.perf_counter() - t

                exact, secs = decide(HeadSpec(5, 0.3))
                tally["exact"][2] += secs
                batches += 1
                upto = (exact.num_accepted + 1).clamp(max=drafts.shape[1])  # [B]
                counted = torch.arange(drafts.shape[1])[None] < upto[:, None]  # [B, L]
                for name, (spec, top_n) in variants.items():
                    djs.REFINE_TOP_N = top_n
                    res, secs = decide(spec)
                    same = (res.accept_mask == exact.accept_mask) & counted
                    tally[name][0] += int(same.sum())
                    tally[name][1] += int(counted.sum())
                    tally[name][2] += secs
        djs.REFINE_TOP_N = refine
    for name, (agree, total, secs) in tally.items():
        share = f"{agree}/{total} = {100 * agree / total:.3f}%" if total else "(the reference)"
        print(f"  {name:9s} positions agree {share}; {1e3 * secs / batches:.1f} ms per batch round")


if __name__ == "__main__":
    os.environ.setdefault("DROPMATCH_THREADS", str(os.cpu_count() or 1))
    main()
