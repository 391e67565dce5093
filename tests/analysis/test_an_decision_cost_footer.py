"""The DropMatch decision's cost in its own runs, as footers print it (:func:`analysis.footer.decision_cost_lines`)."""

from __future__ import annotations

import pandas as pd

from analysis.footer import decision_cost_lines, rung_counts


def _run(dataset, rule_s, verify_s, plain_s, escape=None, dm=True, L=5, trace=False):
    return {
        "dataset": dataset,
        "L": L,
        "trace": trace,
        "uses_dropmatch": dm,
        "rule_s": rule_s,
        "verify_s": verify_s,
        "plain_s": plain_s,
        "escape_positions": escape,
    }


def test_share_per_benchmark_pooled_and_the_extra_over_the_other_rules():
    """rule / (verify + plain): GSM8K 2 / (90 + 10) = 2.0%, IFEval 9 / (80 + 20) = 9.0%, pooled 11 / 200 = 5.5%;
    the SD run 1 / (90 + 10) = 1.0%, so the extra is 4.5% (missed); the AR run (L = 0) and the traced DM run are
    not counted; the rungs are summed over the counted runs."""
    runs = pd.DataFrame(
        [
            _run("gsm8k", 2.0, 90.0, 10.0, {"64": 10, "4096": 1}),
            _run("ifeval", 9.0, 80.0, 20.0, {"64": 40, "4096": 12, "exact": 5}),
            _run("gsm8k", 1.0, 90.0, 10.0, dm=False),
            _run("gsm8k", 50.0, 90.0, 10.0, dm=False, L=0),
            _run("gsm8k", 70.0, 90.0, 10.0, {"64": 99}, trace=True),
        ]
    )
    (line,) = decision_cost_lines(runs)
    assert "gsm8k 2.0%, ifeval 9.0%; pooled 5.5%" in line
    assert (
        "own rule (argmax and bookkeeping, which any rule pays) 1.0%, so DropMatch's extra 4.5%"
        in line
    )
    assert "(the <= 3% target, on the extra share: missed)" in line
    assert "64 samples 50; 4096 13; the exact heads 5" in line
    assert "did not measure" not in line


def test_gross_verdict_unmeasured_and_silent_cases():
    """Without other speculative runs the gross share is judged: 1 / (90 + 10) = 1.0%, met. A DM run without
    ``rule_s`` is counted as not measured; without any measured DM run, with no DM run at all, or with zero verify
    seconds (NaN), no line (older footers stay as they were)."""
    runs = pd.DataFrame([_run("gsm8k", 1.0, 90.0, 10.0), _run("mmlu", None, 5.0, None)])
    (line,) = decision_cost_lines(runs)
    assert "gsm8k 1.0%; pooled 1.0% (the <= 3% target, on the gross share: met)" in line
    assert line.endswith("; 1 DropMatch run(s) did not measure it")
    assert decision_cost_lines(runs.iloc[1:]) == []
    assert decision_cost_lines(pd.DataFrame([_run("gsm8k", 1.0, 9.0, 2.0, dm=False)])) == []
    assert decision_cost_lines(pd.DataFrame([_run("gsm8k", 0.0, 0.0, 0.0)])) == []
    assert decision_cost_lines(pd.DataFrame([{"dataset": "gsm8k", "uses_dropmatch": True}])) == []


def test_rungs_in_increasing_order_whatever_ladder_the_runs_had():
    """Records made with another ladder (a 32,768-sample rung) or without the exact rung reached: every sampled rung
    any run has, numerically ordered (not as strings), 0 where a run never reached it, the exact heads last."""
    reached = [{"64": 7, "4096": 2, "32768": 1}, {"64": 3, "exact": 1}, {"32768": 4, "64": 1}]
    assert rung_counts(reached) == "64 samples 11; 4096 2; 32768 5; the exact heads 1"
    assert rung_counts([{"64": 2}]) == "64 samples 2; the exact heads 0"
    stratified = [{"64": 9, "512+512": 3, "2048+2048": 1}, {"64": 2, "512+512": 1, "exact": 1}]
    assert rung_counts(stratified) == "64 samples 11; 512+512 4; 2048+2048 1; the exact heads 1"
