"""Table 4: the latency measurement on a tiny random model, the analytic cost model, the table rows."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.latency import COMPONENTS, LLAMA31_70B, LatencySamples, analytic_costs, measure


@pytest.fixture(scope="module")
def tiny_target(tiny_pair_dir):
    from runners.models.loader import load_pair

    spec = {"name": "t", "local_path": str(tiny_pair_dir / "target"), "order": ["local"]}
    return load_pair({"name": "tiny", "target": spec, "draft": spec}, need_draft=False).target


def test_measure_tiny(tiny_target):
    s = measure(tiny_target, n_input=5, K=5, p_drop=0.3, context=16, warmup=1, repeats=3, log=lambda m: None)
    assert set(s.seconds) == set(COMPONENTS)
    assert all(len(v) == 3 and all(t > 0 for t in v) for v in s.seconds.values())
    assert s.quantile("lm_head", 0.25) <= s.median("lm_head") <= s.quantile("lm_head", 0.75)


def test_measure_rejects_n_input_1(tiny_target):
    with pytest.raises(ValueError, match="n_input"):
        measure(tiny_target, n_input=1, warmup=0, repeats=1)


def test_analytic_llama70b():
    c = analytic_costs(LLAMA31_70B, n_input=5, K=5, context=256, bytes_per_param=2)
    assert c["params"] == pytest.approx(70.55e9, rel=0.01)  # Llama-3.1-70B: 70.6B parameters
    lm = c["lm_head"]["bytes"] / c["full_forward"]["bytes"]
    assert 0.01 < lm < 0.02  # the LM head is ~1.5% of the weights read per forward
    assert c["mc_dropout_heads"]["flops"] == pytest.approx(5 * c["lm_head"]["flops"], rel=1e-3)
    assert c["mc_dropout_heads"]["bytes"] < 0.01 * c["lm_head"]["bytes"]  # W is read once for all heads


def test_table4_rows():
    from analysis.tables.table4 import build

    secs = {"full_forward": [1.0, 1.0, 1.0], "lm_head": [0.1] * 3, "mc_dropout_heads": [0.15] * 3,
            "js_divergence": [0.02] * 3, "dropmatch_criterion": [0.03] * 3}
    t = build(LatencySamples(secs, 5, 5, 0.3, 256, "cpu"), LLAMA31_70B, bytes_per_param=2)
    assert isinstance(t, pd.DataFrame) and len(t) == 7
    assert t.loc[0, "pct_of_full_measured"] == 100.0
    assert t.loc[1, "pct_of_full_measured"] == pytest.approx(10.0)
    assert t.loc[3, "pct_of_full_measured"] == pytest.approx(5.0)  # MC extra = 0.15 - 0.10
    assert t.loc[5, "pct_of_full_measured"] == pytest.approx(7.0)  # + JS 0.02
    assert t.loc[1, "paper_pct"] == 0.05 and t.loc[5, "paper_pct"] == 1.64
    assert t.loc[0, "pct_bytes_analytic"] == 100.0
    assert 1.0 < t.loc[1, "pct_bytes_analytic"] < 2.0  # LM head share of the bytes of a 70B forward
