"""Seconds of one round's decision at the embedded pair's shapes, on random tensors (no model loads).

Times :func:`criteria.verify.verify_round` as the llama.cpp loop calls it (the engine's plain logits given, the
K dropout heads from a float32 head ``[V, d]``): SD (greedy match), DropMatch's sparse variant (top-N
candidates + the rest entry) and the exact rule, for B rows of L drafts, and the exact rule on one audited row
cut to P positions (the audit's cost per audited row, :func:`criteria.audit.exact_verdicts`). Values are
random, so only the costs mean anything; they depend on the shapes, the threads and the CPU, not on the pair.

    python scripts/decision_cost.py --B 10 --threads 1

Prints the CPU flags, medians over repeats in milliseconds, and the expected audit cost per row-round at a share.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import criteria.rules  # noqa: E402,F401  (registers the rules)
from criteria.dropout_heads import HeadSpec, LMHead  # noqa: E402
from criteria.registry import CRITERIA  # noqa: E402
from criteria.verify import verify_round  # noqa: E402
from runners.models.dtype import cpu_flags  # noqa: E402


def median_ms(f, repeats: int) -> float:
    f()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--B", type=int, default=10, help="rows decided together (the run's batch size)")
    p.add_argument("--L", type=int, default=5)
    p.add_argument(
        "--V", type=int, default=151665, help="vocabulary (the pair's tokenizer: 151,665)"
    )
    p.add_argument("--d", type=int, default=1536, help="the target's hidden size (1.5B: 1536)")
    p.add_argument("--K", type=int, default=5)
    p.add_argument("--top-n", type=int, default=64)
    p.add_argument("--audit-share", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, L, V, d, K = a.B, a.L, a.V, a.d, a.K
    head = LMHead(torch.randn(V, d) * 0.02, vocab_size=V)
    hidden = torch.randn(B, L + 1, d)
    logits = torch.randn(B, L + 1, V) * 3
    q = torch.softmax(torch.randn(B, L, V) * 3, dim=-1)
    drafts = logits[:, :L].argmax(-1)

    def gens(n: int) -> list[torch.Generator]:
        return [torch.Generator().manual_seed(i) for i in range(n)]

    sd, dm = CRITERIA.get("rejection")(), CRITERIA.get("dropmatch_js")()
    sparse = HeadSpec(K=K, p_drop=0.3, top_n=a.top_n)
    exact = HeadSpec(K=K, p_drop=0.3)
    one = dict(draft_probs=q[:1], target_logits=logits[:1])

    def run(rule, spec, rows, **kw):
        return lambda: verify_round(
            hidden[:rows],
            head,
            drafts[:rows],
            rule,
            spec,
            temperature=0.0,
            generators=gens(rows),
            **kw,
        )

    flags = [
        f
        for f in ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "asimd")
        if f in cpu_flags()
    ]
    print(
        f"B={B} L={L} V={V} d={d} K={K} top_n={a.top_n} threads={a.threads} flags={' '.join(flags)}"
    )
    t_sd = median_ms(run(sd, HeadSpec(), B, draft_probs=q, target_logits=logits), a.repeats)
    t_sparse = median_ms(run(dm, sparse, B, draft_probs=q, target_logits=logits), a.repeats)
    print(f"SD decision            {t_sd:8.1f} ms per round of {B} rows")
    print(f"DropMatch sparse       {t_sparse:8.1f} ms per round of {B} rows")
    for P in (L, max(L // 2, 1), 1):
        t = median_ms(run(dm, exact, 1, max_positions=P, **one), max(3, a.repeats // 2))
        print(
            f"exact rule, 1 row, P={P}  {t:8.1f} ms  (audit at {a.audit_share:.0%}: "
            f"{a.audit_share * t:.1f} ms per row-round vs sparse {t_sparse / B:.1f})"
        )


if __name__ == "__main__":
    main()
