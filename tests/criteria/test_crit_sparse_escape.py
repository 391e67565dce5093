"""The sparse DropMatch JS test with the escape: the tail beyond the candidates sampled, not lumped, and the positions
the sample cannot settle decided on more samples and then on the exact heads."""

from __future__ import annotations

import pytest
import torch

import criteria.dropmatch_js
import criteria.rules  # noqa: F401
from criteria.dropmatch_base import js_statistics
from criteria.dropmatch_js import DropMatchJS
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.round_heads import head_logits, round_heads
from criteria.sampled_tail import sampled_js_statistics, tail_sample
from tests.helpers.verify_inputs import decide_hidden_round as _decide
from tests.helpers.verify_inputs import hidden_round


def _position_set(seed: int, m: int = 6, K: int = 5, V: int = 400, C: int = 16):
    g = torch.Generator().manual_seed(seed)
    heads = 3 * torch.randn(m, K, V, generator=g)
    q = torch.softmax(3 * torch.randn(m, V, generator=g), -1)
    plain = heads.mean(1) + 0.1 * torch.randn(m, V, generator=g)
    return heads, q, plain, plain.topk(C, dim=-1).indices


def _sampled(heads, q, ids, tail, w):
    every = torch.cat([ids, tail], -1)
    weights = torch.cat([torch.ones(ids.shape), w], -1)
    at = heads.gather(-1, every[:, None].expand(-1, heads.shape[1], -1))
    return sampled_js_statistics(at, q.gather(-1, every), weights, tail.shape[-1], 0.0)


def test_enumerated_tail_gives_the_exact_js():
    """With every tail token once at weight 1 the estimate is the exact Eq. (6) (the weighted sums are the sums)."""
    heads, q, _, ids = _position_set(0)
    keep = torch.ones(q.shape, dtype=torch.bool).scatter_(-1, ids, False)
    tail = torch.stack([row.nonzero().squeeze(-1) for row in keep])  # [m, V - C]
    d, h, _ = _sampled(heads, q, ids, tail, torch.ones(tail.shape))
    d0, h0 = (v[:, 0] for v in js_statistics(heads[:, None], q[:, None], 0.0))
    assert torch.allclose(d, d0, atol=2e-6) and torch.allclose(h, h0, atol=2e-6)


def test_tail_sample_stays_outside_the_candidates_and_converges():
    """Sampled tokens are never candidates, the sample is deterministic, and the estimate's error shrinks with S
    and stays within a few standard errors of the exact margin."""
    heads, q, plain, ids = _position_set(1)
    d0, h0 = (v[:, 0] for v in js_statistics(heads[:, None], q[:, None], 0.0))
    errors = []
    for S in (16, 256, 4096):
        tail, w = tail_sample(plain, q, ids, S)
        assert not bool((tail[:, :, None] == ids[:, None]).any())
        assert torch.equal(tail, tail_sample(plain, q, ids, S)[0])
        d, h, se = _sampled(heads, q, ids, tail, w)
        err = ((h - d) - (h0 - d0)).abs()
        assert bool((err <= 5 * se + 1e-4).all()), (S, err, se)
        errors.append(float(err.max()))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 5e-3, errors


def test_tail_sample_edges():
    """Candidates covering the vocabulary leave a zero-weight tail; a bad S names the field."""
    plain = torch.randn(2, 8)
    ids = torch.arange(8).repeat(2, 1)
    _, w = tail_sample(plain, torch.softmax(plain, -1), ids, 4)
    assert torch.equal(w, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="samples=0 is invalid"):
        tail_sample(plain, None, ids[:, :2], 0)


def test_escape_decides_closer_to_the_exact_rule(monkeypatch):
    """At top-16 over 400 tokens lumping the tail flips rounds. With the ladder straight to the exact heads, the
    trace's JS values where Eq. (6) decides are the exact rule's; with the sampled ladder the decisions differ from
    the exact ones on fewer rows than the lumped ones (the rest are head-token misses: a head's argmax outside the
    candidates, which no JS estimate changes)."""
    B = 256
    hidden, W, drafts, q = hidden_round(3, B, 400, 0.8)
    rule = DropMatchJS()
    exact = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3), B)
    lumped = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=16), B)
    sampled = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=16, escape=True), B)
    monkeypatch.setattr(criteria.dropmatch_js, "TAIL_LADDER", (None,))
    straight = _decide(rule, hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=16, escape=True), B)
    decided = ~straight.trace["accepted_by_majority"] & ~straight.trace["draft_agrees_majority"]
    assert int(decided.sum()) >= 100
    for key in ("js_draft", "js_heads_max"):
        assert torch.allclose(straight.trace[key][decided], exact.trace[key][decided], atol=1e-5)
    wrong = lambda r: int((r.num_accepted != exact.num_accepted).sum())  # noqa: E731
    assert wrong(straight) < wrong(lumped), (wrong(straight), wrong(lumped))
    assert wrong(sampled) < wrong(lumped), (wrong(sampled), wrong(lumped))


