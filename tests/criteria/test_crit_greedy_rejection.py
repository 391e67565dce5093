"""greedy_match and lossless rejection sampling: one-hot cases, determinism, distribution tests at V=10."""

from __future__ import annotations

import pytest
import torch

from criteria.base import Criterion, VerifyInputs
from criteria.greedy_match import GreedyMatch
from criteria.rejection import RejectionSampling

# Chi-square critical value, df = V - 1 = 9, alpha = 1e-3 (scipy.stats.chi2.ppf(0.999, 9)).
CHI2_CRIT_DF9 = 27.877
V = 10


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def one_hot_logits(token_ids: list[list[int]], vocab: int = 6) -> torch.Tensor:
    """[B, P, vocab] logits whose argmax is token_ids (10 on the token, 0 elsewhere)."""
    ids = torch.tensor(token_ids)
    return 10.0 * torch.nn.functional.one_hot(ids, vocab).float()


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs.double() * counts.sum()
    return float(((counts.double() - expected) ** 2 / expected).sum())


class TestGreedyMatch:
    def test_perfect_match_gives_bonus(self):
        out = GreedyMatch()(VerifyInputs(torch.tensor([[1, 2, 3]]), one_hot_logits([[1, 2, 3, 4]])))
        assert out.accept_mask.tolist() == [[True, True, True]]
        assert out.num_accepted.tolist() == [3] and out.next_token_ids.tolist() == [4]

    def test_mismatch_at_position_0(self):
        out = GreedyMatch()(VerifyInputs(torch.tensor([[5, 2, 3]]), one_hot_logits([[1, 2, 3, 4]])))
        assert out.accept_mask.tolist() == [[False, False, False]]
        assert out.num_accepted.tolist() == [0] and out.next_token_ids.tolist() == [1]

    def test_prefix_closed_and_mixed_batch(self):
        drafts = torch.tensor(
            [[1, 0, 3], [1, 2, 0], [0, 2, 3]]
        )  # pos 2 matches in row 0 but comes after a miss
        target = one_hot_logits([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 4]])
        out = GreedyMatch()(VerifyInputs(drafts, target), trace=True)
        assert out.accept_mask.tolist() == [
            [True, False, False],
            [True, True, False],
            [False, False, False],
        ]
        assert out.num_accepted.tolist() == [1, 2, 0]
        assert out.next_token_ids.tolist() == [2, 3, 1]
        assert out.trace["target_token_ids"].tolist() == [[1, 2, 3]] * 3

    def test_empty_draft(self):
        out = GreedyMatch()(
            VerifyInputs(torch.zeros(2, 0, dtype=torch.int64), one_hot_logits([[4], [2]]))
        )
        assert out.accept_mask.shape == (2, 0) and out.num_accepted.tolist() == [0, 0]
        assert out.next_token_ids.tolist() == [4, 2]

    def test_bad_shapes_raise(self):
        with pytest.raises(ValueError, match="target_logits"):
            GreedyMatch()(VerifyInputs(torch.tensor([[1, 2]]), one_hot_logits([[1, 2]])))
        with pytest.raises(ValueError, match="draft_token_ids"):
            GreedyMatch()(VerifyInputs(torch.tensor([[1.0, 2.0]]), one_hot_logits([[1, 2, 3]])))


def random_round(B: int, L: int, seed: int, temperature: float = 1.0, match_rate: float = 0.7):
    """Random target logits, draft probs, and drafts that often equal the target argmax."""
    g = gen(seed)
    target = 2 * torch.randn(B, L + 1, V, generator=g)
    draft_probs = torch.softmax(2 * torch.randn(B, L, V, generator=g), -1)
    drafts = torch.randint(0, V, (B, L), generator=g)
    use_argmax = torch.rand(B, L, generator=g) < match_rate
    drafts = torch.where(use_argmax, target[:, :L].argmax(-1), drafts)
    return VerifyInputs(drafts, target, draft_probs, temperature=temperature)


