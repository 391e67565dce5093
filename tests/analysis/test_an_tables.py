"""Tables 1-3 rebuilt from fixture run records (written into a temp results dir), checked cell by cell."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis_fixtures import run_cfg, summary, trace_round, write_run


def _acc(method: str, p: float | None = None, path: int = 0) -> float:
    if method == "ar":
        return 1.0
    if method == "draft_only":
        return 0.0
    return {0.1: 1.0, 0.3: 0.5, 0.5: 0.0}[p] if path != 3 else 0.5


@pytest.fixture
def table1_runs(results):
    write_run(results, "ar", run_cfg("ar", "humaneval"), summary(1.0), [])
    write_run(results, "draft", run_cfg("draft_only", "humaneval"), summary(0.0), [])
    for p in (0.1, 0.3, 0.5):
        for i in range(1, 6):
            write_run(results, f"p{p}-{i}", run_cfg("dropout_path", "humaneval", p_drop=p, path=i, K=1),
                      summary(_acc("dropout_path", p, i)), [])
    # noise that must be ignored: another profile, another dataset, a trace run
    write_run(results, "other-profile", run_cfg("ar", "humaneval", profile="smoke"), summary(0.123), [])
    write_run(results, "other-ds", run_cfg("dropout_path", "spec_bench", p_drop=0.1, path=1, K=1), summary(0.7), [])
    return results


def test_table1_cells(table1_runs):
    from analysis.tables import table1

    assert table1.main(["--profile", "default"]) == 0
    csv = pd.read_csv(table1_runs / "table1" / "table1.csv").set_index("decoder")
    assert list(csv.index) == ["H1", "H2", "H3", "H4", "H5", "mean over paths", "target (no dropout)", "draft alone"]
    assert csv.loc["H1", "p_drop=0.1"] == 100.0 and csv.loc["H3", "p_drop=0.1"] == 50.0
    assert csv.loc["H2", "p_drop=0.5"] == 0.0
    assert csv.loc["mean over paths", "p_drop=0.1"] == pytest.approx(90.0)
    assert csv.loc["target (no dropout)", "without dropout"] == 100.0
    assert csv.loc["draft alone", "without dropout"] == 0.0
    assert csv.loc["target (no dropout)", "paper"] == 81.7
    assert math.isnan(csv.loc["H1", "without dropout"])
    md = (table1_runs / "table1" / "table1.md").read_text()
    assert "Test CPU (2 cores)" in md and "qwen25coder_0.5b_1.5b" in md and "2026-11-30" in md
    assert "n (samples per run): 2" in md
    assert (table1_runs / "table1" / "table1.tex").exists()
    assert len(pd.read_csv(table1_runs / "table1" / "table1_runs.csv")) == 17


def test_table1_no_runs(results, capsys):
    from analysis.tables import table1

    assert table1.main([]) == 1
    assert "experiment=table1" in capsys.readouterr().err


@pytest.fixture
def trace_runs(results):
    heads_all = [[5] * 5] * 3 + [[5, 5, 5, 5, 6]]
    r = trace_round(heads_all, draft=[5, 5, 6, 5], target_probs=[0.9, 0.7, 0.8, 0.6],
                    js_draft=[0.0, 0.01, 0.2, 0.03], js_heads_max=[0.0, 0.02, 0.1, 0.01])
    samples = [{"sample_id": "humaneval/test/0", "trace": [r]}, {"sample_id": "humaneval/test/1", "trace": [r]}]
    write_run(results, "dm", run_cfg("dropmatch", "humaneval", p_drop=0.3, L=5, trace=True), summary(1.0), samples)
    # same method without traces and with K=3: ignored
    write_run(results, "dm-notrace", run_cfg("dropmatch", "humaneval", p_drop=0.3, L=5), summary(1.0), samples)
    write_run(results, "dm-k3", run_cfg("dropmatch", "humaneval", p_drop=0.3, L=5, K=3, trace=True), summary(1.0),
              [{"sample_id": "x", "trace": [trace_round([[1, 1, 2]], draft=[1])]}])
    return results


def test_table2_cells(trace_runs):
    from analysis.tables import table2

    assert table2.main(["--profile", "default"]) == 0
    csv = pd.read_csv(trace_runs / "table2" / "table2.csv")
    assert list(csv["pattern"]) == ["5", "4-1", "3-2", "3-1-1", "2-2-1", "2-1-1-1", "1-1-1-1-1"]
    assert list(csv["count"]) == [6, 2, 0, 0, 0, 0, 0]
    assert csv.loc[0, "frequency_pct"] == 75.0 and csv.loc[0, "paper_frequency_pct"] == 98.4
    assert csv.loc[0, "mean_majority_target_prob"] == pytest.approx(0.8)
    assert math.isnan(csv.loc[2, "mean_majority_target_prob"])
    md = (trace_runs / "table2" / "table2.md").read_text()
    assert "| 0.800 " in md or "0.800" in md
    assert (csv["p_drop"] == 0.3).all() and (csv["L"] == 5).all()


def test_table3_cells(trace_runs):
    from analysis.tables import table3

    assert table3.main([]) == 0
    csv = pd.read_csv(trace_runs / "table3" / "table3.csv").set_index("case")
    assert csv.loc["agree", "count"] == 6 and csv.loc["disagree", "count"] == 2
    assert csv.loc["agree", "mean_js_draft"] == pytest.approx((0.0 + 0.01 + 0.03) / 3)
    assert csv.loc["disagree", "mean_js_heads_max"] == pytest.approx(0.1)
    assert csv.loc["accepted only by Eq. 7 (majority)", "count"] == 2


def test_duplicate_cells_keep_largest_complete(results):
    from analysis.traces import load

    old, new = "2026-11-29T00:00:00", "2026-12-01T00:00:00"
    write_run(results, "ar-old", run_cfg("ar", "humaneval"), {**summary(0.0, n=1), "date_utc": old}, [])
    write_run(results, "ar-big", run_cfg("ar", "humaneval"), summary(0.5, n=4), [])
    write_run(results, "ar-new", run_cfg("ar", "humaneval"), {**summary(1.0, n=2), "date_utc": new}, [])
    runs = load("default", "humaneval", None, ("ar",))
    assert list(runs["run_id"]) == ["ar-big"]


def test_table6_cells_of_one_benchmark_share_one_setting(results):
    """A DM trace run (Tables 2-3) and runs at an older cap must not land in the Table 6 cells of a sweep."""
    from analysis.load import load_runs
    from analysis.tables.table6 import select_runs

    def cfg(method, L, max_new, trace=False):
        c = run_cfg(method, "humaneval", p_drop=0.3 if method == "dropmatch" else None, L=L, trace=trace)
        c["decoding"]["max_new_tokens"] = max_new
        return c

    old, new = "2026-11-29T00:00:00", "2026-12-01T00:00:00"
    for m, L in [("ar", 0), ("sd", 5), ("dropmatch", 5)]:      # the sweep at the current cap: 3 cells
        write_run(results, f"{m}-200", cfg(m, L, 200), {**summary(1.0, n=1), "date_utc": new}, [])
    for m, L in [("ar", 0), ("sd", 5)]:                        # an older cap: 2 cells
        write_run(results, f"{m}-96", cfg(m, L, 96), {**summary(0.0, n=1), "date_utc": old}, [])
    write_run(results, "dm-trace", cfg("dropmatch", 5, 128, trace=True), summary(0.0, n=2), [])  # larger n
    sel = select_runs(load_runs(), "default", "hf", 0.3, 5)
    assert sorted(sel["run_id"]) == ["ar-200", "dropmatch-200", "sd-200"]


def test_table6_one_table_per_swept_p_drop(results):
    """`./reproduce.sh table6 -m ... dropmatch.p_drop=0.1,0.3` renders the paper's table plus one per other value."""
    from analysis.tables.table6 import main

    def cfg(method, L, p=None):
        return run_cfg(method, "gsm8k", p_drop=p, L=L)

    write_run(results, "sd", cfg("sd", 5), {**summary(1.0, n=1), "spec/mean_acceptance_length": 4.0,
                                             "speed/tok_per_s": 2.0}, [])
    for p, tau in [(0.1, 4.5), (0.3, 5.0)]:
        write_run(results, f"dm{p}", cfg("dropmatch", 5, p), {**summary(1.0, n=1), "spec/mean_acceptance_length": tau,
                                                               "speed/tok_per_s": 2.5}, [])
    t = main(["--profile", "default", "--p-drop", "0.1,0.3", "--K", "5"])
    assert list(t.loc[t["Method"] == "SD+DM", "GSM8K τ"]) == ["5.00"]
    other = pd.read_csv(results / "table6" / "table6_p0.1_K5.csv")
    assert list(other.loc[other["Method"] == "SD+DM", "GSM8K τ"]) == [4.5]
    assert list(other.loc[other["Method"] == "SD+DM", "GSM8K speedup"]) == ["1.25× SD"]
