"""Hand-written decode records of the open-ended sets (no model) for the judging tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

import runners.datasets  # noqa: F401  (registration)
from runners.paths import REPO_ROOT
from runners.records.counters import SpecDecodeCounters
from runners.records.run_id import run_id_of
from runners.registry import DATASETS, build

EAGLE = "qwen25coder_1.5b_eagle3_random"
SDPAIR = "qwen25coder_0.5b_1.5b"


def decode_cfg(
    method: str,
    dataset: str,
    *,
    L: int = 5,
    pair: str = EAGLE,
    limit: int = 3,
    offset: int = 0,
    artefact: str = "table7",
    spec: str | None = None,
) -> dict[str, Any]:
    """A resolved decode config of ``dataset`` (its real conf/dataset file, ``limit`` items from ``offset``) as
    vLLM runs store it."""
    ds = yaml.safe_load((REPO_ROOT / "conf" / "dataset" / f"{dataset}.yaml").read_text())
    ds["limit"], ds["offset"] = limit, offset
    dm = (
        {"p_drop": 0.3, "K": 5, "majority": "strict", "include_target": False, "path": 0}
        if method.startswith("dropmatch")
        else {"unused": True}
    )
    spec = spec or ("eagle3" if pair == EAGLE else "draft_model")
    return {
        "pair": {"name": pair, "eagle3_random_head": pair == EAGLE, "dtype": "float32"},
        "dataset": ds,
        "method": {"name": method, "criterion": "rejection"},
        "backend": {"name": "vllm", "batch_size": 1, "spec_method": spec},
        "profile": {"name": "default"},
        "L": L,
        "dropmatch": dm,
        "decoding": {"temperature": 0.0, "top_p": 1.0, "seed": 0, "max_new_tokens": 64},
        "trace": False,
        "repeats": 1,
        "artefact": artefact,
    }


def docs(cfg: dict[str, Any]) -> list[tuple[str, dict]]:
    """``(sample_id, doc)`` of the items of a decode config, as the dataset loads them."""
    return build(DATASETS, cfg["dataset"]).selected_docs()


def write_decode(
    results: Path, cfg: dict[str, Any], outputs: dict[str, str], *, tps: float = 4.0
) -> str:
    """A complete decode record of ``cfg`` with ``outputs`` (sample id -> text); returns its run id."""
    rid = run_id_of(cfg)
    d = results / "runs" / rid
    d.mkdir(parents=True, exist_ok=True)
    L = int(cfg["L"])
    lines = []
    for sid, text in outputs.items():
        c = SpecDecodeCounters(num_speculative_tokens=L)
        c.observe_draft(L, 1)
        lines.append(
            {
                "sample_id": sid,
                "output_text": text,
                # one round accepting 1 draft emits 2 tokens after the prefill's: the counter identity
                "output_token_ids": [1, 2, 3],
                "quality": {},
                "spec": c.to_dict(),
                "accepted_per_round": [1],
                "speed": {"num_output_tokens": 4, "wall_s": 4.0 / tps, "prefill_s": 0.0},
                "stop_reason": "eos",
            }
        )
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (d / "summary.json").write_text(
        json.dumps(
            {
                "run_id": rid,
                "num_samples": len(lines),
                "num_expected": len(lines),
                "complete": True,
                "spec/mean_acceptance_length": 2.0,
                "speed/tok_per_s": tps,
                "device": "Test CPU",
                "date_utc": "2026-11-30T08:00:00+00:00",
                "git_sha": "abc1234def",
            }
        )
    )
    return rid
