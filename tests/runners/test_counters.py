from __future__ import annotations

import pytest

from runners.records.counters import (
    SpecDecodeCounters,
    acceptance_rate,
    mean_acceptance_length,
    per_position_rate,
)


def test_observe_and_derived():
    c = SpecDecodeCounters(num_speculative_tokens=3)
    for a in (3, 0, 2):
        c.observe_draft(3, a)
    assert c.num_accepted_tokens_per_pos == [2, 2, 1]
    assert c.num_drafts == 3 and c.num_draft_tokens == 9 and c.num_accepted_tokens == 5
    assert mean_acceptance_length(c) == pytest.approx(1 + 5 / 3)
    assert acceptance_rate(c) == pytest.approx(5 / 9)
    assert per_position_rate(c) == pytest.approx([2 / 3, 2 / 3, 1 / 3])


def test_add_and_no_drafts():
    a, b = SpecDecodeCounters(2), SpecDecodeCounters(2)
    a.observe_draft(2, 1)
    b.observe_draft(2, 2)
    s = a + b
    assert s.num_accepted_tokens_per_pos == [2, 1] and s.num_accepted_tokens == 3
    assert mean_acceptance_length(SpecDecodeCounters(2)) == 1.0
    with pytest.raises(ValueError):
        a + SpecDecodeCounters(3)
    with pytest.raises(ValueError):
        a.observe_draft(2, 3)
