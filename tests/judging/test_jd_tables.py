"""Tables 7 and 10 read the judging records: judged quality cells, the judge named in the footer, the judging
runs in the manifest; without judgments they stay as they were (n.j., no quality column)."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from tests.helpers.judging import SDPAIR, decode_cfg, docs, write_decode
from tests.helpers.openai_server import Canned, OpenAIServer


def judge(*args: str, profile: str | None = None) -> int:
    from runners.judging.cli import judge_selected

    return judge_selected(
        [a for a in args if "=" not in a],
        [a for a in args if "=" in a],
        profile,
        log=lambda m: None,
    )


def rating(body: dict) -> Canned:
    """Rating = 9 for answers containing 'fine', else 4 (single grading)."""
    return Canned("[[9]]" if "fine" in body["messages"][-1]["content"] else "[[4]]")


def test_table7_judged_cells_and_footer(results, api_env):
    from analysis.render import render

    runs = {}
    for ds in ("mt_bench", "alpaca"):
        base = decode_cfg("sd", ds, limit=4)
        items = docs(base)
        runs[ds, "sd"] = write_decode(
            results, base, {s: f"fine {i}" for i, (s, _) in enumerate(items)}
        )
        runs[ds, "dm"] = write_decode(
            results,
            decode_cfg("dropmatch_naive", ds, limit=4),
            {s: (f"fine {i}" if i % 2 else f"poor {i}") for i, (s, _) in enumerate(items)},
            tps=6.0,
        )
    before = render("table7", "default", echo=False).tables[0]
    assert list(before.display["MT-Bench Q"]) == ["n.j.", "n.j."]
    top = [("M", -0.2), ("m", -1.8)]  # the judge prefers whichever answer it shows second

    def answer(body, n):
        return Canned("M", top_logprobs=top) if body.get("logprobs") else rating(body)

    with OpenAIServer(answer) as srv:
        api_env(srv.url, model="judge-model")
        assert judge("table7", profile="default") == 0  # the runs Table 7 shows
        # MT-Bench: 4 sd answers + the 2 DM answers that differ (identical ones reuse the sd reply);
        # Alpaca: the 2 DM answers that differ from the sd baseline (identical ones are draws, not asked)
        assert len(srv.requests) == 4 + 2 + 2
    art = render("table7", "default", echo=False)
    (t,) = art.tables
    rows = {m: i for i, m in enumerate(t.display["Method"])}
    sd, dm = rows["EAGLE3"], rows["EAGLE3+DM"]
    assert t.display.iloc[sd]["MT-Bench Q"] == "9.00 [9.00, 9.00]"
    assert t.data.iloc[dm]["mt_bench_score"] == pytest.approx(6.5)  # 4, 9, 4, 9
    assert t.data.iloc[dm]["mt_bench_score_se"] == pytest.approx(statistics.stdev([4, 9, 4, 9]) / 2)
    assert t.data.iloc[dm]["mt_bench_judged_n"] == 4
    # paired vs the exact row on the 4 questions both scored: (4-9, 9-9, 4-9, 9-9) / 4 = -2.5
    assert t.data.iloc[dm]["mt_bench_score_delta_vs_exact"] == pytest.approx(-2.5)
    assert t.display.iloc[dm]["MT-Bench Q"].endswith("; Δ -2.50 [-5.00, 0.00] (n=4)")
    assert "Δ" not in t.display.iloc[sd]["MT-Bench Q"]
    assert "mt_bench_quality_pct" not in t.data and "gsm8k_quality_pct" not in t.data
    # Alpaca: vs the sd run's answers; the sd row is the baseline itself (compared with itself every answer is a
    # draw, 50 % by construction with no judge call): a marker, not a measured 50.0 [50.0, 50.0]
    assert t.display.iloc[sd]["Alpaca Q"] == "baseline"
    assert math.isnan(t.data.iloc[sd]["alpaca_win_rate_pct"])
    assert bool(t.data.iloc[sd]["alpaca_is_baseline"]) and not bool(
        t.data.iloc[dm]["alpaca_is_baseline"]
    )
    assert t.data.iloc[sd]["alpaca_judged_n"] == 0
    pm, pM = math.exp(-1.8), math.exp(-0.2)
    shown = 2 - pm / (pm + pM)  # preference when the model's answer is output_2
    from runners.judging.prompts import alpaca_switched

    items = docs(decode_cfg("sd", "alpaca", limit=4))
    prefs = [
        0.5 if i % 2 else ((3 - shown) if alpaca_switched(d["turns"][0]) else shown) - 1
        for i, (_, d) in enumerate(items)
    ]
    assert t.data.iloc[dm]["alpaca_win_rate_pct"] == pytest.approx(100 * statistics.mean(prefs))
    md = (results / "table7" / "table7.md").read_text()
    assert (
        "judge: judge-model (OpenAI-compatible API); prompts (sha256): alpaca_eval_clf.txt 784227e6dc28"
        in md
    )
    assert "MT-Bench Q: mean FastChat single-answer rating 1-10" in md
    assert "Alpaca Q: AlpacaEval 2.0 win rate % vs the baseline" in md
    assert "baseline: the answers of method sd in the same setting" in md
    assert "| baseline " in md and "50.0 [50.0, 50.0]" not in md
    assert (
        "- baseline (judged quality): the run the win rates compare with" in md
    )  # the marker explained
    assert "not counted: 1 judging runs of a baseline against itself (4 questions" in md
    assert "quality: not judged offline" not in md and "WEAK JUDGE" not in md
    manifest = json.loads((results / "table7" / "manifest.json").read_text())
    judging = [
        d.name
        for d in (results / "runs").iterdir()
        if json.loads((d / "config.json").read_text())["method"]["name"] == "judge"
    ]
    assert len(judging) == 4 and set(judging) <= set(manifest["runs"])


def test_weak_judge_is_labelled_and_strong_one_preferred(results, api_env):
    from analysis.render import render

    base = decode_cfg("sd", "mt_bench", limit=2)
    items = docs(base)
    write_decode(results, base, {s: "fine" for s, _ in items})
    with OpenAIServer(lambda b, n: rating(b)) as srv:
        api_env(srv.url, model="small-judge")
        assert judge("table7", "judge.weak=true") == 0
        md = (
            render("table7", "default", echo=False)
            and (results / "table7" / "table7.md").read_text()
        )
        assert (
            "judge: small-judge (OpenAI-compatible API) -- weak judge" in md and "WEAK JUDGE" in md
        )
        api_env(srv.url, model="big-judge")
        assert judge("table7") == 0
    render("table7", "default", echo=False)
    md = (results / "table7" / "table7.md").read_text()
    assert "judge: big-judge (OpenAI-compatible API)" in md and "WEAK JUDGE" not in md
    assert "other judges' records exist (small-judge" in md


def test_table10_quality_column_only_when_judged(results, api_env):
    from analysis.render import render

    items = docs(decode_cfg("sd", "komt_bench", limit=2, artefact="table10"))
    for pair in ("qwen25coder_1.5b_eagle3_random", SDPAIR):
        for m, text in (("sd", "fine"), ("dropmatch_naive", "poor")):
            write_decode(
                results,
                decode_cfg(m, "komt_bench", L=7, limit=2, pair=pair, artefact="table10"),
                {s: text for s, _ in items},
            )
    (t,) = render("table10", "default", echo=False).tables
    assert "Q" not in t.display
    with OpenAIServer(lambda b, n: rating(b)) as srv:
        api_env(srv.url)
        assert judge("table10", profile="default") == 0
    (t,) = render("table10", "default", echo=False).tables
    assert list(t.display["Method"]) == ["EAGLE3", "EAGLE3+DM (naive)", "SD", "SD+DM (naive)"]
    dm = (
        "4.00 [4.00, 4.00]; Δ -5.00 [-5.00, -5.00] (n=2)"  # paired vs the same drafting's exact row
    )
    assert list(t.display["Q"]) == ["9.00 [9.00, 9.00]", dm] * 2
    assert list(t.data["quality_score"]) == [9.0, 4.0, 9.0, 4.0]
    md = (results / "table10" / "table10.md").read_text()
    assert "KoMT-Bench Q: mean FastChat single-answer rating" in md


def test_one_protocol_per_dataset_never_mixes_scales_or_baselines():
    """Per dataset the (protocol, baseline) judging the most decode runs is kept, the newest on a tie; another
    dataset keeps its own protocol."""
    import pandas as pd

    from analysis.judged import one_protocol

    rows = pd.DataFrame(
        [
            ("mt_bench", "single", "null", "r1", "2026-01-01"),
            ("mt_bench", "single", "null", "r2", "2026-01-01"),
            ("mt_bench", "pairwise", '{"method": "sd"}', "r1", "2026-02-01"),  # newer, fewer runs
            ("alpaca", "alpaca_eval", '{"method": "sd"}', "r3", "2026-01-01"),
            ("alpaca", "alpaca_eval", '{"method": "ar"}', "r3", "2026-03-01"),  # a tie: the newest
        ],
        columns=["dataset", "protocol", "baseline", "source_run_id", "date_utc"],
    )
    kept = one_protocol(rows)
    assert sorted(map(tuple, kept[["dataset", "protocol", "baseline"]].values)) == [
        ("alpaca", "alpaca_eval", '{"method": "ar"}'),
        ("mt_bench", "single", "null"),
        ("mt_bench", "single", "null"),
    ]


def _judged(values: list[float], protocol: str = "alpaca_eval", source="dm", baseline="sd"):
    from analysis.judged import Judged
    from analysis.stats import Estimate, mean_ci

    est = mean_ci(values).scaled(100.0) if values else Estimate(math.nan, math.nan, math.nan, 0)
    return Judged(
        run_id=f"j-{source}",
        protocol=protocol,
        value=est,
        se=math.nan,
        n_expected=3,
        n_parse_failures=3 - len(values),
        n_call_failures=0,
        complete=True,
        per_question={str(i): v for i, v in enumerate(values)},
        source_run_id=source,
        baseline_run_id=baseline,
    )


def test_judged_cell_markers_baseline_and_not_scored():
    """A run judged against itself (the set's baseline) reads "baseline", never a measured 50.0 [50.0, 50.0]; a run
    with no answer scored (every reply without a verdict) reads "n.j.", not a blank cell; the footer explains both."""
    from analysis.tables.table7 import judged_columns, marker_lines, shown_markers

    cols, shown = judged_columns("alpaca", _judged([0.5, 0.5, 0.5], source="sd"), "alpaca_eval")
    assert shown == "baseline" and cols["alpaca_is_baseline"] is True
    assert math.isnan(cols["alpaca_win_rate_pct"]) and cols["alpaca_judged_n"] == 0
    # the baseline run without a judging of its own is still the baseline (not "n.j.")
    assert judged_columns("alpaca", None, "alpaca_eval", is_baseline=True)[1] == "baseline"
    cols, shown = judged_columns("alpaca", _judged([]), "alpaca_eval")
    assert shown == "n.j." and math.isnan(cols["alpaca_win_rate_pct"])
    assert cols["alpaca_is_baseline"] is False and cols["alpaca_judged_n"] == 0
    cols, shown = judged_columns("alpaca", _judged([1.0, 0.5, 0.0]), "alpaca_eval")
    assert shown.startswith("50.0 [") and cols["alpaca_win_rate_pct"] == pytest.approx(50.0)
    assert cols["alpaca_judged_n"] == 3  # a measured 50 % (a win, a draw, a loss) stays a number
    # single-answer ratings have no baseline: a rating is a number or n.j.
    assert judged_columns("mt_bench", _judged([], "single"), "single")[1] == "n.j."
    assert "mt_bench_is_baseline" not in judged_columns("mt_bench", None, "single")[0]
    display = [{"Alpaca Q": "baseline", "MT-Bench Q": "n.j."}, {"Alpaca Q": "54.5 [36.6, 73.3]"}]
    assert shown_markers(display, ["Alpaca Q"]) == {"baseline"}
    lines = marker_lines(shown_markers(display, ["Alpaca Q", "MT-Bench Q"]))
    assert [x.split(" (")[0] for x in lines] == ["baseline", "n.j."]
    assert marker_lines(set()) == []
