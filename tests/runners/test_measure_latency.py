"""Table 4's measurement run (method=latency): the timer on the tiny target, records, resume, the table from records."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from runners.measure.latency import COMPONENTS, VerifyTimer, paired_ratios, summarize_timings
from runners.records.record import read_samples
from tests.helpers.cli import run_main


@pytest.fixture(scope="module")
def tiny_target(tiny_pair_dir):
    from runners.models.loader import load_pair

    spec = {"name": "t", "local_path": str(tiny_pair_dir / "target"), "order": ["local"]}
    return load_pair({"name": "tiny", "target": spec, "draft": spec}, need_draft=False).target


def test_verify_timer_tiny(tiny_target):
    timer = VerifyTimer(
        tiny_target, L=5, K=5, p_drop=0.3, context=16, sparse_top_n=8, audit_share=0.05
    )
    lines = [{"seconds": timer.time_once()} for _ in range(4)]
    assert all(set(ln["seconds"]) == set(COMPONENTS) for ln in lines)
    assert all(0 < t < 10 and math.isfinite(t) for ln in lines for t in ln["seconds"].values())
    s = summarize_timings(lines, audit_share=0.05)
    for comp in COMPONENTS:
        assert (
            s[f"latency/{comp}/q25_ms"]
            <= s[f"latency/{comp}/median_ms"]
            <= s[f"latency/{comp}/q75_ms"]
        )
    assert s["latency/verify_over_decode"] > 0 and s["latency/dm_overhead_share"] > 0
    assert math.isfinite(
        s["latency/dm_round_share"]
    )  # the decision as verify_round runs it (DM - SD)
    assert math.isfinite(
        s["latency/dm_sparse_round_share"]
    )  # the opt-in sparse variant, same round
    assert math.isfinite(s["latency/dm_audited_round_share"])  # sparse + 5 % of rounds audited
    assert "latency/dm_audited_round_share" not in summarize_timings(
        lines
    )  # no share: not amortised
    no_sparse = VerifyTimer(
        tiny_target, L=5, K=5, p_drop=0.3, context=16, audit_share=0.05
    ).time_once()
    assert set(no_sparse) == set(COMPONENTS) - {"verify_round_dm_sparse", "verify_round_dm_audited"}


def test_verify_timer_rejects_L0(tiny_target):
    with pytest.raises(ValueError, match="L=0"):
        VerifyTimer(tiny_target, L=0, K=5, p_drop=0.3, context=8)


def test_paired_ratios_by_hand():
    r = paired_ratios(
        {
            "decode_step": 0.2,
            "verify_pass": 0.5,
            "lm_head": 0.01,
            "mc_dropout_heads": 0.03,
            "js_divergence": 0.02,
            "dropmatch_criterion": 0.025,
        }
    )
    assert r["verify_over_decode"] == pytest.approx(2.5)
    assert r["dm_overhead_share"] == pytest.approx((0.02 + 0.02) / 0.5)
    assert r["dm_rule_share"] == pytest.approx((0.02 + 0.025) / 0.5)
    assert "dm_round_share" not in r  # records made before the in-loop components
    r = paired_ratios(
        {
            "decode_step": 0.2,
            "verify_pass": 0.5,
            "lm_head": 0.01,
            "mc_dropout_heads": 0.03,
            "js_divergence": 0.02,
            "dropmatch_criterion": 0.025,
            "verify_round_sd": 0.012,
            "verify_round_dm": 0.017,
        }
    )
    assert r["dm_round_share"] == pytest.approx(0.005 / 0.5)
    timed = {
        "decode_step": 0.2,
        "verify_pass": 0.5,
        "lm_head": 0.01,
        "mc_dropout_heads": 0.03,
        "js_divergence": 0.02,
        "dropmatch_criterion": 0.025,
        "verify_round_sd": 0.012,
        "verify_round_dm": 0.017,
        "verify_round_dm_sparse": 0.013,
        "verify_round_dm_audited": 0.032,
    }
    r = paired_ratios(timed, audit_share=0.05)
    assert r["dm_sparse_round_share"] == pytest.approx(0.001 / 0.5)
    # 95 % of rounds sparse only, 5 % sparse + the exact rule: 0.95 * 13 + 0.05 * 32 - 12 = 1.95 ms
    assert r["dm_audited_round_share"] == pytest.approx(0.00195 / 0.5)
    assert "dm_audited_round_share" not in paired_ratios(timed)


@pytest.mark.subprocess
def test_latency_sweep_records_resume_and_table(runs_root, main_env, monkeypatch):
    """experiment=table4 on the tiny pair: 4 runs (L 5/10 x fp32/bf16) with 3 lines each; a rerun skips them;
    a run cut back to 1 line resumes with 2; Table 4 is built from the records alone."""
    args = ["experiment=table4", "method.timing_repeats=3", "method.context=16", "method.warmup=1"]
    p = run_main(main_env, *args, multirun=True)
    assert p.returncode == 0, p.stderr[-3000:]
    dirs = sorted(runs_root.iterdir())
    assert len(dirs) == 4
    for d in dirs:
        assert {f.name for f in d.iterdir()} >= {
            "config.json",
            "meta.json",
            "samples.jsonl",
            "summary.json",
        }
        s = json.loads((d / "summary.json").read_text())
        assert (
            s["complete"] and s["num_samples"] == 3 and s["model/dtype"] in ("float32", "bfloat16")
        )
        assert s["latency/n_input"] == s["latency/L"] + 1 and s["latency/verify_pass/median_ms"] > 0
    assert {json.loads((d / "summary.json").read_text())["model/dtype"] for d in dirs} == {
        "float32",
        "bfloat16",
    }

    again = run_main(main_env, *args, multirun=True)
    assert "4 runs: 0 done, 4 skipped" in again.stderr, again.stderr[-2000:]

    victim = dirs[0]
    first = (victim / "samples.jsonl").read_text().splitlines(keepends=True)[0]
    (victim / "samples.jsonl").write_text(first)
    (victim / "summary.json").unlink()
    resumed = run_main(main_env, *args, multirun=True)
    assert resumed.returncode == 0 and "1 done, 2 to go" in resumed.stdout + resumed.stderr
    ids = [ln["sample_id"] for ln in read_samples(victim / "samples.jsonl")]
    assert ids == ["repeat/0000", "repeat/0001", "repeat/0002"]
    assert len((victim / "samples.jsonl").read_text().splitlines()) == 3  # no duplicate lines

    monkeypatch.setenv("DROPMATCH_RESULTS", main_env["DROPMATCH_RESULTS"])
    from analysis.render import render
    from analysis.tables import table4

    art = render("table4", "smoke", echo=False)
    assert len(art.runs) == 4
    out = runs_root.parent / "table4"
    t = pd.read_csv(out / "table4.csv")
    assert (
        len(t) == 4 * len(table4.LABELS) and set(t["L"]) == {5, 10} and (t["n_repeats"] == 3).all()
    )
    verify = t[t["component"] == table4.LABELS["verify_pass"]]
    assert (verify["pct_of_verify_measured"] == 100.0).all()
    assert (
        (verify["median_ms_lo"] <= verify["median_ms"])
        & (verify["median_ms"] <= verify["median_ms_hi"])
    ).all()
    tgt = pd.read_csv(out / "table4_targets.csv")
    assert len(tgt) == 4 and (tgt[["verify_over_decode", "dm_overhead_pct"]] > 0).all().all()
    for d in dirs:  # the table's medians are the records' summaries
        s = json.loads((d / "summary.json").read_text())
        row = tgt[(tgt["dtype"] == s["model/dtype"]) & (tgt["L"] == s["latency/L"])]
        assert row["verify_over_decode"].item() == pytest.approx(s["latency/verify_over_decode"])
        assert row["dm_overhead_pct"].item() == pytest.approx(100 * s["latency/dm_overhead_share"])
    md = (out / "table4_targets.md").read_text()
    assert "dm_overhead_pct [95% CI]" in md and "n (timed repeats per run): 3, 3, 3, 3" in md


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "override, field",
    [("method.timing_repeats=0", "method.timing_repeats"), ("pair.dtype=int8", "pair.dtype")],
)
def test_latency_bad_config_exit_2(main_env, runs_root, override, field):
    p = run_main(main_env, "method=latency", override, multirun=False)
    assert p.returncode == 2 and field in p.stderr, p.stderr[-2000:]
    assert not runs_root.exists() or not any(runs_root.iterdir())
