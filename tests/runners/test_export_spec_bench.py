"""The Spec-Bench answer file beside a record reads as Spec-Bench's own ``evaluation/eval.py`` writes it: seen,
``wall_time`` was the generation seconds alone (Spec-Bench times ``forward_func``, prefill included) and, in a
batched run, the whole batch's elapsed time (29.4 s against a 4.57 s share in the committed Table 6)."""

from __future__ import annotations

import json

import pytest

from runners.exports.spec_bench import answer_line, write_spec_bench_answers


def _rec(sid, tokens, wall, prefill, share=None, accepted=(2, 3)):
    speed = {"num_output_tokens": tokens, "wall_s": wall, "prefill_s": prefill}
    if share is not None:
        speed["share_s"] = share
    return {
        "sample_id": sid,
        "output_text": "x",
        "reference": {"question_id": 7, "category": "math_reasoning"},
        "accepted_per_round": list(accepted),
        "speed": speed,
    }


def test_batch_one_wall_time_is_prefill_plus_generation():
    choice = answer_line(_rec("a", 6, 2.0, 0.5, share=2.0), "spec_bench", "m", "r")["choices"][0]
    assert choice["wall_time"] == [2.5] and choice["new_tokens"] == [6]
    assert choice["accept_lengths"] == [3, 4] and choice["decoding_steps"] == [2]


def test_batched_wall_time_is_the_sample_s_share():
    """The loops charge a joining sample's prefill to the samples decoding meanwhile, so the share holds it."""
    rec = _rec("b", 6, 29.4, 0.5, share=4.5)
    assert answer_line(rec, "spec_bench", "m", "r", batch_size=10)["choices"][0]["wall_time"] == [
        4.5
    ]


def test_batched_throughput_from_the_file_is_the_run_s_aggregate(tmp_path):
    """Spec-Bench's ``speed.py`` sums new tokens over wall time: in a batched run, tokens over the shares."""
    recs = [_rec("a", 6, 3.0, 0.5, share=1.5), _rec("b", 10, 3.0, 1.0, share=2.5)]
    config = {"dataset": {"name": "spec_bench"}, "L": 5, "backend": {"batch_size": 2}}
    path = write_spec_bench_answers(tmp_path, recs, config)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    tokens = sum(c["new_tokens"][0] for x in lines for c in x["choices"])
    wall = sum(c["wall_time"][0] for x in lines for c in x["choices"])
    assert tokens / wall == pytest.approx(16 / (1.5 + 2.5))
