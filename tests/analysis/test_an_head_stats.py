"""Tables 2-3 statistics on hand-built traces: known patterns -> known counts and means."""

from __future__ import annotations

import math

import pytest

from analysis.head_stats import js_table, pattern_table, position_frame
from tests.helpers.records import trace_round

# One position per K=5 pattern, in agreement_pattern_names(5) order, plus a second "5".
HEADS = [
    [7, 7, 7, 7, 7],  # 5
    [7, 7, 7, 7, 8],  # 4-1
    [7, 8, 7, 8, 7],  # 3-2
    [9, 7, 7, 8, 7],  # 3-1-1
    [7, 7, 8, 8, 9],  # 2-2-1
    [1, 2, 3, 1, 4],  # 2-1-1-1
    [1, 2, 3, 4, 5],  # 1-1-1-1-1
]
NAMES = ["5", "4-1", "3-2", "3-1-1", "2-2-1", "2-1-1-1", "1-1-1-1-1"]


@pytest.fixture
def samples():
    r1 = trace_round(
        HEADS[:4],
        draft=[7, 7, 8, 7],
        target_probs=[0.9, 0.8, 0.6, 0.5],
        js_draft=[0.01, 0.02, 0.30, 0.05],
        js_heads_max=[0.02, 0.01, 0.10, 0.01],
    )
    r2 = trace_round(
        HEADS[4:] + [HEADS[0]],
        draft=[8, 1, 6, 7],
        target_probs=[0.4, 0.3, 0.1, 0.7],
        js_draft=[0.20, 0.10, 0.40, 0.00],
        js_heads_max=[0.30, 0.05, 0.20, 0.01],
    )
    return [
        {"sample_id": "a", "trace": [r1]},
        {"sample_id": "b", "trace": [r2]},
        {"sample_id": "c"},
    ]


def test_position_frame_flattens_rounds(samples):
    pos = position_frame(samples)
    assert len(pos) == 8 and set(pos["K"]) == {5}
    assert list(pos["sample_id"]) == ["a"] * 4 + ["b"] * 4
    assert list(pos["pos"]) == [0, 1, 2, 3, 0, 1, 2, 3]


def test_pattern_table_counts_and_means(samples):
    t = pattern_table(position_frame(samples), K=5)
    assert list(t["pattern"]) == NAMES
    assert list(t["count"]) == [2, 1, 1, 1, 1, 1, 1]
    assert t["frequency_pct"].sum() == pytest.approx(100.0)
    assert t.loc[0, "frequency_pct"] == pytest.approx(25.0)
    assert t.loc[0, "mean_majority_target_prob"] == pytest.approx((0.9 + 0.7) / 2)
    assert t.loc[6, "mean_majority_target_prob"] == pytest.approx(0.1)


def test_pattern_table_unseen_pattern_is_nan():
    t = pattern_table(
        position_frame([{"sample_id": "x", "trace": [trace_round([[3] * 5] * 3, draft=[3, 3, 3])]}])
    )
    assert list(t["count"]) == [3, 0, 0, 0, 0, 0, 0]
    assert t.loc[0, "frequency_pct"] == 100.0 and math.isnan(t.loc[1, "mean_majority_target_prob"])


def test_pattern_table_empty():
    t = pattern_table(position_frame([]))
    assert list(t["count"]) == [0] * 7 and t["frequency_pct"].isna().all()


def test_js_table_agree_disagree(samples):
    t = js_table(position_frame(samples)).set_index("case")
    # drafts vs majority: a: 7=7, 7=7, 8!=7, 7=7 ; b: 8!=7 (tie 7,8 -> head 0's 7), 1=1, 6!=1, 7=7
    agree_idx = [0, 1, 3, 5, 7]
    js_d = [0.01, 0.02, 0.30, 0.05, 0.20, 0.10, 0.40, 0.00]
    js_h = [0.02, 0.01, 0.10, 0.01, 0.30, 0.05, 0.20, 0.01]
    assert t.loc["agree", "count"] == 5 and t.loc["disagree", "count"] == 3
    assert t.loc["agree", "mean_js_draft"] == pytest.approx(sum(js_d[i] for i in agree_idx) / 5)
    assert t.loc["disagree", "mean_js_heads_max"] == pytest.approx((0.10 + 0.30 + 0.20) / 3)
    assert t.loc["all", "count"] == 8 and t.loc["agree", "share_pct"] == pytest.approx(62.5)
    by_js = [d <= h for d, h in zip(js_d, js_h)]
    assert t.loc["accepted by Eq. 6 (JS)", "count"] == sum(by_js)
    only_maj = [i for i in agree_idx if not by_js[i]]
    assert t.loc["accepted only by Eq. 7 (majority)", "count"] == len(only_maj)
    assert t.loc["accepted only by Eq. 7 (majority)", "mean_js_draft"] == pytest.approx(
        sum(js_d[i] for i in only_maj) / len(only_maj)
    )


