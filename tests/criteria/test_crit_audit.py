"""The exactness audit of the sparse variant (criteria/audit.py): which rounds, same masks, untouched streams."""

from __future__ import annotations

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.audit import (
    AuditTally,
    audit_draw,
    audited_verify_round,
    compare,
    is_audited,
    pool,
)
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.registry import CRITERIA
from criteria.verify import verify_round
from tests.helpers.verify_inputs import hidden_round


def _gens(B: int, base: int = 300) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(base + i) for i in range(B)]


@pytest.mark.parametrize("share", [0.05, 0.3])
def test_audited_share_is_within_a_binomial_bound(share):
    """A long synthetic run (400 samples x 250 rounds): the audited fraction is within the two-sided 1e-6
    binomial interval of ``share``, in the early and the late rounds alike, and two seeds choose (nearly)
    independent rounds."""
    from scipy.stats import binom

    samples, rounds = [f"gsm8k/{i}" for i in range(400)], 250
    chosen = [[is_audited(share, 0, s, r) for r in range(rounds)] for s in samples]
    other = [[is_audited(share, 1, s, r) for r in range(rounds)] for s in samples]

    def within(k: int, n: int, p: float) -> bool:
        lo, hi = binom.interval(1 - 1e-6, n, p)
        return lo <= k <= hi

    n = len(samples) * rounds
    assert within(sum(map(sum, chosen)), n, share)
    half = rounds // 2
    assert within(sum(sum(c[:half]) for c in chosen), n // 2, share)
    assert within(sum(sum(c[half:]) for c in chosen), n // 2, share)
    both = sum(a and b for ca, cb in zip(chosen, other) for a, b in zip(ca, cb))
    assert within(both, n, share * share)
    assert not any(is_audited(0.0, 0, s, r) for s in samples[:10] for r in range(rounds))
    assert all(is_audited(1.0, 0, s, r) for s in samples[:10] for r in range(rounds))


def test_audit_draw_is_a_function_of_seed_sample_and_round_only():
    """No torch RNG is read or moved (the global generator's state is the same after), and each key part
    changes the draw."""
    before = torch.random.get_rng_state()
    u = audit_draw(3, "humaneval/7", 12)
    assert torch.equal(before, torch.random.get_rng_state())
    assert 0.0 <= u < 1.0 and u == audit_draw(3, "humaneval/7", 12)
    assert len({u, audit_draw(4, "humaneval/7", 12), audit_draw(3, "humaneval/8", 12)}) == 3
    assert audit_draw(3, "humaneval/7", 13) != u


@pytest.mark.parametrize("rule", ["dropmatch_js", "dropmatch_naive"])
@pytest.mark.parametrize("T", [0.0, 0.8])
def test_audit_leaves_the_run_decision_and_streams_untouched(rule, T):
    """The run's result and its generators' states after the round are bit for bit those of ``verify_round``
    without the audit, whatever rows are audited."""
    B = 12
    hidden, W, drafts, q = hidden_round(21, B, 300, 0.7)
    r, spec = CRITERIA.get(rule)(), HeadSpec(5, 0.3, top_n=16, audit_share=0.5)

    def run(rows):
        gens = _gens(B)
        res, exact = audited_verify_round(
            hidden,
            LMHead(W),
            drafts,
            r,
            spec,
            temperature=T,
            generators=gens,
            audit_rows=rows,
            draft_probs=q,
        )
        return res, exact, [g.get_state() for g in gens]

    plain_gens = _gens(B)
    plain = verify_round(
        hidden, LMHead(W), drafts, r, spec, temperature=T, generators=plain_gens, draft_probs=q
    )
    for rows in ([], [3], [0, 5, 11, 7], list(range(B))):
        res, exact, states = run(rows)
        assert torch.equal(res.accept_mask, plain.accept_mask)
        assert torch.equal(res.next_token_ids, plain.next_token_ids)
        assert all(torch.equal(a, b.get_state()) for a, b in zip(states, plain_gens))
        assert (exact is None) == (not rows)
        if rows:
            assert exact.shape == (len(rows), drafts.shape[1]) and exact.dtype == torch.bool


@pytest.mark.parametrize("T", [0.0, 0.8])
def test_audit_is_the_exact_rule_on_the_same_masks(T):
    """The audit's verdicts of rows [2, 9, 4] are those an exact round from the same generator states makes for
    those rows (same masks, same uniforms at T > 0), and on these rounds they differ from the sparse verdict
    somewhere (so the comparison is not vacuous)."""
    B, rows = 16, [2, 9, 4]
    hidden, W, drafts, q = hidden_round(33, B, 400, 0.8)
    r = CRITERIA.get("dropmatch_js")()
    exact_all = verify_round(
        hidden,
        LMHead(W),
        drafts,
        r,
        HeadSpec(5, 0.3),
        temperature=T,
        generators=_gens(B),
        draft_probs=q,
    )
    res, exact = audited_verify_round(
        hidden,
        LMHead(W),
        drafts,
        r,
        HeadSpec(5, 0.3, top_n=2, audit_share=1.0),
        temperature=T,
        generators=_gens(B),
        audit_rows=rows,
        draft_probs=q,
    )
    _equal_where_compared(exact, exact_all.accept_mask[rows], res.num_accepted[rows], T)
    every = audited_verify_round(
        hidden,
        LMHead(W),
        drafts,
        r,
        HeadSpec(5, 0.3, top_n=2, audit_share=1.0),
        temperature=T,
        generators=_gens(B),
        audit_rows=list(range(B)),
        draft_probs=q,
    )
    _equal_where_compared(every[1], exact_all.accept_mask, every[0].num_accepted, T)
    assert not torch.equal(every[0].accept_mask, every[1])  # top-2 candidates: some verdict differs


def _equal_where_compared(exact, full, run_accepted, T):
    """The audit's verdicts equal the whole exact round's at every position :func:`compare` reads; at T = 0 the
    positions after the cut (the audited rows' longest compared prefix) are False, at T > 0 there is no cut."""
    L = full.shape[1]
    if T > 0:
        assert torch.equal(exact, full)
        return
    cut = min(int(run_accepted.max()) + 1, L)
    for i, a in enumerate(run_accepted.tolist()):
        n = min(a + 1, L)
        assert torch.equal(exact[i, :n], full[i, :n]), i
    assert torch.equal(exact[:, :cut], full[:, :cut]) and not exact[:, cut:].any()


@pytest.mark.parametrize("rule", ["dropmatch_js", "dropmatch_naive"])
def test_the_audit_cut_is_exercised_and_agrees(rule):
    """Over rounds whose audited rows all reject early, the exact rule decides fewer positions than L (the cut
    saves K full-vocabulary head rows per position), and its verdicts still equal the whole round's where compared."""
    L, cuts = 5, []
    for seed in range(12):
        hidden, W, drafts, q = hidden_round(100 + seed, 6, 200, 0.5)
        r = CRITERIA.get(rule)()
        spec = HeadSpec(5, 0.3, top_n=8, audit_share=1.0)
        full = verify_round(
            hidden,
            LMHead(W),
            drafts,
            r,
            HeadSpec(5, 0.3),
            temperature=0.0,
            generators=_gens(6),
            draft_probs=q,
        )
        for row in range(6):
            res, exact = audited_verify_round(
                hidden,
                LMHead(W),
                drafts,
                r,
                spec,
                temperature=0.0,
                generators=_gens(6),
                audit_rows=[row],
                draft_probs=q,
            )
            cuts.append(min(int(res.num_accepted[row]) + 1, L))
            _equal_where_compared(exact, full.accept_mask[[row]], res.num_accepted[[row]], 0.0)
    assert min(cuts) < L and max(cuts) <= L


@pytest.mark.parametrize("rule", ["dropmatch_js", "dropmatch_naive", "rejection"])
def test_max_positions_decides_the_round_cut_to_its_first_drafts(rule):
    """``verify_round(max_positions=P)`` at T = 0: the accept mask of the whole round's first P positions,
    generators advanced as by the whole round (the masks of all L + 1 positions are drawn); bad P refused."""
    hidden, W, drafts, q = hidden_round(7, 8, 300, 0.6)
    r, spec = CRITERIA.get(rule)(), HeadSpec(5, 0.3) if rule != "rejection" else HeadSpec()
    g_full, full = _gens(8), None
    full = verify_round(
        hidden, LMHead(W), drafts, r, spec, temperature=0.0, generators=g_full, draft_probs=q
    )
    for P in (1, 3, 5):
        g = _gens(8)
        cut = verify_round(
            hidden,
            LMHead(W),
            drafts,
            r,
            spec,
            temperature=0.0,
            generators=g,
            draft_probs=q,
            max_positions=P,
        )
        assert torch.equal(cut.accept_mask, full.accept_mask[:, :P])
        assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(g, g_full))
    with pytest.raises(ValueError, match="target_logits must be"):
        verify_round(
            hidden,
            LMHead(W),
            drafts,
            r,
            spec,
            temperature=0.0,
            generators=_gens(8),
            draft_probs=q,
            target_logits=torch.zeros(8, 5, 300),
        )
    for bad in (0, 6, True, 2.5):
        with pytest.raises(ValueError, match="max_positions"):
            verify_round(
                hidden,
                LMHead(W),
                drafts,
                r,
                spec,
                temperature=0.0,
                generators=_gens(8),
                draft_probs=q,
                max_positions=bad,
            )


@pytest.mark.parametrize("rule", ["dropmatch_js", "dropmatch_naive"])
def test_sparse_covering_the_vocabulary_agrees_everywhere(rule):
    """With 2N >= V the candidates are the whole vocabulary: at T = 0 the audited exact verdict equals the
    run's at every position of every row, and the tally counts every round and position as agreeing."""
    B, L, V = 32, 5, 64
    hidden, W, drafts, q = hidden_round(12, B, V, 0.6, d=16)
    res, exact = audited_verify_round(
        hidden,
        LMHead(W),
        drafts,
        CRITERIA.get(rule)(),
        HeadSpec(5, 0.3, top_n=V // 2, audit_share=1.0),
        temperature=0.0,
        generators=_gens(B),
        audit_rows=list(range(B)),
        draft_probs=q,
    )
    assert 0 < int(res.num_accepted.sum()) < B * L
    assert torch.equal(exact, res.accept_mask)
    tally = AuditTally()
    for i in range(B):
        tally.add(i, res.accept_mask[i].tolist(), exact[i].tolist())
    rec = tally.record(B)
    assert rec["rounds"] == rec["rounds_equal"] == B and rec["differ"] == []
    assert (
        rec["positions"] == rec["positions_equal"] == int((res.num_accepted + 1).clamp(max=L).sum())
    )


def test_compare_counts_the_traced_window():
    """Compared: the run's accepted prefix + its first rejected position; the round agrees iff the accepted
    lengths are equal."""
    T, F = True, False
    assert compare([T, T, F, F, F], [T, T, F, F, F]) == (3, 3, True)
    assert compare([T, T, F, F, F], [T, T, T, F, F]) == (3, 2, False)  # exact accepts one more
    assert compare([T, T, T, F, F], [T, F, F, F, F]) == (4, 2, False)  # sparse accepts two more
    assert compare([T, T, T], [T, T, T]) == (3, 3, True)  # all accepted: L positions
    with pytest.raises(ValueError, match="different lengths"):
        compare([T], [T, F])


def test_tally_record_keeps_the_kept_rounds_and_pool_sums_a_run():
    T, F = True, False
    tally = AuditTally()
    tally.add(0, [T, F, F], [T, F, F])
    tally.add(4, [T, T, F], [T, F, F])
    tally.add(9, [F, F, F], [F, F, F])
    assert tally.record(10) == {
        "rounds": 3,
        "rounds_equal": 2,
        "positions": 2 + 3 + 1,
        "positions_equal": 2 + 2 + 1,
        "audited": [0, 4, 9],
        "differ": [4],
    }
    assert tally.record(5)["audited"] == [0, 4]  # rounds cut from the output do not count
    recs = [
        {"audit": tally.record(10), "accepted_per_round": [0] * 10},
        {"audit": AuditTally().record(3), "accepted_per_round": [1, 2, 3]},
        {
            "accepted_per_round": [1]
        },  # a record without the audit (another run's shape) is not counted
    ]
    assert pool(recs) == {
        "audit/rounds": 3,
        "audit/rounds_equal": 2,
        "audit/positions": 6,
        "audit/positions_equal": 5,
        "audit/rounds_total": 13,
    }
    assert pool([{"accepted_per_round": [1]}]) == {}


def test_bad_audit_inputs_are_refused():
    hidden, W, drafts, q = hidden_round(1, 4, 50, 0.5)
    r = CRITERIA.get("dropmatch_js")()
    kw = dict(temperature=0.0, draft_probs=q)
    with pytest.raises(ValueError, match="audit_rows"):
        audited_verify_round(
            hidden,
            LMHead(W),
            drafts,
            r,
            HeadSpec(5, 0.3, top_n=8),
            generators=_gens(4),
            audit_rows=[4],
            **kw,
        )
    with pytest.raises(ValueError, match="audit_rows"):
        audited_verify_round(
            hidden,
            LMHead(W),
            drafts,
            r,
            HeadSpec(5, 0.3, top_n=8),
            generators=_gens(4),
            audit_rows=[1, 1],
            **kw,
        )
    with pytest.raises(ValueError, match="sparse_top_n=null"):
        audited_verify_round(
            hidden,
            LMHead(W),
            drafts,
            r,
            HeadSpec(5, 0.3),
            generators=_gens(4),
            audit_rows=[0],
            **kw,
        )


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"top_n": 8, "audit_share": 1.5}, "dropmatch.audit_share"),
        ({"top_n": 8, "audit_share": -0.1}, "dropmatch.audit_share"),
        ({"top_n": 8, "audit_share": True}, "dropmatch.audit_share"),
        ({"audit_share": 0.05}, "sparse_top_n=null"),
    ],
)
def test_head_spec_audit_share_validated(kw, match):
    with pytest.raises(ValueError, match=match):
        HeadSpec(5, 0.3, **kw)


def test_head_spec_audit_share_stored():
    spec = HeadSpec(5, 0.3, top_n=64, audit_share=0.05)
    assert spec.audit_share == 0.05 and spec.as_dict()["audit_share"] == 0.05
    assert "audit_share" not in HeadSpec(5, 0.3, top_n=64).as_dict()
    assert HeadSpec(0, 0.0, audit_share=0.5).audit_share == 0.0  # no heads: nothing to audit
