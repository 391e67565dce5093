"""Fig. 3's input: the Spec-Bench dataset (interleaved task order, question in the record) and the `none` scorer."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import yaml

import runners.datasets  # noqa: F401  (registration)
import runners.scorers  # noqa: F401
from runners.paths import REPO_ROOT
from runners.registry import DATASETS, SCORERS, build


def spec_bench_file() -> Path:
    for base in (
        os.environ.get("DROPMATCH_TEST_DATA"),
        REPO_ROOT.parent / "shared" / "data",
        "/work/shared/data",
    ):
        if base and (Path(base) / "spec_bench" / "question.jsonl").is_file():
            return Path(base) / "spec_bench" / "question.jsonl"
    pytest.skip("Spec-Bench question.jsonl not found (set DROPMATCH_TEST_DATA)")


def make(**overrides):
    cfg = yaml.safe_load((REPO_ROOT / "conf" / "dataset" / "spec_bench.yaml").read_text())
    cfg["source"] = {**cfg["source"], "local_path": str(spec_bench_file())}
    cfg.update(overrides)
    return build(DATASETS, cfg)


def test_full_and_interleaved():
    samples = make().load()
    assert len(samples) == 480 and len({s.sample_id for s in samples}) == 480
    first = [s.meta["task"] for s in samples[:6]]
    assert first == ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
    s = samples[0]
    assert s.sample_id == "spec_bench/test/81" and s.messages == [
        {"role": "user", "content": s.reference["question"]}
    ]


def test_limit_offset_tasks_and_file_order():
    assert [s.sample_id for s in make(limit=2, offset=6).load()] == [
        "spec_bench/test/82",
        "spec_bench/test/162",
    ]
    qa = make(tasks=["qa"], limit=3).load()
    assert [s.meta["task"] for s in qa] == ["qa"] * 3
    assert [s.meta["question_id"] for s in make(order="file", limit=3).load()] == [81, 82, 83]
    with pytest.raises(ValueError, match="order"):
        make(order="random")
    with pytest.raises(ValueError, match="unknown tasks"):
        make(tasks=["nope"]).load()


def test_none_scorer():
    scorer = build(SCORERS, {"name": "none"})
    out = scorer.score([object(), object()], ["a", None])
    assert len(out) == 2 and all(math.isnan(r["correct"]) for r in out)
    agg = scorer.aggregate(out)
    assert agg["n"] == 2 and math.isnan(agg["accuracy"])
