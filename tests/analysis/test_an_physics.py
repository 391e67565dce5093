"""The cost-regime line (analysis.physics): verify(L+1) / decode from the runs' own records."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from analysis.physics import per_pass, regime_line, verify_step_ratio
from runners.paths import REPO_ROOT


def _items(verify_s, passes):
    return pd.DataFrame({"verify_s": verify_s, "verify_passes": passes})


def test_verify_step_ratio_by_hand():
    """SD: 2.0 s over 8 passes (0.25 s each); AR: 2.0 s over 20 steps (0.1 s each): v = 2.5."""
    sd, ar = _items([1.2, 0.8], [4, 4]), _items([1.0, 1.0], [10, 10])
    assert per_pass(sd) == pytest.approx(0.25) and per_pass(ar) == pytest.approx(0.1)
    assert verify_step_ratio(sd, ar) == pytest.approx(2.5)
    assert math.isnan(verify_step_ratio(_items([1.0, float("nan")], [4, 4]), ar))  # untimed item
    assert math.isnan(verify_step_ratio(sd, _items([0.0], [0])))  # no passes
    assert math.isnan(per_pass(pd.DataFrame(columns=["verify_s", "verify_passes"])))


def test_regime_line_names_each_benchmark_and_the_span():
    (line,) = regime_line([("GSM8K", 2.26), ("MMLU", math.nan), ("IFEval", 1.9)], 5, "10")
    assert line.startswith(
        "cost regime: a verify pass of L+1 = 6 tokens at batch 10 cost 1.90-2.26x an AR decode step"
    )
    assert "GSM8K 2.26, IFEval 1.90" in line and "MMLU" not in line
    assert "compare τ, not tok/s" in line
    (one,) = regime_line([("GSM8K", 1.004)], 10, "1")
    assert "cost 1.00x" in one and "L+1 = 11 tokens at batch 1" in one
    assert regime_line([("GSM8K", math.nan)], 5, "10") == []


def _per_pass_from_file(run_id: str) -> float:
    """Σ speed.verify_s / Σ len(accepted_per_round) of a committed run, read straight from its samples."""
    lines = [
        json.loads(x) for x in (REPO_ROOT / "results" / "runs" / run_id / "samples.jsonl").open()
    ]
    return sum(s["speed"]["verify_s"] for s in lines) / sum(
        len(s["accepted_per_round"]) for s in lines
    )


def test_committed_table6_footer_gives_the_records_ratio():
    """The committed Table 6 footer's GSM8K value is the SD run's seconds per verify pass over the AR run's,
    recomputed here from the two runs' samples (runs named by the table's CSV)."""
    csv = pd.read_csv(REPO_ROOT / "results" / "table6" / "table6.csv")
    g = csv[csv["benchmark"] == "gsm8k"].set_index("method")["run_id"]
    v = _per_pass_from_file(g["sd"]) / _per_pass_from_file(g["ar"])
    md = (REPO_ROOT / "results" / "table6" / "table6.md").read_text()
    assert f"GSM8K {v:.2f}" in md and "cost regime: a verify pass of L+1 = 6 tokens" in md
    assert (
        v > 1.2
    )  # a batch-10 verify of 6 tokens on a CPU is compute-bound: far from one decode step