class TestRejection:
    def test_protocol_attributes(self):
        rule = RejectionSampling()
        assert isinstance(rule, Criterion) and isinstance(GreedyMatch(), Criterion)
        assert (rule.name, rule.needs_heads, rule.needs_draft_probs) == ("rejection", False, True)

    def test_temperature_zero_is_greedy_match(self):
        inputs = random_round(64, 4, seed=0, temperature=0.0)
        inputs.draft_probs = None  # not needed at T = 0
        a, b = RejectionSampling()(inputs), GreedyMatch()(inputs)
        assert torch.equal(a.accept_mask, b.accept_mask) and torch.equal(
            a.next_token_ids, b.next_token_ids
        )
        assert len(set(a.num_accepted.tolist())) > 2  # a mix of outcomes, not a trivial batch

    def test_seeded_determinism_and_no_global_rng(self):
        inputs = random_round(256, 4, seed=1)
        state = torch.get_rng_state()
        inputs.generator = gen(11)
        a = RejectionSampling()(inputs)
        inputs.generator = gen(11)
        b = RejectionSampling()(inputs)
        inputs.generator = gen(12)
        c = RejectionSampling()(inputs)
        assert torch.equal(torch.get_rng_state(), state)
        assert torch.equal(a.accept_mask, b.accept_mask) and torch.equal(
            a.next_token_ids, b.next_token_ids
        )
        assert not (
            torch.equal(a.accept_mask, c.accept_mask)
            and torch.equal(a.next_token_ids, c.next_token_ids)
        )

    def test_requires_draft_probs_and_generator_when_sampling(self):
        inputs = random_round(2, 3, seed=0)
        with pytest.raises(ValueError, match="generator"):
            RejectionSampling()(inputs)
        inputs.generator, inputs.draft_probs = gen(0), None
        with pytest.raises(ValueError, match="draft_probs"):
            RejectionSampling()(inputs)
        inputs.temperature = -1.0
        with pytest.raises(ValueError, match="temperature"):
            RejectionSampling()(inputs)

    def test_q_equal_p_always_accepts(self):
        inputs = random_round(500, 3, seed=2, temperature=0.7)
        inputs.draft_probs = torch.softmax(inputs.target_logits[:, :3] / 0.7, -1)
        inputs.generator = gen(3)
        out = RejectionSampling()(inputs, trace=True)
        assert bool(out.accept_mask.all())
        torch.testing.assert_close(out.trace["accept_probs"], torch.ones(500, 3))

    def test_zero_target_prob_always_rejects_and_is_never_recovered(self):
        B = 400
        target = torch.zeros(B, 2, V)
        target[:, 0, 3] = -float("inf")  # p(3) = 0 at position 0
        drafts = torch.full((B, 1), 3)
        q = torch.full((B, 1, V), 1.0 / V)
        out = RejectionSampling()(
            VerifyInputs(drafts, target, q, temperature=1.0, generator=gen(4)), trace=True
        )
        assert out.num_accepted.tolist() == [0] * B
        assert not bool((out.next_token_ids == 3).any())
        assert out.trace["accept_probs"].tolist() == [[0.0]] * B

    def test_empty_draft_samples_bonus(self):
        target = torch.zeros(3, 1, V)
        target[:, 0, 7] = 50.0
        out = RejectionSampling()(
            VerifyInputs(
                torch.zeros(3, 0, dtype=torch.int64),
                target,
                torch.zeros(3, 0, V),
                temperature=1.0,
                generator=gen(0),
            )
        )
        assert out.num_accepted.tolist() == [0, 0, 0] and out.next_token_ids.tolist() == [7, 7, 7]


N_LOSSLESS, L_LOSSLESS, T_LOSSLESS = 20000, 2, 0.5


@pytest.fixture(scope="module")
def lossless_run():
    """One batched round of N identical contexts; drafts sampled from q."""
    g = gen(123)
    logits = torch.randn(L_LOSSLESS + 1, V, generator=g)  # [L+1, V], the same context for every row
    q = torch.softmax(torch.randn(L_LOSSLESS, V, generator=g), -1)  # [L, V]
    drafts = torch.multinomial(
        q, N_LOSSLESS, replacement=True, generator=g
    ).T.contiguous()  # [N, L] ~ q
    inputs = VerifyInputs(
        drafts,
        logits.expand(N_LOSSLESS, -1, -1).clone(),
        q.expand(N_LOSSLESS, -1, -1).clone(),
        temperature=T_LOSSLESS,
        generator=gen(321),
    )
    out = RejectionSampling()(inputs)
    p = torch.softmax(logits / T_LOSSLESS, -1)
    return drafts, out, p, q, logits


class TestRejectionIsLossless:
    """The emitted tokens follow p = softmax(target_logits / T) at every position (V = 10, chi-square)."""

    def test_first_emitted_token_follows_p(self, lossless_run):
        drafts, out, p, q, logits = lossless_run
        first = torch.where(out.num_accepted >= 1, drafts[:, 0], out.next_token_ids)
        counts = torch.bincount(first, minlength=V)
        assert chi2(counts, p[0]) < CHI2_CRIT_DF9
        # the same test rejects the draft distribution and the untempered target (it has power)
        assert chi2(counts, q[0]) > CHI2_CRIT_DF9
        assert chi2(counts, torch.softmax(logits[0], -1)) > CHI2_CRIT_DF9

    def test_second_emitted_token_follows_p(self, lossless_run):
        drafts, out, p, q, _ = lossless_run
        has_second = out.num_accepted >= 1
        second = torch.where(out.num_accepted >= 2, drafts[:, 1], out.next_token_ids)[has_second]
        counts = torch.bincount(second, minlength=V)
        assert counts.sum() > 5000
        assert chi2(counts, p[1]) < CHI2_CRIT_DF9
        assert chi2(counts, q[1]) > CHI2_CRIT_DF9

    def test_bonus_token_follows_p(self, lossless_run):
        _, out, p, q, _ = lossless_run
        bonus = out.next_token_ids[out.num_accepted == L_LOSSLESS]
        counts = torch.bincount(bonus, minlength=V)
        assert counts.sum() > 2000
        assert chi2(counts, p[2]) < CHI2_CRIT_DF9
        assert chi2(counts, torch.full((V,), 1.0 / V)) > CHI2_CRIT_DF9

    def test_acceptance_rate_is_one_minus_total_variation(self, lossless_run):
        _, out, p, q, _ = lossless_run
        alpha = torch.minimum(p[0], q[0]).sum().item()
        rate = out.accept_mask[:, 0].float().mean().item()
        assert abs(rate - alpha) < 5 * (alpha * (1 - alpha) / N_LOSSLESS) ** 0.5
