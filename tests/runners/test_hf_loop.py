"""The transformers draft-verify loop on a tiny random pair: equivalences, rollback, counters."""

from __future__ import annotations

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.dropout_heads import HeadSpec
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


AR = CRITERIA.get("autoregressive")()


def rule(name, **kw):
    return CRITERIA.get(name)(**kw)


def _gen(pair, prompt, L, crit, n=40, prefix_caching=True, heads=HeadSpec(), **kw):
    be = HFLoopBackend(pair, prefix_caching=prefix_caching)
    s = Sample(f"t/{hash(prompt) % 1000}", [{"role": "user", "content": prompt}])
    return be.generate_one(
        s, DecodingConfig(num_speculative_tokens=L, max_new_tokens=n, **kw), crit or AR, heads
    )


def assert_identity(out):
    """Counters count only tokens in the output: rounds + accepted == tokens the rounds emitted."""
    c = out.counters
    emitted = max(0, len(out.output_token_ids) - 1 + out.eos_removed)
    assert c.num_drafts + c.num_accepted_tokens == emitted
    assert (
        sum(out.accepted_per_round) == c.num_accepted_tokens
        and len(out.accepted_per_round) == c.num_drafts
    )


@pytest.mark.parametrize("L", [1, 3, 7])
def test_greedy_sd_and_dm_p0_equal_ar(pair, L):
    partial = 0
    for prompt in PROMPTS:
        ar = _gen(pair, prompt, 0, None)
        for crit, heads in (
            (rule("rejection"), HeadSpec()),
            (rule("greedy_match"), HeadSpec()),
            (rule("dropmatch_js"), HeadSpec(5, 0.0)),
            (rule("dropmatch_naive"), HeadSpec(3, 0.0)),
        ):
            out = _gen(pair, prompt, L, crit, heads=heads)
            assert out.output_token_ids == ar.output_token_ids, (crit.name, prompt)
            assert_identity(out)
            partial += sum(0 < a < L for a in out.accepted_per_round)
    if L > 1:
        assert partial > 0, "no round with partial acceptance: rollback untested"


@pytest.mark.parametrize("n", range(12, 24))
def test_cap_anywhere_in_a_round_counts_only_output_tokens(pair, n):
    """max_new_tokens ending inside a round: tokens past the cap are not accepted."""
    out = _gen(pair, PROMPTS[0], 5, rule("greedy_match"), n=n)
    ar = _gen(pair, PROMPTS[0], 0, None, n=n)
    assert out.output_token_ids == ar.output_token_ids
    assert len(out.output_token_ids) <= n
    assert_identity(out)


def test_counters_invariants(pair):
    out = _gen(pair, PROMPTS[0], 4, rule("dropmatch_js"), heads=HeadSpec(5, 0.3), n=60)
    c = out.counters
    assert sum(c.num_accepted_tokens_per_pos) == c.num_accepted_tokens
    assert all(
        a >= b for a, b in zip(c.num_accepted_tokens_per_pos, c.num_accepted_tokens_per_pos[1:])
    )
    assert c.num_accepted_tokens <= c.num_draft_tokens <= 4 * c.num_drafts
    assert c.num_drafts == len(out.accepted_per_round)
    assert sum(out.accepted_per_round) == c.num_accepted_tokens
    assert_identity(out)


def test_prefix_caching_does_not_change_outputs(pair):
    for prompt in PROMPTS:
        a = _gen(pair, prompt, 3, rule("rejection"), prefix_caching=True)
        b = _gen(pair, prompt, 3, rule("rejection"), prefix_caching=False)
        assert a.output_token_ids == b.output_token_ids


def test_same_seed_same_output_and_max_new_tokens(pair):
    crit, heads = rule("dropmatch_js"), HeadSpec(5, 0.3)
    a = _gen(pair, PROMPTS[1], 5, crit, n=17, seed=3, heads=heads)
    b = _gen(pair, PROMPTS[1], 5, crit, n=17, seed=3, heads=heads)
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
    h_ref = ref.forward(prompt + drafts[:2] + other)[-len(other) :]
    assert st.length == ref.length == len(prompt) + 2 + len(other)
    torch.testing.assert_close(h, h_ref, rtol=1e-4, atol=1e-4)


def test_stop_string_cuts_output(pair):
    free = _gen(pair, PROMPTS[0], 3, rule("rejection"), n=40)
    assert len(free.output_text) > 4
    stop = free.output_text[2:4]
    out = _gen(pair, PROMPTS[0], 3, rule("rejection"), n=40, stop=[stop])
    assert stop not in out.output_text
    assert free.output_text.startswith(out.output_text)


def test_stop_strings_cut_ids_and_sd_equals_ar(pair):
    """Ids end at the token that completes the stop; greedy SD ids == AR ids for every stop."""
    free = _gen(pair, PROMPTS[0], 0, None, n=40)
    text = free.output_text
    stops = sorted({text[i : i + 2] for i in range(2, len(text) - 2) if text[i : i + 2].strip()})[
        :20
    ]
    assert len(stops) >= 5
    tok = pair.tokenizer
    for stop in stops:
        ar = _gen(pair, PROMPTS[0], 0, None, n=40, stop=[stop])
        sd = _gen(pair, PROMPTS[0], 5, rule("greedy_match"), n=40, stop=[stop])
        assert sd.output_token_ids == ar.output_token_ids, stop
        assert stop in tok.decode(sd.output_token_ids, skip_special_tokens=True)
        assert stop not in tok.decode(sd.output_token_ids[:-1], skip_special_tokens=True)
        assert sd.stop_reason == "stop" and stop not in sd.output_text
        assert_identity(sd)


