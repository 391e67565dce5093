"""The field's training-free rules on hand-made distributions: each decision equals its formula's value, the
lossless end equals greedy_match / rejection, the permissive end accepts every draft, knobs are refused by name."""

from __future__ import annotations

import inspect
import math

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.base import Criterion
from criteria.bild import BigLittleDecoder
from criteria.block import BlockVerification, block_statistics
from criteria.ensemble import StaticEnsemble
from criteria.fly import FLy, top_k_entropy
from criteria.fsd import FuzzySpeculative, fsd_divergence
from criteria.greedy_match import GreedyMatch
from criteria.registry import CRITERIA
from criteria.rejection import RejectionSampling
from criteria.relaxed import RelaxedTopK
from criteria.rules import FIELD_RULES
from criteria.thresholds import ProbThreshold
from criteria.typical import TypicalAcceptance, typical_threshold
from tests.helpers.verify_inputs import gen, make_round, one_hot, random_round

EXPECTED = {  # key: (needs_draft_probs, greedy only)
    "fly": (True, False),
    "fsd": (True, False),
    "typical": (False, False),
    "relaxed_topk": (False, True),
    "prob_threshold": (False, False),
    "static_ensemble": (True, False),
    "bild": (True, True),
    "block_verify": (True, False),
}


def same(a, b) -> bool:
    return torch.equal(a.accept_mask, b.accept_mask) and torch.equal(
        a.next_token_ids, b.next_token_ids
    )


