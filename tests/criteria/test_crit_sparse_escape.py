"""The sparse DropMatch JS test goes back to wider and then exact heads where its coarsened support cannot decide."""

from __future__ import annotations

import pytest
import torch

import criteria.dropmatch_js
import criteria.rules  # noqa: F401
from criteria.dropmatch_js import DropMatchJS, unsure_positions
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.verify import _heads, head_logits, verify_round
from tests.helpers.verify_inputs import hidden_round


def test_unsure_positions_band_majority_and_prefix():
    """Unsure: inside the band, not accepted by the majority, no sure rejection earlier in the row; exact
    positions (both slacks 0) never."""
    jd = torch.tensor([[0.10, 0.30, 0.10, 0.20], [0.10, 0.10, 0.10, 0.10]])
    jh = torch.tensor([[0.11, 0.10, 0.10, 0.21], [0.50, 0.105, 0.105, 0.105]])
    sd = torch.full_like(jd, 0.01)
    sh = torch.full_like(jd, 0.01)
    maj = torch.tensor([[False, False, False, False], [False, True, False, False]])
    sd[1, 3] = sh[1, 3] = 0.0  # already exact
    got = unsure_positions(jd, jh, sd, sh, maj)
    # row 0: t=0 in the band; t=1 surely rejected (0.30 > 0.10 + band) so t=2, t=3 are moot
    # row 1: t=0 surely accepted, t=1 accepted by the majority, t=2 in the band, t=3 exact
    assert got.tolist() == [[True, False, False, False], [False, False, True, False]]


def _decide(rule, hidden, W, drafts, q, spec, B, trace=True):
    return verify_round(
        hidden,
        LMHead(W),
        drafts,
        rule,
        spec,
        temperature=0.0,
        generators=[torch.Generator().manual_seed(100 + i) for i in range(B)],
        draft_probs=q,
        trace=trace,
    )


def test_escape_recomputes_unsure_positions_exactly(monkeypatch):
    """At top-16 over 400 tokens lumping moves Eq. (6) enough to flip rounds. Where the escape went straight to
    the exact heads, the trace's JS values are the exact rule's; with the escape (straight, or through the wider
    support first) the decisions differ from the exact ones on fewer rows than the lumped ones (the rest are
    head-token misses: a head's argmax outside the candidates, which no JS escape changes)."""
    B = 256
    hidden, W, drafts, q = hidden_round(3, B, 400, 0.8)
    rule = DropMatchJS()
    exact = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3), B)
    laddered = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=16, escape=True), B)
    monkeypatch.setattr(
        criteria.dropmatch_js, "ESCAPE_LADDER", (None,)
    )  # straight to the exact heads
    escaped = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=16, escape=True), B)
    monkeypatch.setattr(DropMatchJS, "_unlump", staticmethod(lambda i, h, q, m, jd, jh: (jd, jh)))
    lumped = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=16, escape=True), B)
    redone = escaped.trace["js_draft"] != lumped.trace["js_draft"]  # [B, L]
    assert int(redone.sum()) >= 10
    for key in ("js_draft", "js_heads_max"):
        assert torch.allclose(escaped.trace[key][redone], exact.trace[key][redone], atol=1e-5)
    wrong = lambda r: int((r.num_accepted != exact.num_accepted).sum())  # noqa: E731
    assert wrong(escaped) < wrong(lumped), (wrong(escaped), wrong(lumped))
    assert wrong(laddered) < wrong(lumped), (wrong(laddered), wrong(lumped))


@pytest.mark.parametrize("top_n", [None, 8])
def test_exact_heads_at_are_the_rounds_heads_on_the_same_masks(top_n):
    """``exact_heads(rows, positions)`` gives the exact heads of those positions (top_n None) or the sparse heads
    at a wider top-N, both on the round's own dropout masks."""
    B, P = 3, 4
    hidden, W, drafts, q = hidden_round(5, B, 300, 0.8, L=P)
    gens = lambda: [torch.Generator().manual_seed(7 + i) for i in range(B)]  # noqa: E731
    _, _, _, closures = _heads(
        hidden,
        LMHead(W),
        HeadSpec(5, 0.3, top_n=4, escape=True),
        gens(),
        positions=P,
        draft_probs=q,
    )
    at = closures["exact_heads"]
    rows, positions = torch.tensor([0, 2, 2]), torch.tensor([1, 0, 3])
    got, cand = at(rows, positions, top_n)
    _, want, want_cand = head_logits(
        hidden, LMHead(W), HeadSpec(5, 0.3, top_n=top_n), gens(), positions=P, draft_probs=q
    )
    assert torch.allclose(got.float(), want[rows, positions].float(), atol=1e-5)
    if top_n is None:
        assert cand is None and want_cand is None
    else:
        assert torch.equal(cand, want_cand[rows, positions])


def test_escape_in_the_run_path_decides_as_the_traced_one(monkeypatch):
    """A run decides lazily (no trace: Eq. 6 only at the positions that decide the round); with the escape it
    redoes only those of them that are unsure. Same accepted lengths as the traced round, which redoes every unsure
    position before a sure rejection, and no more positions sent back to a wider support."""
    B = 256
    hidden, W, drafts, q = hidden_round(3, B, 400, 0.8)
    rule, spec = DropMatchJS(), HeadSpec(5, 0.3, top_n=16, escape=True)
    redone = []
    real = criteria.dropmatch_js.redecide

    def counting(inputs, rows, positions, top_n):
        redone.append(int(rows.numel()))
        return real(inputs, rows, positions, top_n)

    monkeypatch.setattr(criteria.dropmatch_js, "redecide", counting)
    traced = _decide(rule, hidden, W, drafts, q, spec, B)
    traced_n, redone[:] = sum(redone), []
    run = _decide(rule, hidden, W, drafts, q, spec, B, trace=False)
    assert torch.equal(run.num_accepted, traced.num_accepted)
    assert 0 < sum(redone) <= traced_n, (sum(redone), traced_n)
    lumped = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=16), B, trace=False)
    assert not torch.equal(run.num_accepted, lumped.num_accepted)  # the escape changed decisions
