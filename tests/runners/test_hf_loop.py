"""The transformers draft-verify loop on a tiny random pair: equivalences, rollback, counters."""

from __future__ import annotations

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.registry import CRITERIA
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.kv_state import KVState
from runners.datasets.base import Sample
from runners.models.loader import load_pair

PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7?",
]


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    spec = lambda role: {"name": role, "local_path": str(tiny_pair_dir / role), "order": ["local"]}  # noqa: E731
    return load_pair({"name": "tiny", "target": spec("target"), "draft": spec("draft")})


def _gen(pair, prompt, L, crit, n=40, prefix_caching=True, **kw):
    be = HFLoopBackend(pair, prefix_caching=prefix_caching)
    s = Sample(f"t/{hash(prompt) % 1000}", [{"role": "user", "content": prompt}])
    return be.generate_one(s, DecodingConfig(num_speculative_tokens=L, max_new_tokens=n, **kw), crit)


@pytest.mark.parametrize("L", [1, 3, 7])
def test_greedy_sd_and_dm_p0_equal_ar(pair, L):
    partial = 0
    for prompt in PROMPTS:
        ar = _gen(pair, prompt, 0, None)
        for crit in (CRITERIA.get("rejection")(), CRITERIA.get("greedy_match")(),
                     CRITERIA.get("dropmatch_js")(K=5, p_drop=0.0), CRITERIA.get("dropmatch_naive")(K=3, p_drop=0.0)):
            out = _gen(pair, prompt, L, crit)
            assert out.output_token_ids == ar.output_token_ids, (crit.name, prompt)
            partial += sum(0 < a < L for a in out.accepted_per_round)
    if L > 1:
        assert partial > 0, "no round with partial acceptance: rollback untested"


def test_counters_invariants(pair):
    out = _gen(pair, PROMPTS[0], 4, CRITERIA.get("dropmatch_js")(K=5, p_drop=0.3), n=60)
    c = out.counters
    assert sum(c.num_accepted_tokens_per_pos) == c.num_accepted_tokens
    assert all(a >= b for a, b in zip(c.num_accepted_tokens_per_pos, c.num_accepted_tokens_per_pos[1:]))
    assert c.num_accepted_tokens <= c.num_draft_tokens <= 4 * c.num_drafts
    assert c.num_drafts == len(out.accepted_per_round)
    assert sum(out.accepted_per_round) == c.num_accepted_tokens


def test_prefix_caching_does_not_change_outputs(pair):
    for prompt in PROMPTS:
        a = _gen(pair, prompt, 3, CRITERIA.get("rejection")(), prefix_caching=True)
        b = _gen(pair, prompt, 3, CRITERIA.get("rejection")(), prefix_caching=False)
        assert a.output_token_ids == b.output_token_ids


def test_same_seed_same_output_and_max_new_tokens(pair):
    crit = CRITERIA.get("dropmatch_js")(K=5, p_drop=0.3)
    a = _gen(pair, PROMPTS[1], 5, crit, n=17, seed=3)
    b = _gen(pair, PROMPTS[1], 5, crit, n=17, seed=3)
    assert a.output_token_ids == b.output_token_ids
    assert len(a.output_token_ids) <= 17


def test_kv_rollback_matches_recompute(pair):
    """Feed, roll back past a partial acceptance, feed again: equals one pass from scratch."""
    prompt, drafts, other = list(range(5, 25)), [30, 31, 32, 33, 34], [40, 41, 42]
    st = KVState(pair.target)
    st.prefill(prompt)
    st.forward(drafts)
    st.rollback(len(prompt) + 2)
    h = st.forward(other)
    ref = KVState(pair.target)
    h_ref = ref.forward(prompt + drafts[:2] + other)[-len(other):]
    assert st.length == ref.length == len(prompt) + 2 + len(other)
    torch.testing.assert_close(h, h_ref, rtol=1e-4, atol=1e-4)


def test_stop_string_cuts_output(pair):
    free = _gen(pair, PROMPTS[0], 3, CRITERIA.get("rejection")(), n=40)
    assert len(free.output_text) > 4
    stop = free.output_text[2:4]
    out = _gen(pair, PROMPTS[0], 3, CRITERIA.get("rejection")(), n=40, stop=[stop])
    assert stop not in out.output_text
    assert free.output_text.startswith(out.output_text)


def test_dropout_path_and_draft_only_decode(pair):
    ar = _gen(pair, PROMPTS[0], 0, None)
    p0 = _gen(pair, PROMPTS[0], 0, None, ar_dropout_p=0.0, ar_path=1)
    assert p0.output_token_ids == ar.output_token_ids  # p_drop = 0: the path is the plain head
    p1 = _gen(pair, PROMPTS[0], 0, None, ar_dropout_p=0.5, ar_path=1)
    p1b = _gen(pair, PROMPTS[0], 0, None, ar_dropout_p=0.5, ar_path=1)
    p2 = _gen(pair, PROMPTS[0], 0, None, ar_dropout_p=0.5, ar_path=2)
    assert p1.output_token_ids == p1b.output_token_ids
    assert p1.output_token_ids != p2.output_token_ids or p1.output_token_ids != ar.output_token_ids
    d = _gen(pair, PROMPTS[0], 0, None, ar_model="draft")
    assert d.output_token_ids != ar.output_token_ids
