"""A property of every committed record: the counters count only tokens the output kept.

For every sample of every run under ``results/runs/`` (the records behind the committed tables, real-pair runs):
``num_drafts + num_accepted_tokens == len(output_token_ids) - 1 + eos_removed`` (rounds emit every output token
but the first, which comes from prefill; an EOS the output dropped was still emitted), one entry of
``accepted_per_round`` per round, summing to the accepted count, and the per-position counts summing to it too.
Autoregressive runs (L = 0) count no drafts (vLLM's convention) and one zero-accepted step per emitted token.
The embedded end-to-end test (tests/e2e) checks the same on the records it makes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.counter_checks import counter_faults, line_faults, summary_faults
from runners.paths import REPO_ROOT
from runners.records.schema import read_samples

RUNS = REPO_ROOT / "results" / "runs"


def _runs() -> list[Path]:
    return (
        sorted(p for p in RUNS.glob("*") if (p / "samples.jsonl").is_file())
        if RUNS.is_dir()
        else []
    )


@pytest.mark.skipif(
    not _runs(), reason="no committed run records under results/runs/ in this checkout"
)
@pytest.mark.parametrize("run_dir", _runs(), ids=lambda p: p.name)
def test_committed_records_satisfy_the_counter_identity(run_dir):
    assert counter_faults(run_dir) == []


@pytest.mark.skipif(
    not _runs(), reason="no committed run records under results/runs/ in this checkout"
)
@pytest.mark.parametrize("run_dir", _runs(), ids=lambda p: p.name)
def test_committed_records_hold_only_possible_values(run_dir):
    """What render refuses (analysis.counter_checks): no committed line or summary is refused."""
    cfg = json.loads((run_dir / "config.json").read_text())
    lines = read_samples(run_dir / "samples.jsonl")
    assert [(s["sample_id"], line_faults(s)) for s in lines if line_faults(s)] == []
    if (run_dir / "summary.json").is_file():
        summ = json.loads((run_dir / "summary.json").read_text())
        assert summary_faults(summ, int(cfg.get("L") or 0)) == []


def test_line_faults_name_the_field_and_the_range():
    """Each rule once; the counter identity is checked only when the ranges hold (else it would report noise)."""
    from tests.helpers.records import item_sample

    ok = item_sample("x", [3, 4], 5)
    assert line_faults(ok) == []
    bad = json.loads(json.dumps(ok))
    bad["spec"]["num_accepted_tokens"] = 8
    bad["spec"]["num_accepted_mismatched"] = 9
    bad["quality"]["correct"] = 0.5
    assert [(f.field, f.allowed) for f in line_faults(bad)] == [
        ("spec.num_accepted_mismatched", "0 ≤ num_accepted_mismatched ≤ num_accepted_tokens"),
        ("quality.correct", "0 or 1 (true/false; null or NaN: not scored)"),
    ]
    bad["spec"]["num_accepted_tokens"] = "7"
    assert line_faults(bad)[0].field == "spec.num_accepted_tokens"
    # unscored (none_scorer: NaN), a boolean score and a measurement line are in range
    assert line_faults({**ok, "quality": {"correct": float("nan")}}) == []
    assert line_faults({**ok, "quality": {"correct": True, "m": 1.5}}) == []
    assert [f.field for f in line_faults({**ok, "quality": {"m": 1.5}}, ["m"])] == ["quality.m"]
    assert line_faults({"sample_id": "t", "seconds": {"verify": 1.0}}) == []


def test_the_check_finds_a_count_past_the_cut(tmp_path):
    """The fault this guards against: 17 tokens out, counters for 18 committed."""
    rec = {
        "sample_id": "x",
        "output_token_ids": list(range(17)),
        "eos_removed": 0,
        "accepted_per_round": [4, 4, 4, 2],
        "spec": {"num_drafts": 4, "num_accepted_tokens": 14, "num_speculative_tokens": 5},
    }
    (tmp_path / "samples.jsonl").write_text(json.dumps(rec) + "\n")
    assert counter_faults(tmp_path) == ["x: rounds 4 + accepted 14 != emitted 16"]
    rec["spec"]["num_accepted_tokens"], rec["accepted_per_round"] = 12, [4, 4, 2, 2]
    (tmp_path / "samples.jsonl").write_text(json.dumps(rec) + "\n")
    assert counter_faults(tmp_path) == []


def test_vllm_autoregressive_record_passes_the_counter_identity(tmp_path):
    """A vLLM AR run (L = 0) records one 0-accepted step per emitted token, as the HF loop does (seen: vLLM AR
    records held an empty accepted_per_round and failed this property on Table 5's committed AR runs)."""
    import json

    from analysis.counter_checks import counter_faults
    from runners.backends.vllm_counters import output_counters

    counters, per_round = output_counters([], [], 7, 0)
    sample = {
        "sample_id": "x/0",
        "output_token_ids": list(range(8)),
        "eos_removed": 0,
        "spec": {
            "num_drafts": counters.num_drafts,
            "num_accepted_tokens": counters.num_accepted_tokens,
            "num_speculative_tokens": 0,
        },
        "accepted_per_round": per_round,
    }
    (tmp_path / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    assert per_round == [0] * 7 and counter_faults(tmp_path) == []
