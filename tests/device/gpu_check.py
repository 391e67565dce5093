"""One prepared device check: the real HF backend decodes on a CUDA GPU, no network needed.

Builds the tiny random pair itself (``runners.models.tiny``), loads it on ``--device`` in float32 and runs,
through ``runners.backends.hf_loop.HFLoopBackend``:
  1. greedy SD (``greedy_match``, L = 5) == AR, token ids equal per sample, at B = 1 and B = 4;
  2. DropMatch JS and naive (K = 5, p_drop = 0.3, greedy) at B = 1 and B = 4: same ids and counters;
  3. DropMatch JS at T = 1 (sampling from each sample's generator on the device);
  4. the counter identity ``rounds + accepted == len(ids) - 1 + eos_removed`` on every result;
  5. ``pair.dtype: auto`` resolution on this device.
Prints one line per check and a summary; exit 0 when all pass, 1 when one fails, 2 when the device is missing.

    tests/device/run_on_gpu.sh                       # CUDA, <= 5 minutes
    python tests/device/gpu_check.py --device cpu    # the same logic on the CPU
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7? Answer step by step.",
    "A B C D",
    "Write a short answer.",
    "The final answer is",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--max-new", type=int, default=48)
    args = ap.parse_args(argv)

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"gpu_check: --device {args.device} but torch {torch.__version__} sees no CUDA GPU",
            file=sys.stderr,
        )
        return 2
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.backends.hf_loop import HFLoopBackend
    from runners.datasets.base import Sample
    from runners.models.dtype import resolve_dtype
    from runners.models.loader import load_pair
    from runners.models.tiny import build_tiny_pair

    t0 = time.perf_counter()
    name = torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    print(f"gpu_check: device {args.device} ({name}), torch {torch.__version__}")
    failures: list[str] = []

    def check(label: str, ok: bool, detail: str = "") -> None:
        print(f"  [{'PASS' if ok else 'FAIL'}] {label}{': ' + detail if detail else ''}")
        if not ok:
            failures.append(label)

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_pair(tmp)
        spec = lambda role: {"name": role, "local_path": f"{tmp}/{role}", "order": ["local"]}  # noqa: E731
        pair = load_pair(
            {
                "name": "tiny",
                "dtype": "float32",
                "device": args.device,
                "target": spec("target"),
                "draft": spec("draft"),
            },
            log=lambda *_: None,
        )
        weight = pair.target.get_output_embeddings().weight
        check(
            "models on the device",
            weight.device.type == torch.device(args.device).type,
            str(weight.device),
        )
        samples = [
            Sample(f"gpu/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(PROMPTS)
        ]

        def run(B: int, L: int, crit: str, heads: HeadSpec, T: float = 0.0) -> dict:
            dec = DecodingConfig(
                num_speculative_tokens=L, max_new_tokens=args.max_new, temperature=T, seed=1
            )
            be = HFLoopBackend(pair, batch_size=B)
            return {r.sample_id: r for r in be.generate(samples, dec, CRITERIA.get(crit)(), heads)}

        def identity(res: dict) -> bool:
            return all(
                r.counters.num_drafts + r.counters.num_accepted_tokens
                == max(0, len(r.output_token_ids) - 1 + r.eos_removed)
                for r in res.values()
            )

        ar = run(1, 0, "autoregressive", HeadSpec())
        for B in (1, 4):
            sd = run(B, 5, "greedy_match", HeadSpec())
            same = sum(sd[s].output_token_ids == ar[s].output_token_ids for s in ar)
            tau = 1 + sum(r.counters.num_accepted_tokens for r in sd.values()) / max(
                1, sum(r.counters.num_drafts for r in sd.values())
            )
            check(
                f"greedy SD == AR, B={B}",
                same == len(ar),
                f"{same}/{len(ar)} samples token-identical, tau {tau:.2f}",
            )
            check(f"counter identity, greedy SD B={B}", identity(sd))
        for crit in ("dropmatch_js", "dropmatch_naive"):
            one, four = run(1, 5, crit, HeadSpec(5, 0.3)), run(4, 5, crit, HeadSpec(5, 0.3))
            same = sum(
                one[s].output_token_ids == four[s].output_token_ids
                and one[s].accepted_per_round == four[s].accepted_per_round
                for s in one
            )
            tau = 1 + sum(r.counters.num_accepted_tokens for r in four.values()) / max(
                1, sum(r.counters.num_drafts for r in four.values())
            )
            check(
                f"{crit} p_drop=0.3: B=4 decides as B=1",
                same == len(one),
                f"{same}/{len(one)} samples, tau {tau:.2f}",
            )
            check(f"counter identity, {crit}", identity(one) and identity(four))
        sampled = run(2, 5, "dropmatch_js", HeadSpec(5, 0.3), T=1.0)
        again = run(2, 5, "dropmatch_js", HeadSpec(5, 0.3), T=1.0)
        check(
            "dropmatch_js T=1: seeded and repeatable on the device",
            all(sampled[s].output_token_ids == again[s].output_token_ids for s in sampled)
            and identity(sampled),
        )
        auto = resolve_dtype({"dtype": "auto", "device": args.device})
        check("pair.dtype auto resolves", auto in ("bfloat16", "float32"), auto)
    took = time.perf_counter() - t0
    print(
        f"gpu_check: {'all checks passed' if not failures else f'{len(failures)} FAILED: ' + '; '.join(failures)}"
        f" in {took:.1f} s"
    )
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
