"""Subprocess body of ``test_vllm_tensor_parallel.py`` (not a test module): DropMatch through ``VLLMBackend`` at a
given tensor-parallel size on the tiny pair; writes tokens, per-round acceptance and traces as JSON.

    python tests/vllm/tp_generate.py PAIR_DIR TP OUT_JSON
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main() -> None:
    pair_dir, tp, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.backends.vllm_engine import VLLMBackend
    from runners.datasets.base import Sample

    backend = VLLMBackend(
        {"target_dir": pair_dir / "target", "draft_dir": pair_dir / "draft"},
        max_model_len=512,
        tensor_parallel_size=tp,
        enable_prefix_caching=False,
    )
    samples = [
        Sample(f"tp/{i}", [{"role": "user", "content": c}])
        for i, c in enumerate(["def add(a, b):", "The quick brown fox"])
    ]
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=24, seed=11, trace=True)
    result = {}
    for rule in ("dropmatch_naive", "dropmatch_js"):
        res = list(backend.generate(samples, dec, CRITERIA.get(rule)(), HeadSpec(K=5, p_drop=0.3)))
        result[rule] = [
            {
                "ids": r.output_token_ids,
                "rounds": r.accepted_per_round,
                "counters": r.counters.to_dict(),
                "trace_rounds": len(r.trace or []),
            }
            for r in res
        ]
    out.write_text(json.dumps(result))


if __name__ == "__main__":  # vLLM's worker processes are spawned: the guard is required
    main()