def test_js_table_without_js_fields():
    pos = position_frame([{"sample_id": "x", "trace": [trace_round([[3] * 5], draft=[3])]}])
    t = js_table(pos)
    assert (t["count"] == 0).all() and t["mean_js_draft"].isna().all()


def test_ragged_round_raises():
    rnd = trace_round(HEADS[:2], draft=[7, 7])
    rnd["majority_target_prob"] = [0.5]
    with pytest.raises(ValueError, match="majority_target_prob"):
        position_frame([{"sample_id": "x", "trace": [rnd]}])


def test_real_loop_trace_roundtrip(tiny_pair_dir):
    """Traces written by the real HF loop (tiny pair) give consistent statistics."""
    import json

    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.backends.hf_loop import HFLoopBackend
    from runners.datasets.base import Sample
    from runners.models.loader import load_pair

    spec = lambda role: {"name": role, "local_path": str(tiny_pair_dir / role), "order": ["local"]}  # noqa: E731
    pair = load_pair({"name": "tiny", "target": spec("target"), "draft": spec("draft")})
    be = HFLoopBackend(pair)
    res = be.generate_one(
        Sample("t/1", [{"role": "user", "content": "def add(a, b):"}]),
        DecodingConfig(num_speculative_tokens=4, max_new_tokens=40, trace=True),
        CRITERIA.get("dropmatch_js")(),
        HeadSpec(K=5, p_drop=0.3),
    )
    rec = json.loads(json.dumps({"sample_id": "t/1", "trace": res.trace}))
    pos = position_frame([rec])
    assert len(pos) == sum(min(a + 1, 4) for a in res.accepted_per_round)
    t = pattern_table(pos, K=5)
    assert t["count"].sum() == len(pos)
    j = js_table(pos).set_index("case")
    assert j.loc["agree", "count"] + j.loc["disagree", "count"] == len(pos)
    assert ((pos["js_draft"] >= 0) & (pos["js_draft"] <= math.log(2) + 1e-6)).all()


def test_sparse_agreement_counts_positions_and_rounds():
    """Two rounds: one agrees everywhere, one differs at its rejected position (sparse accepted it)."""
    from analysis.head_stats import position_frame, sparse_agreement

    samples = [
        {
            "sample_id": "s",
            "trace": [
                {
                    "head_token_ids": [[1] * 5, [2] * 5],
                    "exact_accept": [True, False],
                    "sparse_accept": [True, False],
                },
                {
                    "head_token_ids": [[1] * 5, [2] * 5, [3] * 5],
                    "exact_accept": [True, True, False],
                    "sparse_accept": [True, True, True],
                },
            ],
        }
    ]
    assert sparse_agreement(position_frame(samples)) == {
        "positions": 5,
        "positions_equal": 4,
        "rounds": 2,
        "rounds_equal": 1,
    }
    assert (
        sparse_agreement(
            position_frame([{"sample_id": "t", "trace": [{"head_token_ids": [[1] * 5]}]}])
        )
        is None
    )


def test_clopper_pearson_lower_bound():
    from analysis.tables.table3 import clopper_pearson_lower

    assert clopper_pearson_lower(0, 10) == 0.0
    assert 1 - clopper_pearson_lower(1000, 1000) == pytest.approx(
        1 - 0.05 ** (1 / 1000), rel=1e-6
    )  # k = n: alpha^(1/n)
    assert clopper_pearson_lower(95, 100) < 0.95 < clopper_pearson_lower(990, 1000) + 0.05