def test_dropout_path_and_draft_only_decode(pair):
    ar = _gen(pair, PROMPTS[0], 0, None)
    path = rule("dropout_path")
    p0 = _gen(pair, PROMPTS[0], 0, path, heads=HeadSpec(1, 0.0), seed_stream=1)
    assert p0.output_token_ids == ar.output_token_ids  # p_drop = 0: the path is the plain head
    p1 = _gen(pair, PROMPTS[0], 0, path, heads=HeadSpec(1, 0.5), seed_stream=1)
    p1b = _gen(pair, PROMPTS[0], 0, path, heads=HeadSpec(1, 0.5), seed_stream=1)
    p2 = _gen(pair, PROMPTS[0], 0, path, heads=HeadSpec(1, 0.5), seed_stream=2)
    assert p1.output_token_ids == p1b.output_token_ids
    assert p1.output_token_ids != p2.output_token_ids or p1.output_token_ids != ar.output_token_ids
    d = _gen(pair, PROMPTS[0], 0, None, ar_model="draft")
    assert d.output_token_ids != ar.output_token_ids


def test_eos_inside_an_accepted_run(pair):
    """An EOS inside the accepted drafts ends the output there; later tokens are not counted."""
    s = Sample("t/eos", [{"role": "user", "content": PROMPTS[0]}])
    free = HFLoopBackend(pair).generate_one(
        s, DecodingConfig(num_speculative_tokens=0, max_new_tokens=40), AR, HeadSpec()
    )
    seen = 0
    for pos in range(3, 20):
        eos = free.output_token_ids[pos]
        if eos in free.output_token_ids[:pos]:
            continue
        outs = []
        for L, crit in ((0, AR), (5, rule("greedy_match"))):
            be = HFLoopBackend(pair)
            be.eos_ids = set(be.eos_ids) | {eos}
            outs.append(
                be.generate_one(
                    s, DecodingConfig(num_speculative_tokens=L, max_new_tokens=40), crit, HeadSpec()
                )
            )
        ar, sd = outs
        assert sd.output_token_ids == ar.output_token_ids == free.output_token_ids[:pos]
        assert sd.stop_reason == "eos" and sd.eos_removed == 1
        assert_identity(sd)
        seen += sum(a > 0 for a in sd.accepted_per_round)
    assert seen > 0


def test_prompts_beyond_the_models_context_are_refused_before_any_decodes(pair):
    """prompt + max_new_tokens + L + 1 over the tiny target's max_position_embeddings (4096): one ValueError before
    the first prefill, counting the prompts that do not fit and naming the largest max_new_tokens with which the
    longest fits."""
    be = HFLoopBackend(pair)
    samples = [Sample(f"t/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(PROMPTS)]
    lengths = {s.sample_id: len(be.encode(s)) for s in samples}
    longest = max(lengths, key=lengths.get)
    limit = pair.target.config.max_position_embeddings
    fits = limit - lengths[longest] - 3 - 1
    over = DecodingConfig(num_speculative_tokens=3, max_new_tokens=fits + 1)
    with pytest.raises(ValueError) as err:
        next(iter(be.generate(samples, over, rule("rejection"), HeadSpec())))
    told = str(err.value)
    assert f"of 3 prompts do not fit the target's max_position_embeddings={limit}" in told
    assert f"the longest, {longest} ({lengths[longest]} tokens)" in told
    assert told.endswith(f"allowed: decoding.max_new_tokens <= {fits}")
    ok = DecodingConfig(num_speculative_tokens=3, max_new_tokens=fits)
    ok.check_context(
        lengths, limit, "the target's max_position_embeddings"
    )  # exactly at the limit: fits


@pytest.mark.parametrize(
    "prompts, m, L, limit, settable, want",
    [
        ({"a": 10, "b": 20}, 5, 3, 29, False, "allowed: decoding.max_new_tokens <= 5"),
        ({"a": 10, "b": 20}, 6, 3, 29, False, "1 of 2 prompts do not fit"),
        ({"a": 10, "b": 20}, 6, 3, 29, True, "<= 5, or backend.n_ctx >= 30"),
        ({"a": 10, "b": 28}, 1, 0, 28, False, "that prompt alone leaves no room for an output"),
        (
            {"a": 40},
            1,
            5,
            30,
            True,
            "leave it out (dataset.limit, dataset.offset), or backend.n_ctx >= 47",
        ),
    ],
)
def test_check_context_names_what_fits(prompts, m, L, limit, settable, want):
    """The refusal names the largest ``max_new_tokens`` that fits every prompt, or, where the longest prompt alone
    leaves no room, says so and never offers a value below 1; a settable limit is offered too; a fit passes."""
    cfg = DecodingConfig(num_speculative_tokens=L, max_new_tokens=m)
    longest = max(prompts.values())
    if longest + m + L + 1 <= limit:
        cfg.check_context(prompts, limit, "backend.n_ctx", settable)
        return
    with pytest.raises(ValueError) as err:
        cfg.check_context(prompts, limit, "backend.n_ctx", settable)
    assert want in str(err.value)
    assert "max_new_tokens <= 0" not in str(err.value)
