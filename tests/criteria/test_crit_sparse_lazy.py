"""The sparse DropMatch JS test builds Eq. (6)'s support only where it decides the round, and decides there as the
whole support does."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.base import VerifyInputs
from criteria.candidates import head_token_candidates, top_ids
from criteria.dropmatch_js import TAIL_LADDER
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.registry import CRITERIA
from criteria.round_heads import round_heads
from criteria.verify import _target_argmax, verify_round
from tests.helpers.verify_inputs import decide_hidden_round, hidden_round


def test_head_token_candidates_add_the_draft_token_once():
    """Top-N of the plain head, then the draft token (a duplicate when already there); the bonus position repeats
    the top-1, masked."""
    logits = torch.tensor(
        [[[0.0, 5.0, 1.0, 4.0], [3.0, 0.0, 2.0, 1.0], [0.0, 1.0, 9.0, 2.0]]]
    )  # [1, 3, 4]
    drafts = torch.tensor([[2, 0]])  # position 1's draft is its top-1
    ids, dup = head_token_candidates(logits, drafts, 2)
    assert ids.tolist() == [[[1, 3, 2], [0, 2, 0], [2, 3, 2]]]
    assert dup.tolist() == [[[False, False, False], [False, False, True], [False, False, True]]]


def _counted(hidden, W, drafts, q, spec: HeadSpec, calls: list, **fields) -> VerifyInputs:
    """A lazy sparse round of ``hidden_round``'s parts whose Eq. (6) entry (``sparse_support``, or with the escape
    ``exact_heads`` at its first rung) records the ``(row, position)`` pairs it is asked for in ``calls``."""
    B, L = drafts.shape
    gens = [torch.Generator().manual_seed(50 + i) for i in range(B)]
    target, heads, cand, closures = round_heads(
        hidden,
        LMHead(W),
        spec,
        gens,
        positions=L,
        draft_probs=q,
        draft_token_ids=drafts,
        lazy=True,
    )
    name = "exact_heads" if spec.escape else "sparse_support"
    inner = closures[name]

    def asked(rows, positions, *rest):
        if (
            not rest or rest[0] == TAIL_LADDER[0]
        ):  # the escape's first rung: where Eq. (6) is asked at all
            calls.extend(zip(rows.tolist(), positions.tolist()))
        return inner(rows, positions, *rest)

    return VerifyInputs(
        draft_token_ids=drafts,
        target_logits=target,
        draft_probs=q,
        head_logits=heads,
        head_candidates=cand,
        **{**closures, name: asked},
        **fields,
    )


def _inputs(seed: int, B: int, L: int, top_n: int, calls: list) -> VerifyInputs:
    hidden, W, drafts, q = hidden_round(seed, B, 400, 0.5, L=L)
    return _counted(hidden, W, drafts, q, HeadSpec(5, 0.3, top_n=top_n), calls)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reached_positions_only_and_the_whole_supports_decision(seed):
    """Without a trace the support is built exactly at the positions that decide (reached, not accepted by the
    majority), in waves, and the round decides as with the support at every position (the traced path)."""
    B, L = 8, 5
    rule = CRITERIA.get("dropmatch_js")()
    lazy_calls, full_calls = [], []
    lazy = rule(_inputs(seed, B, L, 8, lazy_calls))
    full = rule(_inputs(seed, B, L, 8, full_calls), trace=True)
    assert torch.equal(lazy.accept_mask, full.accept_mask)
    assert torch.equal(lazy.next_token_ids, full.next_token_ids)
    assert len(full_calls) == B * L  # the whole support: every position
    by_majority = full.trace["draft_agrees_majority"]  # [B, L]
    deciding = {
        (b, t)
        for b in range(B)
        for t in range(min(int(full.num_accepted[b]) + 1, L))
        if not bool(by_majority[b, t])
    }
    assert sorted(lazy_calls) == sorted(deciding)
    assert 0 < len(lazy_calls) < B * L
    accepted_by_js = [(b, t) for b, t in lazy_calls if t < int(full.num_accepted[b])]
    assert accepted_by_js, (
        "no row was tested again after Eq. (6) accepted it: the waves are not exercised"
    )


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_verify_round_lazy_equals_traced(temperature):
    """Through verify_round (each row alone at T > 0): the untraced round accepts what the traced one does."""
    B, L = 6, 5
    hidden, W, drafts, q = hidden_round(9, B, 400, 0.5, L=L)
    rule = CRITERIA.get("dropmatch_js")()

    def run(trace):
        return verify_round(
            hidden,
            LMHead(W),
            drafts,
            rule,
            HeadSpec(5, 0.3, top_n=8),
            temperature=temperature,
            generators=[torch.Generator().manual_seed(70 + i) for i in range(B)],
            draft_probs=q,
            trace=trace,
        )

    lazy, traced = run(False), run(True)
    assert torch.equal(lazy.num_accepted, traced.num_accepted)
    assert torch.equal(lazy.next_token_ids, traced.next_token_ids)


@pytest.mark.parametrize("V", [128 * 300, 128 * 300 + 5, 151665, 151936, 1000])
def test_top_ids_are_topks_set(V):
    """The block scan finds the same top-k as torch.topk (distinct values: the same ids), largest first, at every
    block width it picks (128 for the sparse variant's top-64, narrower for the escape's top-512 and top-2,048),
    with whole blocks (Qwen's 151,936 ids), with a short last block (its top entry planted there) and on rows too
    short for blocks (torch.topk itself)."""
    g = torch.Generator().manual_seed(V)
    logits = torch.randn(3, 4, V, generator=g)
    logits[0, 0, 5000 % V : 5000 % V + 40] += (
        10.0  # the top-k crowded in one block and its neighbours
    )
    for k in (1, 16, 64, 512, 2048):
        got = top_ids(logits, k)
        want = logits.topk(min(k, V), dim=-1)
        assert torch.equal(got.sort(dim=-1).values, want.indices.sort(dim=-1).values)
        assert torch.equal(logits.gather(-1, got), want.values)


@pytest.mark.parametrize("escape", [False, True])
@pytest.mark.parametrize("seed", [4, 5, 6])
def test_autojudge_dropmatch_asks_eq6_only_where_neither_rule_accepts(seed, escape):
    """Auto-Judge + DropMatch on a sparse round: untraced, the support (or the escape's sample) is built only at
    positions neither the judge nor the majority accepts, up to each row's first position both reject, and the
    round decides as the traced one, which tests every position."""
    from criteria.autojudge import JudgeHead, judge_accepts
    from criteria.autojudge_dropmatch import AutoJudgeDropMatch

    B, L, d, d_draft = 8, 5, 24, 6
    hidden, W, drafts, q = hidden_round(seed, B, 400, 0.5, L=L, d=d)
    g = torch.Generator().manual_seed(seed)
    judge = JudgeHead(
        weight=torch.randn(d_draft + d, generator=g),
        bias=0.0,
        mean=torch.zeros(d_draft + d),
        scale=torch.ones(d_draft + d),
        features="dd_dt",
    )
    draft_hidden = torch.randn(B, L, d_draft, generator=g)

    def inputs(calls):
        spec = HeadSpec(5, 0.3, top_n=8, escape=escape)
        return _counted(
            hidden, W, drafts, q, spec, calls, target_hidden=hidden, draft_hidden=draft_hidden
        )

    rule = AutoJudgeDropMatch(0.5, judge)
    lazy_calls, full_calls = [], []
    lazy = rule(inputs(lazy_calls))
    full = rule(inputs(full_calls), trace=True)
    assert torch.equal(lazy.accept_mask, full.accept_mask)
    assert torch.equal(lazy.next_token_ids, full.next_token_ids)
    skip = full.trace["draft_agrees_majority"] | judge_accepts(judge, inputs([]), 0.5)  # [B, L]
    deciding = {
        (b, t)
        for b in range(B)
        for t in range(min(int(full.num_accepted[b]) + 1, L))
        if not bool(skip[b, t])
    }
    assert sorted(lazy_calls) == sorted(deciding)
    assert 0 < len(lazy_calls) < len(set(full_calls))
    assert bool(full.trace["accepted_by_judge"].any()), (
        "the judge accepted nothing: the OR is not exercised"
    )


@pytest.mark.parametrize("spec", ["exact", "sparse", "escape"])
@pytest.mark.parametrize("seed", range(6))
def test_include_target_decides_as_the_traced_round(seed, spec):
    """``include_target`` accepts the target's argmax after the JS test: untraced, the test must not stop at the
    first position it rejects (the target's token there is accepted, and the positions after it are decided
    too). Before, untraced rounds accepted shorter prefixes than traced ones."""

    B = 24
    hidden, W, drafts, q = hidden_round(seed, B, 400, 0.5, L=6)
    heads = {
        "exact": HeadSpec(5, 0.3),
        "sparse": HeadSpec(5, 0.3, top_n=8),
        "escape": HeadSpec(5, 0.3, top_n=8, escape=True),
    }[spec]
    rule = CRITERIA.get("dropmatch_js")(include_target=True)
    lazy = decide_hidden_round(rule, hidden, W, drafts, q, heads, B, trace=False)
    traced = decide_hidden_round(rule, hidden, W, drafts, q, heads, B, trace=True)
    assert torch.equal(lazy.num_accepted, traced.num_accepted)
    assert torch.equal(lazy.next_token_ids, traced.next_token_ids)


def _argmax_inputs(hidden, W, drafts, q, spec: HeadSpec, L: int, B: int) -> VerifyInputs:
    """A lazy sparse round's plain logits and head candidates, as :func:`criteria.verify._target_argmax` reads them."""
    gens = [torch.Generator().manual_seed(i) for i in range(B)]
    target, heads, cand, closures = round_heads(
        hidden, LMHead(W), spec, gens, positions=L, draft_probs=q, draft_token_ids=drafts, lazy=True
    )
    return VerifyInputs(
        draft_token_ids=drafts,
        target_logits=target,
        draft_probs=q,
        head_logits=heads,
        head_candidates=cand,
        **closures,
    )


@pytest.mark.parametrize("tied", [0, 2, 8])
def test_target_argmax_from_the_candidates_is_torchs_argmax(tied):
    """The round's ``target_argmax`` read off the sparse candidates is ``argmax`` of the plain logits, the first of
    tied maxima included (``tied`` more tokens share a position's maximum; 8 more overflow the top-N of 8)."""
    B, L, V, N = 3, 4, 300, 8
    hidden, W, drafts, q = hidden_round(7, B, V, match=0.5, L=L)
    if tied:  # rows of W copied: the same logit at the same position
        W = W.clone()
        top = (hidden @ W.T).argmax(-1).flatten().unique()
        for t in top.tolist():  # copies on both sides: the first of the tied maxima has a lower id
            W[max(0, t - tied // 2) : t] = W[t]
            W[t + 1 : t + 1 + tied - tied // 2] = W[t]
    # every other draft the target's own token, so that include_target's test (below) has one to accept
    own = (hidden[:, :L] @ W.T).argmax(dim=-1)  # [B, L]
    drafts = torch.where(torch.arange(L) % 2 == 0, own, drafts)
    spec = HeadSpec(5, 0.3, top_n=N)
    inputs = _argmax_inputs(hidden, W, drafts, q, spec, L, B)
    target = inputs.target_logits
    want = target[:, :L].argmax(dim=-1)
    assert torch.equal(_target_argmax(inputs, N, L), want)
    rule = CRITERIA.get("dropmatch_js")()
    res = decide_hidden_round(rule, hidden, W, drafts, q, spec, B, trace=False)
    assert torch.equal(res.target_argmax, want)
    # the next token, read off the candidates' argmax where a draft was rejected: argmax's token, ties included
    at = target[torch.arange(B), res.num_accepted]  # [B, V]
    assert torch.equal(res.next_token_ids, at.argmax(dim=-1))
    ties = (target[:, :L] == target[:, :L].amax(-1, keepdim=True)).sum(-1)  # [B, L]
    assert int(ties.max()) >= 1 + tied  # the case the test names occurs
    # include_target's own token test reads the same greedy tokens: the verdict of argmax over V
    inc = CRITERIA.get("dropmatch_js")(include_target=True)
    given = inc(dataclasses.replace(inputs, target_greedy=want))
    over_v = inc(inputs)  # target_greedy None: argmax over V
    assert torch.equal(given.accept_mask, over_v.accept_mask)
    assert torch.equal(given.next_token_ids, over_v.next_token_ids)
    assert bool((inputs.draft_token_ids == want).any())  # a draft the target's own token accepts


@pytest.mark.parametrize("top_n", [20, 21, 22, 40])
def test_target_argmax_with_a_top_n_beyond_the_vocabulary(top_n):
    """``dropmatch.sparse_top_n`` at or above V (20 here): the round's ``target_argmax`` is still ``argmax``, and a
    NaN logit ranks first, as for ``argmax``."""
    B, L, V = 2, 3, 20
    hidden, W, drafts, q = hidden_round(3, B, V, match=0.5, L=L)
    rule = CRITERIA.get("dropmatch_js")()
    res = decide_hidden_round(
        rule, hidden, W, drafts, q, HeadSpec(3, 0.3, top_n=top_n), B, trace=False
    )
    assert torch.equal(res.target_argmax, (hidden[:, :L] @ W.T).argmax(dim=-1))
    spec = HeadSpec(3, 0.3, top_n=min(top_n, 8))
    inputs = _argmax_inputs(hidden, W, drafts, q, spec, L, B)
    target = inputs.target_logits.clone()
    target[0, 1, 13] = float("nan")
    inputs = dataclasses.replace(inputs, target_logits=target)
    assert torch.equal(_target_argmax(inputs, spec.top_n, L), target[:, :L].argmax(dim=-1))


def test_finish_round_with_the_greedy_tokens_is_the_argmax_at_every_stop():
    """``finish_round(greedy=...)`` at T = 0 emits what it emits without them: the argmax at a rejected position,
    and over the bonus position's logits where every draft was accepted (rows stopping at 0, 2 and L)."""
    from criteria.common import finish_round

    B, L, V = 3, 4, 50
    logits = torch.randn(B, L + 1, V, generator=torch.Generator().manual_seed(5))
    ok = torch.tensor([[False] * L, [True, True, False, True], [True] * L])
    greedy = logits[:, :L].argmax(dim=-1)
    plain = finish_round(ok, logits, 0.0, None)
    fast = finish_round(ok, logits, 0.0, None, greedy=greedy)
    assert fast.num_accepted.tolist() == [0, 2, L]
    assert torch.equal(fast.next_token_ids, plain.next_token_ids)
    # the rejected rows' tokens come from ``greedy``, the bonus row's from the logits
    poisoned = greedy.clone()
    poisoned[0, 0] = V + 1
    assert finish_round(ok, logits, 0.0, None, greedy=poisoned).next_token_ids[0] == V + 1