@pytest.mark.parametrize("key", FIELD_RULES)
def test_registered_pure_and_rebuildable(key):
    rule = CRITERIA.get(key)()
    assert isinstance(rule, Criterion) and rule.name == key
    assert (rule.needs_heads, rule.needs_hidden, rule.needs_draft_probs) == (
        False,
        False,
        EXPECTED[key][0],
    )
    assert set(EXPECTED) == set(FIELD_RULES)
    # the vLLM hook rebuilds a rule in the worker from its __init__ parameters read back from the object
    # (runners.backends.vllm_dropmatch_hook.rule_settings, which needs vLLM to import)
    params = [
        p.name
        for p in inspect.signature(type(rule).__init__).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    settings = {name: getattr(rule, name) for name in params}
    assert repr(CRITERIA.get(key)(**settings)) == repr(rule)


@pytest.mark.parametrize("key", FIELD_RULES)
def test_every_rule_runs_greedy_and_where_defined_sampling(key):
    """Shapes, prefix closure, determinism per seed, no global RNG."""
    rule = CRITERIA.get(key)()
    for T in (0.0, 0.8):
        if T > 0 and EXPECTED[key][1]:
            with pytest.raises(ValueError, match=r"decoding.temperature=0.8 .*allowed: 0"):
                rule(random_round(4, 3, 7, seed=1, temperature=T))
            continue
        state = torch.get_rng_state()
        a = rule(random_round(64, 4, 9, seed=2, temperature=T), trace=True)
        b = rule(random_round(64, 4, 9, seed=2, temperature=T))
        assert torch.equal(torch.get_rng_state(), state)
        assert same(a, b) and a.accept_mask.shape == (64, 4) and a.next_token_ids.shape == (64,)
        m = a.accept_mask.long()
        assert torch.equal(m, m.cumprod(dim=-1)) and torch.equal(a.num_accepted, m.sum(-1))
        assert torch.equal(
            a.trace["target_token_ids"], random_round(64, 4, 9, 2).target_logits[:, :4].argmax(-1)
        )


# ---- FLy -----------------------------------------------------------------------------------------------------

HIGH = [0.4, 0.35, 0.15, 0.1]  # top-3 entropy 1.0185 nats
LOW = [0.97, 0.01, 0.01, 0.01]  # top-3 entropy 0.1217 nats


def top3_entropy(p):
    return -sum(x * math.log(x) for x in sorted(p, reverse=True)[:3])


def test_fly_entropy_is_the_top3_entropy_of_the_target():
    got = top_k_entropy(make_round([HIGH, LOW], [0]).target_logits[0], 0.0, 3)
    torch.testing.assert_close(
        got, torch.tensor([top3_entropy(HIGH), top3_entropy(LOW)]), atol=1e-5, rtol=0
    )
    # at T > 0 the probabilities are softmax(logits / T); k is capped at V
    assert torch.allclose(top_k_entropy(torch.zeros(2, 5), 0.7, 9), torch.full((2,), math.log(5)))


def _fly_round(first, drafts):
    """L = 4: position 0 has distribution ``first`` (argmax 0), positions 1-4 are peaked on token 2."""
    peaked = one_hot([2], 4, 0.97)[0].tolist()
    return make_round([first] + [peaked] * 4, drafts)


@pytest.mark.parametrize(
    "first,drafts,window,accepted,nxt",
    [
        (
            HIGH,
            [1, 2, 2, 2],
            2,
            4,
            2,
        ),  # uncertain position, next 2 native: deferred, then all native
        (LOW, [1, 2, 2, 2], 2, 0, 0),  # confident target: a normal rejection, its argmax emitted
        (HIGH, [1, 2, 3, 2], 2, 0, 0),  # the window holds a native rejection: not deferred
        (HIGH, [1, 2, 3, 2], 1, 2, 2),  # W = 1 sees only position 1: deferred, then rejected at 2
        (HIGH, [1, 2, 2, 2], 3, 4, 2),  # 0 + 3 < 4: the window fits
        (HIGH, [2, 2, 2, 1], 2, 3, 2),  # a rejection at 3 has no window after it: normal rejection
    ],
)
def test_fly_greedy_defers_as_vllm_states(first, drafts, window, accepted, nxt):
    out = FLy(entropy_threshold=0.3, window_size=window)(_fly_round(first, drafts), trace=True)
    assert out.num_accepted.tolist() == [accepted] and out.next_token_ids.tolist() == [nxt]


def test_fly_greedy_needs_a_finite_target_logit_for_the_draft():
    first = [0.5, 0.0, 0.3, 0.2]  # p(draft 1) = 0: logit -inf, never deferred
    out = FLy(window_size=2)(_fly_round(first, [1, 2, 2, 2]))
    assert out.num_accepted.tolist() == [0]


def test_fly_sampling_defers_a_certain_rejection():
    """p(d_0) = 1e-6, q(d_0) = 1: the native test rejects unless u_0 < 1e-6; p = q after it (always accepted)."""
    V = 4
    first = [1e-6, 0.5, 0.3, 0.2 - 1e-6]
    rest = [0.1, 0.2, 0.3, 0.4]
    target = [first] + [rest] * 4
    q = [one_hot([0], V)[0].tolist()] + [rest] * 3
    for thr, accepted in ((0.3, 4), (5.0, 0)):
        inputs = make_round(target, [0, 3, 3, 3], q, temperature=1.0, seed=5)
        u = torch.rand((1, 4), generator=gen(5))
        assert float(u[0, 0]) > 1e-6
        out = FLy(entropy_threshold=thr, window_size=3)(inputs, trace=True)
        assert out.num_accepted.tolist() == [accepted]
        assert out.trace["deferred"][0, 0].item() is (accepted == 4)


@pytest.mark.parametrize("T", [0.0, 0.9])
def test_fly_without_deferral_is_sd(T):
    """entropy_threshold above ln 3 never defers: greedy_match at T = 0, rejection (same draws) at T > 0."""
    ref = GreedyMatch() if T == 0 else RejectionSampling()
    out = FLy(entropy_threshold=1.2, window_size=2)(random_round(300, 5, 8, seed=3, temperature=T))
    exp = ref(random_round(300, 5, 8, seed=3, temperature=T))
    assert same(out, exp) and len(set(out.num_accepted.tolist())) > 2
    # and deferral does happen at the default threshold on the same rounds
    lossy = FLy(window_size=2)(random_round(300, 5, 8, seed=3, temperature=T))
    assert int(lossy.num_accepted.sum()) > int(exp.num_accepted.sum())


def test_fly_knobs_and_draft_length():
    with pytest.raises(
        ValueError, match=r"^method.kwargs.window_size=0 is invalid; allowed: an integer"
    ):
        FLy(window_size=0)
    with pytest.raises(ValueError, match=r"^method.kwargs.entropy_threshold=-0.1 is invalid"):
        FLy(entropy_threshold=-0.1)
    with pytest.raises(ValueError, match=r"^method.kwargs.entropy_top_k=0 is invalid"):
        FLy(entropy_top_k=0)
    with pytest.raises(
        ValueError, match=r"^L=1 is invalid with method.criterion='fly'; allowed: an integer >= 2"
    ):
        FLy().check_round(L=1, temperature=0.0)
    with pytest.raises(
        ValueError, match=r"window_size=5 is invalid with L=5; allowed: an integer in \[1, 4\]"
    ):
        FLy(window_size=5).check_round(L=5, temperature=0.0)
    FLy().check_round(L=2, temperature=0.7)  # default W = min(6, L - 1) = 1
    assert (FLy().window(3), FLy().window(10), FLy(window_size=2).window(10)) == (2, 6, 2)


# ---- FSD -----------------------------------------------------------------------------------------------------


def test_fsd_divergences_are_their_formulas():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.2, 0.2, 0.6])
    kl_pq = sum(a * math.log(a / b) for a, b in zip(p.tolist(), q.tolist()))
    kl_qp = sum(b * math.log(b / a) for a, b in zip(p.tolist(), q.tolist()))
    assert fsd_divergence(p, q, "kl").item() == pytest.approx(kl_pq, abs=1e-6)
    assert fsd_divergence(p, q, "reverse_kl").item() == pytest.approx(kl_qp, abs=1e-6)
    # q has mass where p has none: reverse KL is infinite, forward KL finite
    p0, q0 = torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.4, 0.4, 0.2])
    assert math.isinf(fsd_divergence(p0, q0, "reverse_kl").item())
    assert math.isfinite(fsd_divergence(p0, q0, "kl").item())


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_fsd_accepts_a_mismatch_below_the_threshold(T):
    p = [0.5, 0.3, 0.2]  # argmax 0; the draft proposes 2 from a near-identical q
    near = [0.45, 0.3, 0.25]
    D = fsd_divergence(torch.tensor(p), torch.tensor(near), "reverse_kl").item()
    inputs = lambda: make_round([p, p], [2], [near], temperature=T, seed=0)  # noqa: E731
    assert FuzzySpeculative(threshold=D * 1.01)(inputs()).num_accepted.tolist() == [1]
    if T == 0:
        out = FuzzySpeculative(threshold=D * 0.99)(inputs())
        assert out.num_accepted.tolist() == [0] and out.next_token_ids.tolist() == [0]


