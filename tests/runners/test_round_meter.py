"""The loops' round meter (:class:`runners.backends.round_meter.RoundClock`) and what the records make of it."""

from __future__ import annotations

import pytest
import torch

from runners.backends.round_meter import RoundClock
from runners.records.summary import summarize


def test_round_clock_charges_each_row_its_own_positions():
    """``charge`` adds the round's two parts to every row and each row's own rung counts; rows that reached no rung
    get no entry; without a plain moment no time is claimed."""

    class Row:
        def __init__(self):
            self.timing, self.escape = {"criterion": 0.0}, {}

    clock = RoundClock(3)
    clock.plain()
    clock.escape("64", torch.tensor([0, 2, 2]))
    clock.escape("exact", torch.tensor([2]))
    clock.stop()
    rows = [Row(), Row(), Row()]
    clock.charge(rows)
    clock.charge(rows)
    assert [r.escape for r in rows] == [{"64": 2}, {}, {"64": 4, "exact": 2}]
    assert all(r.timing["rule"] == pytest.approx(2 * clock.rule_s) for r in rows)
    assert all(r.timing["plain"] == pytest.approx(2 * clock.plain_s) for r in rows)
    assert clock.start <= clock.plain_at <= clock.end
    silent = RoundClock(1)
    silent.stop()
    row = Row()
    silent.charge([row])
    assert silent.rule_s is None and silent.plain_s is None
    assert "rule" not in row.timing and "plain" not in row.timing


def test_the_summary_sums_the_parts_of_samples_with_rounds():
    """``speed/plain_s`` / ``speed/rule_s`` sum the samples that had rounds (one that ended at its prefill has none
    to measure and does not void the run's sums); a sample with rounds but no split (the exact rule) leaves both
    out; ``escape/positions`` sums the rungs."""

    def sample(rounds, escape=None, **speed):
        s = {
            "spec": {
                "num_drafts": len(rounds),
                "num_draft_tokens": 4 * len(rounds),
                "num_accepted_tokens": sum(rounds),
                "num_accepted_tokens_per_pos": [0] * 4,
                "num_speculative_tokens": 4,
            },
            "speed": {"num_output_tokens": 5, "wall_s": 1.0, **speed},
            "accepted_per_round": rounds,
            "quality": {},
        }
        return {**s, "escape": escape} if escape else s

    timed = [
        sample([2, 1], {"64": 3}, plain_s=0.5, rule_s=0.25),
        sample([0], {"64": 1, "exact": 1}, plain_s=0.25, rule_s=0.5),
        sample([]),  # ended at its prefill
    ]
    out = summarize(timed, 4)
    assert (out["speed/plain_s"], out["speed/rule_s"]) == (0.75, 0.75)
    assert out["escape/positions"] == {"64": 4, "exact": 1}
    out = summarize([*timed, sample([1])], 4)
    assert "speed/rule_s" not in out and "speed/plain_s" not in out
