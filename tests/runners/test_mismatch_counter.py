"""Accepted drafts that differ from the target's greedy token (``spec.num_accepted_mismatched``), counted by the
HF loop from each round's ``AcceptResult.target_argmax``: 0 for exact SD, the off-argmax accepts of a lossy rule
(checked against the rule's own trace), and only tokens in the output."""

from __future__ import annotations

import pytest

import criteria.rules  # noqa: F401
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.output import count_mismatched
from runners.datasets.base import Sample
from runners.records.counters import SpecDecodeCounters, acceptance_histogram
from tests.helpers.tiny import load_tiny_pair

PROMPTS = [
    "Janet has 3 apples and buys 5 more.",
    "def add(a, b):",
    "A B C D",
    "Write a short answer.",
]
SAMPLES = [Sample(f"m/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


def _run(pair, rule, trace=False):
    be = HFLoopBackend(pair, batch_size=2)
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=24, seed=1, trace=trace)
    return list(be.generate(SAMPLES, dec, rule, HeadSpec()))


def test_exact_sd_accepts_nothing_off_the_argmax(pair):
    res = _run(pair, CRITERIA.get("rejection")())
    assert all(r.counters.num_accepted_mismatched == 0 for r in res)
    assert sum(r.counters.num_accepted_tokens for r in res) > 0


def test_a_permissive_rule_counts_what_its_trace_shows(pair):
    """typical acceptance with epsilon 0 accepts every draft: the count equals, round by round, the accepted
    drafts (read from the output: the first token comes from the prefill, then each round commits its accepted
    drafts and one more) whose id differs from the target's greedy id in the rule's trace."""
    res = _run(pair, CRITERIA.get("typical")(posterior_threshold=0.0), trace=True)
    total = 0
    for r in res:
        out, pos, flags = r.output_token_ids, 1, []
        for a, t in zip(r.accepted_per_round, r.trace):
            flags.append([int(d != g) for d, g in zip(out[pos : pos + a], t["target_token_ids"])])
            pos += a + 1
        assert r.counters.num_accepted_mismatched == sum(map(sum, flags))
        total += r.counters.num_accepted_mismatched
    assert total > 0  # a random tiny target disagrees with a random tiny draft


def test_count_keeps_only_tokens_in_the_output():
    assert count_mismatched([[1, 0, 1], [1, 1]], [3, 1]) == 3
    assert count_mismatched([[1, 1]], [0]) == 0


def test_counters_add_and_store_the_count_only_when_counted():
    a = SpecDecodeCounters(2, 1, 2, 2, [1, 1], num_accepted_mismatched=1)
    b = SpecDecodeCounters(2, 1, 2, 0, [0, 0])
    assert (a + b).num_accepted_mismatched == 1
    assert "num_accepted_mismatched" not in b.to_dict()
    assert (b + b).num_accepted_mismatched is None
    assert acceptance_histogram([2, 0, 2, 1]) == {0: 1, 1: 1, 2: 2}


def test_vllm_backend_counts_the_same_way_from_its_logged_rounds():
    """The vLLM backend's per-request counters (from the hook's logged rounds) carry the same count as the
    HF loop's: flags cut to the output, 0 at L = 0, absent when a round did not record them."""
    from types import SimpleNamespace

    from runners.backends.vllm_counters import logged_mismatches, output_counters

    rounds = [SimpleNamespace(mismatched=[1, 0, 1]), SimpleNamespace(mismatched=[1, 1])]
    c, kept = output_counters([3, 3], [3, 2], 6, 3, logged_mismatches(rounds))
    assert kept == [3, 1] and c.num_accepted_mismatched == 3
    assert output_counters([], [], 4, 0)[0].num_accepted_mismatched == 0
    assert logged_mismatches([*rounds, SimpleNamespace(mismatched=None)]) is None
    assert "num_accepted_mismatched" not in output_counters([3], [1], 2, 3, None)[0].to_dict()