@pytest.mark.parametrize("T", [0.0, 0.7])
def test_fsd_ends(T):
    ref = GreedyMatch() if T == 0 else RejectionSampling()
    for div in ("js", "reverse_kl", "kl"):  # threshold 0 (strict <) is exact SD
        out = FuzzySpeculative(threshold=0.0, divergence=div)(
            random_round(200, 4, 8, 4, temperature=T)
        )
        assert same(out, ref(random_round(200, 4, 8, 4, temperature=T)))
    out = FuzzySpeculative(threshold=0.7, divergence="js")(
        random_round(200, 4, 8, 4, temperature=T)
    )
    assert bool(out.accept_mask.all())  # JS <= ln 2 < 0.7


def test_fsd_knobs():
    with pytest.raises(
        ValueError, match=r"^method.kwargs.divergence='tv' is invalid; allowed: js, reverse_kl, kl"
    ):
        FuzzySpeculative(divergence="tv")
    with pytest.raises(ValueError, match=r"^method.kwargs.threshold=-1 is invalid"):
        FuzzySpeculative(threshold=-1)


# ---- typical acceptance --------------------------------------------------------------------------------------


def vllm_threshold(p, eps, alpha):
    H = -sum(x * math.log(x + 1e-5) for x in p)
    return min(eps, alpha * math.exp(-H))


@pytest.mark.parametrize(
    "p,eps,alpha",
    [
        ([0.5, 0.3, 0.15, 0.05], 0.09, 0.3),
        ([0.9, 0.06, 0.04, 0.0], 0.09, 0.1),
        ([0.9, 0.06, 0.04, 0.0], 0.09, 0.05),
    ],
)
def test_typical_threshold_and_decision(p, eps, alpha):
    thr = vllm_threshold(p, eps, alpha)
    got = typical_threshold(torch.tensor(p), eps, alpha).item()
    assert got == pytest.approx(thr, rel=1e-5)
    rule = TypicalAcceptance(eps, alpha)
    for tok, prob in enumerate(p):
        out = rule(make_round([p, p], [tok]))
        assert out.num_accepted.tolist() == [int(prob > thr)]
        assert out.next_token_ids.tolist() == [
            0
        ]  # the target's argmax: at the rejection, or the bonus


