"""The DropMatch decision's cost in its own runs, as footers print it (:func:`analysis.footer.decision_cost_lines`)."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.footer import decision_cost_lines


def _dm(dataset, rule_s, verify_s, criterion_s, escape=None, dm=True, L=5):
    return {
        "dataset": dataset,
        "L": L,
        "uses_dropmatch": dm,
        "rule_s": rule_s,
        "verify_s": verify_s,
        "criterion_s": criterion_s,
        "escape_positions": escape,
    }


def test_share_per_benchmark_and_pooled_with_the_verdict():
    """rule / (verify + criterion - rule): GSM8K 2 / (90 + 10 - 2) = 2.04%, IFEval 9 / (80 + 20 - 9) = 9.89%,
    pooled 11 / 189 = 5.82% (missed); the SD run (1 / 100) is printed beside it and the AR run (L = 0) not at
    all; the rungs summed over runs."""
    runs = pd.DataFrame(
        [
            _dm("gsm8k", 2.0, 90.0, 10.0, {"64": 10, "4096": 1}),
            _dm("ifeval", 9.0, 80.0, 20.0, {"64": 40, "4096": 12, "exact": 5}),
            _dm("gsm8k", 1.0, 90.0, 11.0, dm=False),
            _dm("gsm8k", 50.0, 90.0, 60.0, dm=False, L=0),
        ]
    )
    (line,) = decision_cost_lines(runs)
    assert "gsm8k 2.0%, ifeval 9.9%; pooled 5.8% (the <= 3% target: missed)" in line
    assert "the other speculative runs' own rule, measured the same way: 1.0%" in line
    assert "64 samples 50; 4096 13; the exact heads 5" in line
    assert 11 / 189 == pytest.approx(0.0582, abs=1e-4)


def test_met_unmeasured_and_silent_cases():
    """Under 3% pooled: met. A DM run without ``rule_s`` is counted as not measured; without any measured DM run,
    or with no DM run at all, no line (older footers stay as they were)."""
    runs = pd.DataFrame([_dm("gsm8k", 1.0, 90.0, 11.0), _dm("mmlu", None, 5.0, 1.0)])
    (line,) = decision_cost_lines(runs)
    assert (
        "gsm8k 1.0%; pooled 1.0% (the <= 3% target: met); 1 DropMatch run(s) did not measure it"
        in line
    )
    assert "escape" not in line and "other speculative" not in line
    assert decision_cost_lines(runs.iloc[1:]) == []
    assert decision_cost_lines(pd.DataFrame([_dm("gsm8k", 1.0, 9.0, 2.0, dm=False)])) == []
    assert decision_cost_lines(pd.DataFrame([{"dataset": "gsm8k", "uses_dropmatch": True}])) == []
