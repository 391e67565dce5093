"""The host speed check: verify seconds per round of two runs whose tok/s a table divides."""

from __future__ import annotations

import math

import pandas as pd

from analysis.drift import drift_line, verify_per_round


def _run(verify_s, rounds):
    return pd.Series({"verify_s": verify_s, "num_drafts": rounds})


def test_same_speed_gives_one_and_no_warning():
    lines = drift_line([("GSM8K", _run(30.0, 100), _run(60.0, 200))], "SD+DM vs SD")
    assert len(lines) == 1 and "GSM8K 1.00" in lines[0]


def test_a_slower_host_is_named_in_a_warning():
    lines = drift_line(
        [("GSM8K", _run(31.0, 100), _run(30.0, 100)), ("IFEval", _run(40.0, 100), _run(30.0, 100))],
        "SD+DM vs SD",
    )
    assert "IFEval 1.33" in lines[0] and "GSM8K 1.03" in lines[0]
    assert lines[1].startswith("WARNING") and "IFEval" in lines[1] and "GSM8K" not in lines[1]


def test_records_without_verify_time_are_skipped():
    assert math.isnan(verify_per_round(_run(None, 10)))
    assert math.isnan(verify_per_round(_run(5.0, 0)))
    assert drift_line([("MMLU", _run(None, 10), _run(5.0, 10))], "SD+DM vs SD") == []


def _cell(run_id, timed, tps):
    from analysis.cells import Cell
    from analysis.stats import NAN

    items = pd.DataFrame({"sample_id": [f"s{i}" for i in range(len(tps))], "tok_per_s": tps})
    return Cell(run_id, len(tps), NAN, NAN, NAN, 1, 0.0, items, timed=timed)


def test_no_speedup_between_runs_of_different_sessions():
    """A tok/s ratio is printed between runs finished within SAME_SESSION_HOURS, not across sessions."""
    from analysis.cells import SAME_SESSION_HOURS, speedup

    a = _cell("a", "2026-12-03T10:00:00+00:00", [20.0, 22.0, 24.0])
    near = _cell("b", "2026-12-03T13:00:00+00:00", [10.0, 11.0, 12.0])
    far = _cell("c", "2026-12-02T15:00:00+00:00", [10.0, 11.0, 12.0])
    undated = _cell("d", None, [10.0, 11.0, 12.0])
    assert SAME_SESSION_HOURS < 19
    assert speedup(a, near).n == 3 and abs(speedup(a, near).value - 2.0) < 1e-9
    assert speedup(a, far).n == 0 and math.isnan(speedup(a, far).value)
    assert speedup(a, undated).n == 3


def test_a_reference_without_verify_time_is_skipped():
    assert drift_line([("MMLU", _run(3.0, 10), _run(0.0, 10))], "SD+DM vs SD") == []
