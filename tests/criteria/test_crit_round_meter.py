"""The verify round's measurement hook (:class:`criteria.base.RoundMeter`): when it hears the plain logits, what it
hears of the escape ladder, and that listening changes nothing."""

from __future__ import annotations

import pytest
import torch

import criteria.dropmatch_js
import criteria.rules  # noqa: F401
from criteria.dropmatch_js import DropMatchJS
from criteria.dropout_heads import HeadSpec
from criteria.greedy_match import GreedyMatch
from criteria.sparse_heads import rung_name
from runners.backends.round_meter import RoundClock
from tests.helpers.verify_inputs import decide_hidden_round, hidden_round


class Ear:
    """A meter that writes down what it hears, in order."""

    def __init__(self) -> None:
        self.heard: list = []

    def plain(self) -> None:
        self.heard.append("plain")

    def escape(self, rung, rows) -> None:
        self.heard.append((rung, rows.tolist()))


def _decide(rule, spec, meter, B=64):
    return decide_hidden_round(rule, *hidden_round(3, B, 400, 0.8), spec, B, False, meter)


@pytest.mark.parametrize(
    "rule, spec",
    [
        (DropMatchJS(), HeadSpec(5, 0.3, top_n=16, escape=True)),
        (DropMatchJS(), HeadSpec(5, 0.3, top_n=16)),
        (GreedyMatch(), HeadSpec()),
    ],
)
def test_the_meter_hears_the_plain_logits_once_first_and_changes_nothing(rule, spec):
    """The sparse variant (with and without the escape) and a rule without heads: ``plain`` once, before any rung;
    the same verdicts as the round without a meter."""
    ear = Ear()
    heard, alone = _decide(rule, spec, ear), _decide(rule, spec, None)
    assert torch.equal(heard.accept_mask, alone.accept_mask)
    assert torch.equal(heard.next_token_ids, alone.next_token_ids)
    assert ear.heard[0] == "plain" and ear.heard.count("plain") == 1
    rungs = [s for s, _ in ear.heard[1:]]
    if spec.escape:
        names = [rung_name(r, 16) for r in criteria.dropmatch_js.TAIL_LADDER]
        assert rungs and rungs[0] == names[0] == "64+256" and set(rungs) <= set(names)
    else:
        assert rungs == []


def test_the_exact_rule_has_no_plain_moment():
    """The exact rule's plain and head rows are one matmul: the meter hears nothing, so no split is claimed."""
    ear = Ear()
    _decide(DropMatchJS(), HeadSpec(5, 0.3), ear)
    assert ear.heard == []


def test_the_escape_rows_are_the_positions_each_rung_decides(monkeypatch):
    """Counted per row, the rungs' positions are nested (a position climbs only if the lower rung left it unsure)
    and the first rung's positions are those :func:`criteria.dropmatch_js.redecide` was asked at its first rung."""
    asked = []
    real = criteria.dropmatch_js.redecide

    def counting(inputs, rows, positions, rung):
        asked.append((rung, rows.tolist()))
        return real(inputs, rows, positions, rung)

    monkeypatch.setattr(criteria.dropmatch_js, "redecide", counting)
    B = 256
    clock = RoundClock(B)
    _decide(DropMatchJS(), HeadSpec(5, 0.3, top_n=16, escape=True), clock, B=B)
    clock.stop()
    assert clock.rule_s > 0 and clock.plain_s > 0
    rungs = clock.rungs()
    first = torch.bincount(
        torch.tensor(
            [r for s, rows in asked if s == criteria.dropmatch_js.TAIL_LADDER[0] for r in rows]
        ),
        minlength=B,
    )
    keys = [rung_name(r, 16) for r in criteria.dropmatch_js.TAIL_LADDER]
    assert torch.equal(rungs[keys[0]], first) and int(first.sum()) > 0
    for low, high in zip(keys, keys[1:]):
        if high in rungs:
            assert bool((rungs[high] <= rungs[low]).all())
    assert (
        keys[1] == "512+512" and keys[1] in rungs
    )  # this round climbs (as in test_crit_sparse_escape)
