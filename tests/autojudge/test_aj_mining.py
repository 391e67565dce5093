"""Auto-Judge mining on the tiny pair: labels on a toy task whose right labels are known, the search's
bookkeeping, and features equal to what the decoding backend hands the rule at the same mismatch."""

from __future__ import annotations

import pytest
import torch

from criteria.base import VerifyInputs
from criteria.dropout_heads import HeadSpec
from criteria.greedy_match import GreedyMatch
from runners.autojudge.mining import Tracked, greedy_continue, mine_prompt
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.kv_state import KVState
from runners.datasets.base import Sample
from runners.models.loader import load_pair

PROMPTS = [
    "Janet has 3 apples and buys 5 more.",
    "def add(a, b):",
    "Question: what is 12 times 7?",
    "Step by step, we add the numbers",
    "A B C D. The answer is",
]
CAP = 24


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    spec = lambda role: {"name": role, "local_path": str(tiny_pair_dir / role), "order": ["local"]}  # noqa: E731
    return load_pair({"name": "tiny", "target": spec("target"), "draft": spec("draft")})


def prompt_ids(pair, text):
    return HFLoopBackend(pair).encode(Sample("x", [{"role": "user", "content": text}]))


def never_finished(ids):
    return False


def mine(pair, text, outcome, **kw):
    return mine_prompt(
        Tracked(KVState(pair.target)),
        Tracked(KVState(pair.draft)),
        prompt_ids(pair, text),
        max_new_tokens=CAP,
        finished=never_finished,
        outcome=outcome,
        **kw,
    )


def test_toy_labels_known(pair):
    """Outcome = the first three response tokens: a substitution there changes the answer (important); one
    later cannot (unimportant), and the unimportant one becomes part of the current response."""
    seen_important = seen_unimportant = 0
    for text in PROMPTS:
        item = mine(pair, text, outcome=lambda r: tuple(r[:3]))
        positions = [m.pos for m in item.mismatches]
        assert positions == sorted(set(positions))  # left border moves right
        for m in item.mismatches:
            assert m.important == (m.pos < 3), (text, m.pos)
            assert m.draft_token != m.target_token
            if not m.important:
                assert item.response[m.pos] == m.draft_token  # accepted into the running response
            seen_important += m.important
            seen_unimportant += not m.important
    assert seen_important > 0 and seen_unimportant > 0


def test_alternative_is_the_targets_greedy_continuation(pair):
    """Every unimportant substitution leaves a response that the target decodes greedily after it."""
    text = PROMPTS[0]
    item = mine(
        pair, text, outcome=lambda r: None
    )  # nothing ever changes: every mismatch unimportant
    assert item.mismatches and not any(m.important for m in item.mismatches)
    last = item.mismatches[-1]
    p = prompt_ids(pair, text)
    prefix = p + item.response[: last.pos + 1]
    ref = greedy_continue(Tracked(KVState(pair.target)), prefix, len(p), CAP, never_finished)
    assert ref[len(p) :] == item.response


def test_max_mismatches_truncates(pair):
    item = mine(pair, PROMPTS[1], outcome=lambda r: None, max_mismatches=2)
    assert len(item.mismatches) == 2 and item.truncated


class Recorder(GreedyMatch):
    needs_hidden = True

    def __init__(self):
        self.rounds: list[VerifyInputs] = []

    def __call__(self, inputs, *, trace=False):
        self.rounds.append(inputs)
        return super().__call__(inputs, trace=trace)


def test_features_match_the_decoding_backend(pair):
    """At the first mismatch, mining's DT / DD features equal target_hidden / draft_hidden of the SD round."""
    checked = 0
    for text in PROMPTS:
        item = mine(
            pair, text, outcome=lambda r: tuple(r)
        )  # every mismatch important: response stays the target's
        rec = Recorder()
        out = HFLoopBackend(pair, prefix_caching=False).generate_one(
            Sample("x", [{"role": "user", "content": text}]),
            DecodingConfig(num_speculative_tokens=4, max_new_tokens=CAP),
            rec,
            HeadSpec(),
        )
        assert (
            out.output_token_ids[: len(item.response)] == item.response[: len(out.output_token_ids)]
        )
        produced = 1  # the prefill's token
        for r in rec.rounds:
            drafts, tgt = r.draft_token_ids[0], r.target_logits[0, :-1].argmax(-1)
            miss = (drafts != tgt).nonzero()
            if len(miss):
                j = int(miss[0])
                m = next(
                    x for x in item.mismatches if x.pos >= 1
                )  # pos 0 comes from the prefill, never drafted
                assert m.pos == produced + j and m.draft_token == int(drafts[j])
                assert torch.allclose(m.dt, r.target_hidden[0, j + 1], atol=1e-4)
                assert torch.allclose(m.dd, r.draft_hidden[0, j], atol=1e-4)
                checked += 1
                break
            produced += len(drafts) + 1
    assert checked > 0


def test_prompt_without_answer_is_skipped(pair):
    item = mine(pair, PROMPTS[0], outcome=lambda r: "[invalid]", skip=lambda o: o == "[invalid]")
    assert item.skipped and item.mismatches == [] and len(item.response) == CAP