def test_typical_emits_the_argmax_even_when_sampling_and_samples_the_bonus():
    V, N = 6, 4000
    p = torch.softmax(torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0]), -1)
    rejected = TypicalAcceptance(0.09, 0.3)(
        make_round([p.tolist(), p.tolist()], [5], temperature=1.0, seed=1)
    )
    assert rejected.num_accepted.tolist() == [0] and rejected.next_token_ids.tolist() == [0]
    inputs = make_round(
        torch.stack([p, p])[None].expand(N, 2, V),
        torch.zeros(N, 1, dtype=torch.long),
        temperature=1.0,
        seed=2,
    )
    out = TypicalAcceptance()(inputs)
    assert bool(out.accept_mask.all())
    freq = torch.bincount(out.next_token_ids, minlength=V).double() / N
    assert torch.allclose(freq, p.double(), atol=0.03)


def test_typical_ends_and_superset_of_greedy():
    rr = lambda: random_round(300, 4, 9, 6, temperature=0.0)  # noqa: E731
    out = TypicalAcceptance(posterior_threshold=0.0)(rr())
    assert bool(out.accept_mask.all())  # every draft has positive target probability here
    argmax_drafts = rr()
    argmax_drafts.draft_token_ids = argmax_drafts.target_logits[:, :4].argmax(-1)
    assert bool(TypicalAcceptance(1.0, 1.0)(argmax_drafts).accept_mask.all())
    assert (TypicalAcceptance()(rr()).num_accepted >= GreedyMatch()(rr()).num_accepted).all()
    with pytest.raises(
        ValueError,
        match=r"^method.kwargs.posterior_threshold=1.5 is invalid; allowed: a number in \[0, 1\]",
    ):
        TypicalAcceptance(posterior_threshold=1.5)
    with pytest.raises(ValueError, match=r"^method.kwargs.posterior_alpha=-1 is invalid"):
        TypicalAcceptance(posterior_alpha=-1)


# ---- relaxed top-k / delta -----------------------------------------------------------------------------------

P_REL = [0.4, 0.35, 0.2, 0.05]


@pytest.mark.parametrize(
    "top_k,delta,accepted_tokens",
    [
        (1, 0.5, {0}),
        (3, 0.1, {0, 1}),
        (3, 0.25, {0, 1, 2}),
        (3, 1.0, {0, 1, 2}),
        (4, 0.36, {0, 1, 2, 3}),
    ],
)
def test_relaxed_topk_delta(top_k, delta, accepted_tokens):
    rule = RelaxedTopK(top_k, delta)
    for tok in range(4):
        out = rule(make_round([P_REL, P_REL], [tok]))
        ok = tok in accepted_tokens
        assert out.num_accepted.tolist() == [int(ok)] and out.next_token_ids.tolist() == [0]


def test_relaxed_ends_and_greedy_only():
    rr = lambda: random_round(300, 4, 9, 7, temperature=0.0)  # noqa: E731
    assert same(RelaxedTopK()(rr()), GreedyMatch()(rr()))  # the engine's defaults (1, 0.0)
    assert same(RelaxedTopK(top_k=5, delta=0.0)(rr()), GreedyMatch()(rr()))
    assert bool(RelaxedTopK(top_k=9, delta=1.0)(rr()).accept_mask.all())
    with pytest.raises(
        ValueError,
        match=r"^decoding.temperature=0.5 is not defined for method.criterion='relaxed_topk'",
    ):
        RelaxedTopK().check_round(L=3, temperature=0.5)
    with pytest.raises(
        ValueError, match=r"^method.kwargs.top_k=0 is invalid; allowed: an integer >= 1"
    ):
        RelaxedTopK(top_k=0)


# ---- SGLang probability thresholds ---------------------------------------------------------------------------


