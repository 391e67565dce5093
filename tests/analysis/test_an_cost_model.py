"""Table 4's analysis side: the analytic cost model and the table rows built from a latency run's summary."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.cost_model import LLAMA31_70B, analytic_costs


def test_analytic_llama70b():
    c = analytic_costs(LLAMA31_70B, n_input=5, K=5, context=256, bytes_per_param=2)
    assert c["params"] == pytest.approx(70.55e9, rel=0.01)  # Llama-3.1-70B: 70.6B parameters
    lm = c["lm_head"]["bytes"] / c["full_forward"]["bytes"]
    assert 0.01 < lm < 0.02  # the LM head is ~1.5% of the weights read per forward
    assert c["mc_dropout_heads"]["flops"] == pytest.approx(5 * c["lm_head"]["flops"], rel=1e-3)
    assert (
        c["mc_dropout_heads"]["bytes"] < 0.01 * c["lm_head"]["bytes"]
    )  # W is read once for all heads


def _summary() -> dict:
    return {
        "model/dtype": "bfloat16",
        "model/bytes_per_param": 2,
        "model/dims": {**LLAMA31_70B},
        "latency/L": 4,
        "latency/n_input": 5,
        "latency/K": 5,
        "latency/context": 256,
    }


def _seconds(ms: dict[str, list[float]]) -> dict[str, np.ndarray]:
    return {c: np.asarray(v) / 1e3 for c, v in ms.items()}


MS = {
    "decode_step": [390.0, 400.0, 410.0],
    "verify_pass": [1000.0, 990.0, 1010.0],
    "lm_head": [100.0, 100.0, 100.0],
    "mc_dropout_heads": [150.0, 150.0, 150.0],
    "js_divergence": [20.0, 20.0, 20.0],
    "dropmatch_criterion": [30.0, 30.0, 30.0],
}


def test_table4_rows_from_repeats():
    from analysis.tables.table4 import LABELS, cost_rows

    t = cost_rows(_summary(), _seconds(MS)).set_index("component")
    # no audited round timed: no amortised row
    assert isinstance(t, pd.DataFrame) and len(t) == len(LABELS) - 1 and (t["n_repeats"] == 3).all()
    assert LABELS["dm_in_loop_audited"] not in t.index
    pct = t["pct_of_verify_measured"]
    assert pct[LABELS["verify_pass"]] == pytest.approx(100.0) and pct[
        LABELS["decode_step"]
    ] == pytest.approx(40.0)
    assert pct[LABELS["lm_head"]] == pytest.approx(10.0)
    assert pct[LABELS["mc_extra"]] == pytest.approx(5.0)  # MC extra = 150 - 100
    assert pct[LABELS["dropmatch_overhead"]] == pytest.approx(7.0)  # + JS 20
    # medians with an interval over the repeats: decode varies (390..410), the LM head does not
    dec = t.loc[LABELS["decode_step"]]
    assert (
        dec["median_ms"] == pytest.approx(400.0)
        and 390.0 <= dec["median_ms_lo"] < dec["median_ms_hi"] <= 410.0
    )
    lm = t.loc[LABELS["lm_head"]]
    assert lm["median_ms_lo"] == lm["median_ms_hi"] == pytest.approx(100.0)
    assert (
        t.loc[LABELS["lm_head"], "paper_pct"] == 0.05
        and t.loc[LABELS["dropmatch_overhead"], "paper_pct"] == 1.64
    )
    assert t.loc[LABELS["verify_pass"], "pct_bytes_analytic"] == 100.0
    assert (
        1.0 < t.loc[LABELS["lm_head"], "pct_bytes_analytic"] < 2.0
    )  # LM head share of the bytes of a 70B forward
    # a 70B decode step reads the same weights as a 5-token verify pass: ~100% of its bytes
    assert 95.0 < t.loc[LABELS["decode_step"], "pct_bytes_analytic"] <= 100.0


def test_table4_targets_row():
    from analysis.tables.table4 import target_row

    ms = {**MS, "decode_step": [200.0, 200.0, 190.0], "verify_pass": [210.0, 200.0, 209.0]}
    row = target_row(_seconds(ms))
    # medians of the per-repeat ratios: 1.05, 1.0, 1.1 -> 1.05; (50 + 20) / verify -> 70/209 .. 70/200
    assert row["verify_over_decode"] == pytest.approx(1.05)
    assert row["verify_over_decode_lo"] >= 1.0 and row["verify_over_decode_hi"] <= 1.1 + 1e-12
    assert row["dm_overhead_pct"] == pytest.approx(100 * 70 / 209) and row[
        "dm_overhead_ms"
    ] == pytest.approx(70.0)
    assert row["dm_rule_pct"] == pytest.approx(100 * 80 / 209) and row["n_repeats"] == 3


def test_table4_audited_decision_is_amortised_over_the_audit_share():
    """The sparse decision with 5 % of its rounds audited: 0.95 * sparse + 0.05 * audited - SD, in the cost rows
    (share of the median verify pass) and in the targets row (median of the per-repeat shares)."""
    from analysis.tables.table4 import LABELS, cost_rows, target_row

    ms = {
        **MS,
        "verify_round_sd": [12.0, 12.0, 12.0],
        "verify_round_dm": [40.0, 40.0, 40.0],
        "verify_round_dm_sparse": [14.0, 14.0, 14.0],
        "verify_round_dm_audited": [54.0, 54.0, 54.0],
    }
    amortised = 0.95 * 14.0 + 0.05 * 54.0 - 12.0  # 4.0 ms
    t = cost_rows({**_summary(), "latency/audit_share": 0.05}, _seconds(ms)).set_index("component")
    row = t.loc[LABELS["dm_in_loop_audited"]]
    assert row["median_ms"] == pytest.approx(amortised)
    assert row["pct_of_verify_measured"] == pytest.approx(100 * amortised / 1000.0)
    assert t.loc[LABELS["dm_in_loop_sparse"], "pct_of_verify_measured"] == pytest.approx(0.2)
    tr = target_row(_seconds(ms), 0.05)
    assert tr["audit_share"] == 0.05
    assert tr["dm_in_loop_audited_pct"] == pytest.approx(100 * amortised / 1000.0)
    assert "dm_in_loop_audited_pct" not in target_row(_seconds(ms))  # no share: no amortised cost
