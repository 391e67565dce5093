"""Distribution tests of the field's rules at T > 0: block verification is lossless and accepts at least as much as
token-wise speculative sampling; SGLang's target-only test is lossless for a deterministic draft; the same
chi-square tests reject the lossy settings (they have power)."""

from __future__ import annotations

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.block import BlockVerification
from criteria.ensemble import StaticEnsemble
from criteria.rejection import RejectionSampling
from criteria.thresholds import ProbThreshold
from tests.helpers.verify_inputs import chi2, gen, make_round

# scipy.stats.chi2.ppf(0.999, df) for df = 3, 15
CHI2_CRIT = {3: 16.266, 15: 37.697}
N, V, L, T = 20000, 4, 2, 0.7


@pytest.fixture(scope="module")
def dists():
    """Context-free target / draft distributions per absolute position 0..3 (logits and probabilities)."""
    g = gen(101)
    logits = 1.5 * torch.randn(4, V, generator=g)  # target, positions 0..3
    q = torch.softmax(1.5 * torch.randn(4, V, generator=g), -1)  # draft, positions 0..3
    return logits, torch.softmax(logits / T, -1), q


def first_two_tokens(rule, dists, seed: int) -> torch.Tensor:
    """The first two output tokens of N independent generations (a second round for rows whose first round
    emitted one token); ``[N, 2]`` int64."""
    logits, _, q = dists
    g = gen(seed)

    def round_at(start: int, rows: int, s: int):
        drafts = torch.stack(
            [
                torch.multinomial(q[start + i], rows, replacement=True, generator=g)
                for i in range(L)
            ],
            1,
        )  # [rows, L]
        inputs = make_round(
            torch.zeros(rows, L + 1, V),
            drafts,
            q[start : start + L].expand(rows, L, V),
            temperature=T,
        )
        inputs.target_logits = logits[start : start + L + 1].expand(rows, L + 1, V).clone()
        inputs.generator = gen(s)
        out = rule(inputs)
        tokens = torch.cat([drafts, torch.zeros(rows, 1, dtype=torch.long)], 1)
        tokens[torch.arange(rows), out.num_accepted] = out.next_token_ids
        return tokens, out.num_accepted

    tokens, acc = round_at(0, N, seed + 1)
    out = tokens[:, :2].clone()
    short = (
        acc == 0
    )  # one token emitted: its second token comes from a round starting at position 1
    if bool(short.any()):
        second, _ = round_at(1, int(short.sum()), seed + 2)
        out[short, 1] = second[:, 0]
    return out


def joint_chi2(pairs: torch.Tensor, p: torch.Tensor) -> float:
    counts = torch.bincount(pairs[:, 0] * V + pairs[:, 1], minlength=V * V)
    return chi2(counts, (p[0][:, None] * p[1][None, :]).flatten())


@pytest.mark.parametrize(
    "rule,lossless",
    [
        (BlockVerification(), True),
        (RejectionSampling(), True),
        (StaticEnsemble(0.3), False),
    ],
    ids=["block_verify", "rejection", "static_ensemble_0.3"],
)
def test_first_two_tokens_follow_the_target(dists, rule, lossless):
    """Joint law of the first two output tokens = p_0 x p_1 (chi-square, 16 cells, alpha = 1e-3)."""
    _, p, _ = dists
    stat = joint_chi2(first_two_tokens(rule, dists, seed=7), p)
    assert (stat < CHI2_CRIT[15]) is lossless, stat


def test_block_accepts_at_least_as_many_tokens_as_token_wise(dists):
    """Block verification is optimal among valid verifiers: E[tau_block] >= E[tau_token] (Sun et al. Thm. 2)."""
    logits, _, q = dists
    g = gen(3)
    drafts = torch.stack(
        [torch.multinomial(q[i], N, replacement=True, generator=g) for i in range(L)], 1
    )

    def mean_tau(rule):
        inputs = make_round(
            torch.zeros(N, L + 1, V), drafts, q[:L].expand(N, L, V), temperature=T, seed=9
        )
        inputs.target_logits = logits[: L + 1].expand(N, L + 1, V).clone()
        tau = rule(inputs).num_accepted.double()
        return tau.mean().item(), tau.std().item() / N**0.5

    (mb, sb), (mt, st) = mean_tau(BlockVerification()), mean_tau(RejectionSampling())
    assert mb > mt - 4 * (sb**2 + st**2) ** 0.5, (mb, mt)


def test_block_gains_where_a_late_draft_is_overweighted():
    """p = (.5,.5),(.3,.7); q = (.8,.2),(.6,.4); drafts (0, 1): token-wise accepts position 0 with prob .625 and
    then position 1 always (E = 1.25); block accepts both always (h_1 = 1)."""
    M = 4000
    p = torch.tensor([[0.5, 0.5], [0.3, 0.7], [0.5, 0.5]]).expand(M, 3, 2)
    q = torch.tensor([[0.8, 0.2], [0.6, 0.4]]).expand(M, 2, 2)
    d = torch.tensor([0, 1]).expand(M, 2)
    tok = (
        RejectionSampling()(make_round(p, d, q, temperature=1.0, seed=4))
        .num_accepted.double()
        .mean()
    )
    blk = (
        BlockVerification()(make_round(p, d, q, temperature=1.0, seed=4))
        .num_accepted.double()
        .mean()
    )
    assert blk.item() == 2.0 and abs(tok.item() - 1.25) < 0.05


@pytest.mark.parametrize("t_acc,lossless", [(1.0, True), (0.5, False)])
def test_prob_threshold_is_lossless_for_a_deterministic_draft(t_acc, lossless):
    """A greedy drafter always proposes token 2: accepting with probability p(2) and otherwise sampling p without
    token 2 gives exactly p (SGLang's defaults); threshold_acc = 0.5 over-accepts token 2."""
    g = gen(21)
    p = torch.softmax(torch.randn(V, generator=g), -1)
    inputs = make_round(
        p.expand(N, 2, V), torch.full((N, 1), 2), temperature=1.0, seed=22
    )  # logits log p: softmax(log p / 1) = p
    out = ProbThreshold(1.0, t_acc)(inputs)
    first = torch.where(out.num_accepted >= 1, 2, out.next_token_ids)
    stat = chi2(torch.bincount(first, minlength=V), p)
    assert (stat < CHI2_CRIT[3]) is lossless, stat