def test_prob_threshold_greedy_single():
    p = [0.5, 0.3, 0.2]
    assert ProbThreshold(0.25)(make_round([p, p], [1])).num_accepted.tolist() == [1]
    out = ProbThreshold(0.35)(make_round([p, p], [1]))
    assert out.num_accepted.tolist() == [0] and out.next_token_ids.tolist() == [0]
    assert same(
        ProbThreshold()(random_round(300, 4, 9, 8, temperature=0.0)),
        GreedyMatch()(random_round(300, 4, 9, 8, temperature=0.0)),
    )


def test_prob_threshold_sampling_coin_and_residual():
    """accept iff u <= p/t_acc or p >= t_single, u the round's first draws; the resample never returns the
    rejected draft."""
    N, V = 2000, 5
    p = torch.tensor([0.05, 0.6, 0.2, 0.1, 0.05])
    target = p.expand(N, 2, V)
    drafts = torch.full((N, 1), 1)
    for t_single, t_acc in ((1.0, 1.0), (1.0, 0.8), (0.5, 1.0)):
        out = ProbThreshold(t_single, t_acc)(make_round(target, drafts, temperature=1.0, seed=9))
        u = torch.rand((N, 1), generator=gen(9))
        exp = (u <= 0.6 / t_acc) | torch.tensor(0.6 >= t_single)
        assert torch.equal(out.accept_mask, exp)
        assert not bool((out.next_token_ids[~exp[:, 0]] == 1).any())


def test_prob_threshold_knobs_and_permissive_end():
    assert bool(
        ProbThreshold(threshold_single=0.0)(
            random_round(100, 4, 9, 1, temperature=0.9)
        ).accept_mask.all()
    )
    with pytest.raises(
        ValueError,
        match=r"^method.kwargs.threshold_acc=0 is invalid; allowed: a number in \(0, 1\]",
    ):
        ProbThreshold(threshold_acc=0)
    with pytest.raises(ValueError, match=r"^method.kwargs.threshold_single=1.1 is invalid"):
        ProbThreshold(threshold_single=1.1)


# ---- static ensemble -----------------------------------------------------------------------------------------


def test_static_ensemble_greedy_compares_with_the_mixture_argmax():
    p, q = [0.5, 0.4, 0.1], [0.1, 0.8, 0.1]
    assert StaticEnsemble(0.5)(make_round([p, p], [1], [q])).num_accepted.tolist() == [
        1
    ]  # v = .3 .6 .1
    out = StaticEnsemble(0.9)(make_round([p, p], [1], [q]))  # v = .46 .44 .1
    assert out.num_accepted.tolist() == [0] and out.next_token_ids.tolist() == [0]
    # the emitted token is argmax v, not the target's argmax (0 here)
    p2, q2 = [0.5, 0.0, 0.45, 0.05], [0.0, 0.6, 0.4, 0.0]  # v = .25 .3 .425 .025
    out = StaticEnsemble(0.5)(make_round([p2, p2], [1], [q2]))
    assert out.num_accepted.tolist() == [0] and out.next_token_ids.tolist() == [2]


@pytest.mark.parametrize("T", [0.0, 0.8])
def test_static_ensemble_ends(T):
    ref = GreedyMatch() if T == 0 else RejectionSampling()
    rr = lambda: random_round(300, 4, 9, 10, temperature=T)  # noqa: E731
    assert same(StaticEnsemble(1.0)(rr()), ref(rr()))
    greedy_drafts = (
        rr()
    )  # w = 0: every draft sampled from q (T > 0) or equal to argmax q (T = 0) passes
    if T == 0:
        greedy_drafts.draft_token_ids = greedy_drafts.draft_probs.argmax(-1)
    assert bool(StaticEnsemble(0.0)(greedy_drafts).accept_mask.all())
    with pytest.raises(
        ValueError, match=r"^method.kwargs.weight=-0.2 is invalid; allowed: a number in \[0, 1\]"
    ):
        StaticEnsemble(-0.2)


def test_static_ensemble_sampling_acceptance_rate_is_sum_min_q_v():
    """P(accept d ~ q) = sum_x q(x) min(1, v(x)/q(x)) = sum_x min(q, v), v = w p + (1 - w) q."""
    N, V, w = 20000, 10, 0.4
    g = gen(11)
    p = torch.softmax(torch.randn(V, generator=g), -1)
    q = torch.softmax(torch.randn(V, generator=g), -1)
    drafts = torch.multinomial(q, N, replacement=True, generator=g)[:, None]
    inputs = make_round(p.expand(N, 2, V), drafts, q.expand(N, 1, V), temperature=1.0, seed=12)
    rate = StaticEnsemble(w)(inputs).accept_mask.double().mean().item()
    alpha = torch.minimum(q, w * p + (1 - w) * q).sum().item()
    assert abs(rate - alpha) < 5 * (alpha * (1 - alpha) / N) ** 0.5


