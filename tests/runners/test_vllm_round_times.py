"""The vLLM backend's round-meter timings per request, summed from the hook's logged rounds (no vLLM needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runners.backends.vllm_counters import logged_times


def _round(verify_s=0.5, plain_s=0.1, rule_s=0.02, escape=None):
    return SimpleNamespace(verify_s=verify_s, plain_s=plain_s, rule_s=rule_s, escape=escape)


def test_sums_the_rounds_and_their_escape_positions():
    times = logged_times(
        [
            _round(escape={"64+64": 2, "512+512": 1}),
            _round(0.25, 0.05, 0.03),
            _round(escape={"64+64": 1, "exact": 1}),
        ]
    )
    assert times["verify_s"] == pytest.approx(1.25)
    assert times["plain_s"] == pytest.approx(0.25) and times["rule_s"] == pytest.approx(0.07)
    assert times["escape"] == {"64+64": 3, "512+512": 1, "exact": 1}


def test_a_part_any_round_did_not_time_is_left_out():
    """The exact rule with p_drop > 0 has no plain moment (plain / rule None); vLLM's own sampler times nothing;
    a request with no rounds (L = 0) has none either."""
    exact = logged_times([_round(plain_s=None, rule_s=None), _round()])
    assert exact["verify_s"] == pytest.approx(1.0) and exact["plain_s"] is None
    assert exact["rule_s"] is None and exact["escape"] is None
    native = logged_times([SimpleNamespace(num_accepted=2)])
    assert native == {"verify_s": 0.0, "plain_s": None, "rule_s": None, "escape": None}
    assert logged_times([]) == native