@pytest.mark.parametrize("rung", [None, (4, 8), (2, 8), (16, 8)])
def test_exact_heads_at_are_the_rounds_heads_on_the_same_masks(rung):
    """``exact_heads(rows, positions, rung)`` gives the exact heads of those positions (rung None) or the heads at
    the plain head's and the draft's top-max(E, 4) tokens and 8 tail tokens (weight 1 at the candidates), all on the
    round's own dropout masks."""
    B, P = 3, 4
    hidden, W, drafts, q = hidden_round(5, B, 300, 0.8, L=P)
    gens = lambda: [torch.Generator().manual_seed(7 + i) for i in range(B)]  # noqa: E731
    _, _, _, closures = round_heads(
        hidden,
        LMHead(W),
        HeadSpec(5, 0.3, top_n=4, escape=True),
        gens(),
        positions=P,
        draft_probs=q,
    )
    rows, positions = torch.tensor([0, 2, 2]), torch.tensor([1, 0, 3])
    got, ids, weights = closures["exact_heads"](rows, positions, rung)
    _, want, _ = head_logits(hidden, LMHead(W), HeadSpec(5, 0.3), gens(), positions=P)
    want = want[rows, positions].float()  # [m, K, V]
    if rung is None:
        assert ids is None and weights is None
        assert torch.allclose(got.float(), want, atol=1e-5)
        return
    C = 2 * max(rung[0], 4)
    assert ids.shape == (3, C + 8) and weights.shape == ids.shape
    assert torch.equal(weights[:, :C], torch.ones(3, C)) and bool((weights[:, C:] > 0).all())
    plain = head_logits(hidden, LMHead(W), HeadSpec(), gens(), positions=P)[0][rows, positions]
    top = plain.topk(
        C // 2
    ).indices  # the plain head's top tokens are exact candidates, never sampled
    assert bool((ids[:, : C // 2].sort().values == top.sort().values).all())
    assert not bool((ids[:, C:, None] == ids[:, None, :C]).any())
    at = want.gather(-1, ids[:, None].expand(-1, 5, -1))
    finite = torch.isfinite(got)
    assert torch.allclose(got[finite], at[finite], atol=1e-4)


def test_escape_in_the_run_path_decides_as_the_traced_one(monkeypatch):
    """A run decides lazily (no trace: Eq. 6 only at the positions that decide the round) and samples only there.
    Same accepted lengths as the traced round, which samples every position the majority leaves to Eq. (6), and
    fewer positions sampled."""
    B = 256
    hidden, W, drafts, q = hidden_round(3, B, 400, 0.8)
    rule, spec = DropMatchJS(), HeadSpec(5, 0.3, top_n=16, escape=True)
    sampled = []
    real = criteria.dropmatch_js.redecide

    def counting(inputs, rows, positions, rung):
        sampled.append((rung, int(rows.numel())))
        return real(inputs, rows, positions, rung)

    monkeypatch.setattr(criteria.dropmatch_js, "redecide", counting)
    traced = _decide(rule, hidden, W, drafts, q, spec, B)
    first = lambda: sum(n for s, n in sampled if s == criteria.dropmatch_js.TAIL_LADDER[0])  # noqa: E731
    traced_n, sampled[:] = first(), []
    run = _decide(rule, hidden, W, drafts, q, spec, B, trace=False)
    assert torch.equal(run.num_accepted, traced.num_accepted)
    assert 0 < first() < traced_n, (first(), traced_n)
    assert {s for s, _ in sampled} >= set(
        criteria.dropmatch_js.TAIL_LADDER[:2]
    )  # the ladder climbed


def test_tail_sample_weights_stay_unbiased_for_a_tail_far_below_the_top():
    """Every token beyond the candidates ~95-100 nats below the top-1: the weighted sum of the plain head's
    shifted exponent over the sample still estimates its exact tail sum."""
    g = torch.Generator().manual_seed(0)
    V, C = 200, 16
    plain = -95.0 - 5.0 * torch.rand(1, V, generator=g)
    plain[0, :C] = 5.0 * torch.rand(C, generator=g)
    q = torch.full((1, V), 1e-3 / (V - C))
    q[0, :C] = (1 - 1e-3) / C
    ids = torch.arange(C)[None]
    tail, w = tail_sample(plain, q, ids, 64)
    shift = plain[0, :C].max()
    exact = (plain[0, C:].double() - shift).exp().sum()
    estimate = (w[0].double() * (plain[0, tail[0]].double() - shift).exp()).sum()
    assert float(estimate / exact) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize("V, N", [(600, 8), (40, 64), (64, 64)])
def test_the_first_rung_reuses_the_rounds_heads_at_the_plain_top(V, N):
    """The escape's first rung (E <= N) takes the heads at the plain head's top-N from the round's token heads
    instead of computing them again: the same heads, ids and weights as computing every entry afresh, also where
    ``dropmatch.sparse_top_n`` reaches or passes the vocabulary (the round's top then holds min(N, V) tokens)."""
    from criteria.round_heads import dropped_inputs
    from criteria.sparse_heads import exact_heads_at
    from tests.helpers.verify_inputs import hidden_round

    B, L, K = 4, 5, 5
    hidden, W, drafts, q = hidden_round(11, B, V, 0.5, L=L)
    spec = HeadSpec(K, 0.3, top_n=N, escape=True)

    def gens():
        return [torch.Generator().manual_seed(30 + i) for i in range(B)]

    target, _, cand, closures = round_heads(
        hidden,
        LMHead(W),
        spec,
        gens(),
        positions=L,
        draft_probs=q,
        draft_token_ids=drafts,
        lazy=True,
    )
    # fresh generators with the same seeds: the same streams, hence the round's masks
    dropped = dropped_inputs(hidden, gens(), K, 0.3, L).view(B, L, K, -1)
    afresh = exact_heads_at(dropped, W, None, target[:, :L], q, N, cand[..., :-2])
    rows, positions = torch.tensor([0, 1, 3, 3]), torch.tensor([0, 4, 2, 3])
    for rung in criteria.dropmatch_js.TAIL_LADDER[:1]:
        got, want = closures["exact_heads"](rows, positions, rung), afresh(rows, positions, rung)
        assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
        assert torch.equal(got[0], want[0])
