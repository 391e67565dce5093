"""Auto-Judge in the batched HF loop: B=2 gives each sample the decisions and the judge's features of B=1
(tiny pair, float32), and the draft-hidden feature is the draft's state after reading each draft token."""

from __future__ import annotations

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.autojudge import AutoJudge, JudgeHead
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.datasets.base import Sample
from tests.helpers.tiny import load_tiny_pair

PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7? Answer step by step.",
    "A B C D",
    "The final answer is",
]
SAMPLES = [Sample(f"aj/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(PROMPTS)]
L, CAP = 4, 32


class FeatureTrace(AutoJudge):
    """Auto-Judge whose trace also carries the features it was given (``dd`` [B, L, d_draft], ``dt`` [B, L, d])."""

    def _trace(self, inputs):
        return {
            **super()._trace(inputs),
            "dd": inputs.draft_hidden,
            "dt": inputs.target_hidden[:, 1:],
        }


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


@pytest.fixture(scope="module")
def judge(pair):
    F = pair.draft.config.hidden_size + pair.target.config.hidden_size
    g = torch.Generator().manual_seed(3)
    return JudgeHead(
        weight=torch.randn(F, generator=g) / F**0.5,
        bias=0.0,
        mean=torch.zeros(F),
        scale=torch.ones(F),
        features="dd_dt",
    )


def run(pair, rule, B):
    dec = DecodingConfig(num_speculative_tokens=L, max_new_tokens=CAP, trace=True)
    return {
        r.sample_id: r
        for r in HFLoopBackend(pair, batch_size=B, prefix_caching=False).generate(
            SAMPLES, dec, rule, HeadSpec()
        )
    }


def test_batch_of_two_gives_the_decisions_and_features_of_one(pair, judge):
    one = run(pair, FeatureTrace(0.5, judge), 1)
    two = run(pair, FeatureTrace(0.5, judge), 2)
    greedy = run(pair, CRITERIA.get("greedy_match")(), 2)
    rounds = 0
    for sid, a in one.items():
        b = two[sid]
        assert (
            b.output_token_ids == a.output_token_ids
            and b.accepted_per_round == a.accepted_per_round
        ), sid
        assert len(a.trace) == len(b.trace) == len(a.accepted_per_round)
        for ra, rb in zip(a.trace, b.trace):
            for k in ("dd", "dt", "p_important"):
                assert torch.allclose(torch.tensor(ra[k]), torch.tensor(rb[k]), atol=1e-4), (sid, k)
            rounds += 1
    assert rounds > 10
    # the judge decides something: it accepts mismatches greedy SD rejects (so the comparison is not vacuous)
    assert sum(sum(r.accepted_per_round) for r in one.values()) > sum(
        sum(r.accepted_per_round) for r in greedy.values()
    )


def test_draft_hidden_is_after_reading_each_draft_token(pair, judge):
    """dd at position i equals a plain draft forward over prompt + committed + d_1..d_i (last position)."""
    res = run(pair, FeatureTrace(0.5, judge), 2)[SAMPLES[1].sample_id]
    be = HFLoopBackend(pair)
    prompt = be.encode(SAMPLES[1])
    committed = [res.output_token_ids[0]]  # the prefill's token
    checked = 0
    for a, rnd in zip(res.accepted_per_round, res.trace):
        new = res.output_token_ids[
            len(committed) : len(committed) + a + 1
        ]  # d_1..d_a, then the correction
        for i in range(
            min(a, len(rnd["dd"]))
        ):  # an accepted draft d_{i+1} is committed: rebuild its context
            seq = torch.tensor([prompt + committed + new[: i + 1]])
            h = pair.draft.model(seq).last_hidden_state[0, -1]
            assert torch.allclose(h, torch.tensor(rnd["dd"][i]), atol=1e-4), i
            checked += 1
        committed += new
        if checked >= 6:
            break
    assert checked > 0