# ---- BiLD ----------------------------------------------------------------------------------------------------


def test_bild_fallback_and_rollback():
    V = 4
    e9 = math.exp(-9)
    p_low = [1 - 3 * e9, e9, e9, e9]  # -log p(1) = 9
    p_ok = [0.5, math.exp(-7), 0.5 - 2 * math.exp(-7), math.exp(-7)]  # -log p(1) = 7
    confident, unsure = one_hot([1], V, 0.5)[0].tolist(), one_hot([1], V, 0.3)[0].tolist()
    rule = BigLittleDecoder(fallback_threshold=0.35, rollback_threshold=8.0)
    assert rule(make_round([p_ok, p_ok], [1], [confident])).num_accepted.tolist() == [1]
    out = rule(make_round([p_low, p_low], [1], [confident]))  # rollback: -log p = 9 > 8
    assert out.num_accepted.tolist() == [0] and out.next_token_ids.tolist() == [0]
    out = rule(make_round([p_ok, p_ok], [0], [unsure]))  # fallback even for the target's argmax
    assert out.num_accepted.tolist() == [0] and out.next_token_ids.tolist() == [0]


def test_bild_permissive_end_and_greedy_only():
    assert bool(
        BigLittleDecoder(0.0, 100.0)(random_round(200, 4, 9, 13, temperature=0.0)).accept_mask.all()
    )
    with pytest.raises(
        ValueError, match=r"^decoding.temperature=1.0 is not defined for method.criterion='bild'"
    ):
        BigLittleDecoder()(random_round(2, 3, 5, 1, temperature=1.0))
    with pytest.raises(ValueError, match=r"^method.kwargs.fallback_threshold=2 is invalid"):
        BigLittleDecoder(fallback_threshold=2)


# ---- block verification --------------------------------------------------------------------------------------


def test_block_statistics_by_hand():
    """c_0 = .5/.8, c_1 = min(c_0 * .7/.4, 1); R_1 = sum max(c_0 p_1 - q_1, 0); h_0 = R_1 / (R_1 + 1 - c_0); h_1 = c_1."""
    p = torch.tensor([[[0.5, 0.5], [0.3, 0.7], [0.5, 0.5]]])
    q = torch.tensor([[[0.8, 0.2], [0.6, 0.4]]])
    c, h = block_statistics(p, q, torch.tensor([[0, 1]]))
    c0 = 0.5 / 0.8
    R1 = max(c0 * 0.3 - 0.6, 0) + max(c0 * 0.7 - 0.4, 0)
    torch.testing.assert_close(c, torch.tensor([[c0, 1.0]]))
    torch.testing.assert_close(h, torch.tensor([[R1 / (R1 + 1 - c0), 1.0]]))


def test_block_accepts_the_last_success_not_the_first_failure():
    """h = (0.0909, 1): u_0 > h_0 in ~91% of rows, yet tau = 2 in every row (u_1 <= h_1 = 1 always)."""
    N = 500
    p = torch.tensor([[0.5, 0.5], [0.3, 0.7], [0.5, 0.5]]).expand(N, 3, 2)
    q = torch.tensor([[0.8, 0.2], [0.6, 0.4]]).expand(N, 2, 2)
    drafts = torch.tensor([0, 1]).expand(N, 2)
    out = BlockVerification()(make_round(p, drafts, q, temperature=1.0, seed=3), trace=True)
    u0 = torch.rand((N, 2), generator=gen(3))[:, 0]
    assert (u0 > out.trace["block_h"][:, 0]).double().mean() > 0.8
    assert out.num_accepted.tolist() == [2] * N and bool(out.accept_mask.all())


def test_block_greedy_is_greedy_match():
    rr = lambda: random_round(200, 4, 9, 14, temperature=0.0)  # noqa: E731
    assert same(BlockVerification()(rr()), GreedyMatch()(rr()))
