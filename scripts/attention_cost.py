"""Milliseconds of one layer's attention at the embedded target's shapes, on random tensors (no model loads).

The target (Qwen2.5-Coder 1.5B) has 12 query heads sharing 2 key/value heads (GQA), head size 128. transformers'
``sdpa`` attention runs it through ``torch.nn.functional.scaled_dot_product_attention``. This script times that
call against the transformers loop's CPU attention, :func:`runners.backends.cpu_attention.grouped_attention`
(each group's query heads times the group's key/value heads, no copy of K and V). It does so for a decode step
(1 new token) and a verify pass (L + 1 new tokens) at batch sizes B over a KV cache of S tokens with left padding
masked. It prints the CPU flags, medians over repeats, and the largest difference between the two outputs.

    python scripts/attention_cost.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runners.backends.cpu_attention import grouped_attention  # noqa: E402
from runners.models.dtype import cpu_flags  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM = 12, 2, 128  # Qwen2.5-Coder 1.5B (the embedded target)


def median_ms(fn, args: tuple, repeats: int, **kw) -> float:
    for _ in range(3):
        fn(*args, **kw)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn(*args, **kw)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    isa = sorted(cpu_flags() & {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "avx_vnni"})
    print(f"CPU ISA: {' '.join(isa)}; torch threads {args.threads}; {args.dtype}")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for B, S, n in ((1, 1200, 1), (8, 1200, 1), (1, 1200, 6), (10, 1400, 6)):
        q = torch.randn(B, HEADS, n, HEAD_DIM).to(dtype)
        k, v = (torch.randn(B, KV_HEADS, S, HEAD_DIM).to(dtype) for _ in range(2))
        # causal among the n new tokens (the cache's last n slots), 3 slots of left padding
        keep = (
            torch.ones(n, S, dtype=torch.bool).tril(diagonal=S - n)[None, None].repeat(B, 1, 1, 1)
        )
        keep[..., :3] = False
        ref = sdpa(q, k, v, attn_mask=keep, enable_gqa=True)
        scale = HEAD_DIM**-0.5
        mine = grouped_attention(q, k, v, keep, scale)
        diff = float((ref.float() - mine.float()).abs().max())
        a = median_ms(sdpa, (q, k, v), args.repeats, attn_mask=keep, enable_gqa=True)
        b = median_ms(grouped_attention, (q, k, v, keep, scale), args.repeats)
        print(
            f"B={B:>2} S={S} new tokens {n}: sdpa {a:7.3f} ms, grouped matmul {b:7.3f} ms per layer "
            f"({a / b:4.1f}x; x28 layers: {28 * (a - b):6.1f} ms per forward); max |diff| {diff:.4f}"
        )


if __name__ == "__main__":
    main()
