"""The hook's verify step and the backend's checks without an engine (fake runner, seconds).

``DropMatchSampler.forward`` must decide exactly as :func:`criteria.verify.verify_round` with the request's
generator (made on the hidden states' device), the installed HeadSpec, and the vocab-shard gather under tensor
parallelism; the backend refuses modes it cannot run before any engine is built.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it

V, V_PAD, D = 50, 52, 16


def _head(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((V_PAD, D), generator=g)  # [V_padded, d]: rows past V are padding


def _metadata(drafts: list[list[int]]):
    """vLLM's SpecDecodeMetadata with real indices: request i owns rows [off_i, off_i + n_i] (targets, bonus)."""
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    meta = SpecDecodeMetadata.make_dummy(drafts, torch.device("cpu"))
    target, bonus, off = [], [], 0
    for d in drafts:
        target += range(off, off + len(d))
        bonus.append(off + len(d))
        off += len(d) + 1
    meta.target_logits_indices = torch.tensor(target, dtype=torch.int32)
    meta.bonus_logits_indices = torch.tensor(bonus, dtype=torch.int32)
    return meta, off


def _runner(weight: torch.Tensor, seeds: dict[str, int], T: float = 0.0):
    return SimpleNamespace(
        requests={
            r: SimpleNamespace(sampling_params=SimpleNamespace(seed=s, temperature=T))
            for r, s in seeds.items()
        },
        input_batch=SimpleNamespace(req_ids=list(seeds)),
        model=SimpleNamespace(
            lm_head=SimpleNamespace(weight=weight), logits_processor=SimpleNamespace(scale=1.0)
        ),
    )


SAMPLING = SimpleNamespace(
    max_num_logprobs=None,
    no_penalties=True,
    bad_words_token_ids={},
    top_p=None,
    top_k=None,
    all_greedy=True,
)


def _sampler(rule, heads, runner, hidden):
    from runners.backends.vllm_verify_step import DropMatchSampler, HookState

    state = HookState(rule=rule, heads=heads, record_inputs=True)
    state.target_hidden = hidden
    return DropMatchSampler(runner, state, SimpleNamespace(sampler=None)), state


@pytest.mark.parametrize("T", [0.0, 0.8])
@pytest.mark.parametrize("name", ["dropmatch_naive", "dropmatch_js", "greedy_match"])
def test_sampler_decides_as_verify_round(name, T):
    """Three requests (3, 0 and 2 drafts) in one verify step: each row is verify_round of that request alone."""
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from criteria.verify import verify_round
    from runners.backends.seeding import make_generator

    rule = (
        CRITERIA.get(name)(majority="plurality")
        if name.startswith("dropmatch")
        else CRITERIA.get(name)()
    )
    heads = HeadSpec(K=5, p_drop=0.3) if rule.needs_heads else HeadSpec()
    W = _head()
    drafts = [[3, 7, 7], [], [1, 2]]
    meta, rows = _metadata(drafts)
    hidden = torch.randn(
        (rows, D), generator=torch.Generator().manual_seed(1)
    )  # [num_tokens + B, d]
    q = torch.softmax(
        torch.randn((5, V), generator=torch.Generator().manual_seed(2)), -1
    )  # [num_tokens, V]
    seeds = {"a": 11, "b": 12, "c": 13}
    sampler, state = _sampler(rule, heads, _runner(W, seeds, T), hidden)
    out = sampler.forward(meta, q, torch.zeros((rows, V)), SAMPLING).sampled_token_ids  # [3, 4]
    assert out.shape == (3, 4) and out.dtype == torch.int32

    head, off, qoff = LMHead(W, vocab_size=V), 0, 0
    for i, (d, seed) in enumerate(zip(drafts, seeds.values())):
        n = len(d)
        h = hidden[off : off + n + 1][None]  # [1, n+1, d]
        r, hs = (rule, heads) if n else (CRITERIA.get("autoregressive")(), HeadSpec())
        ref = verify_round(
            h,
            head,
            torch.tensor([d], dtype=torch.long).view(1, n),
            r,
            hs,
            temperature=T,
            generators=[make_generator(seed)],
            draft_probs=q[qoff : qoff + n][None] if n else None,
        )
        a = int(ref.num_accepted[0])
        assert out[i].tolist() == d[:a] + [int(ref.next_token_ids[0])] + [-1] * (3 - a), (name, i)
        off, qoff = off + n + 1, qoff + n
    assert [r.req_id for r in state.rounds] == ["a", "c"]  # the 0-draft request is no round
    assert all(g.device == hidden.device for g in state.generators.values())


@pytest.mark.parametrize("escape", [False, True])
def test_sampler_rounds_carry_the_round_meter(escape):
    """Each round of a verify step holds the step's target forward, the plain and rule seconds summed over the
    step's requests (the whole batch's, as the HF loop charges a row), and its own escape positions; the exact
    rule with p_drop > 0 (no plain moment) holds no plain / rule seconds."""
    import criteria.rules  # noqa: F401
    from criteria.dropmatch_js import TAIL_LADDER
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from criteria.sparse_heads import rung_name

    drafts = [[3, 7, 7], [], [1, 2]]
    meta, rows = _metadata(drafts)
    hidden = torch.randn((rows, D), generator=torch.Generator().manual_seed(1))
    q = torch.softmax(torch.randn((5, V), generator=torch.Generator().manual_seed(2)), -1)
    seeds = {"a": 11, "b": 12, "c": 13}
    rule = CRITERIA.get("dropmatch_js")(majority="plurality")
    heads = HeadSpec(K=5, p_drop=0.3, top_n=8, escape=escape)
    sampler, state = _sampler(rule, heads, _runner(_head(), seeds), hidden)
    state.forward_s = 0.25
    sampler.forward(meta, q, torch.zeros((rows, V)), SAMPLING)
    a, c = state.rounds
    assert a.verify_s == c.verify_s == 0.25
    assert a.plain_s == c.plain_s > 0 and a.rule_s == c.rule_s > 0
    if escape:  # Eq. (6) decided at the first rung, or higher, at some position of some request
        # here each request has a position the majority leaves to Eq. (6): the first rung of the ladder
        first = rung_name(TAIL_LADDER[0], heads.top_n)
        assert a.escape is not None and c.escape is not None
        assert a.escape.get(first, 0) >= 1 and c.escape.get(first, 0) >= 1
    else:
        assert a.escape is None and c.escape is None

    exact, state = _sampler(rule, HeadSpec(K=5, p_drop=0.3), _runner(_head(), seeds), hidden)
    state.forward_s = 0.25
    exact.forward(meta, q, torch.zeros((rows, V)), SAMPLING)
    assert all(r.verify_s == 0.25 and r.plain_s is None and r.rule_s is None for r in state.rounds)


def test_native_sampler_decides_and_rounds_are_logged():
    """rule None (backend.native_verify): vLLM's own sampler's output is returned untouched and each request's
    round is logged (vLLM returns no per-request metrics for a request a stop string ended)."""
    from vllm.v1.outputs import SamplerOutput

    from criteria.dropout_heads import HeadSpec

    meta, rows = _metadata([[3, 7, 7], [], [1, 2]])
    sampled = torch.tensor([[3, 7, 9, -1], [4, -1, -1, -1], [1, 2, 5, -1]], dtype=torch.int32)
    calls = []

    def native(*args):
        calls.append(args)
        return SamplerOutput(sampled_token_ids=sampled, logprobs_tensors=None)

    sampler, state = _sampler(
        None, HeadSpec(), _runner(_head(), {"a": 1, "b": 2, "c": 3}), torch.zeros((rows, D))
    )
    sampler.native = native
    out = sampler.forward(meta, None, torch.zeros((rows, V)), SAMPLING)
    assert out.sampled_token_ids is sampled and len(calls) == 1
    assert [
        (r.req_id, r.num_draft_tokens, r.num_accepted, r.next_token_id) for r in state.rounds
    ] == [("a", 3, 2, 9), ("c", 2, 2, 5)]
    # greedy rejection sampling accepts only the target's argmax: no mismatch; unknown when sampling
    assert [r.mismatched for r in state.rounds] == [[0, 0], [0, 0]]
    state.rounds.clear()
    sampler.forward(
        meta,
        None,
        torch.zeros((rows, V)),
        SimpleNamespace(**{**vars(SAMPLING), "all_greedy": False}),
    )
    assert [r.mismatched for r in state.rounds] == [None, None]


def test_vllm_own_draft_probs_reach_vllm_own_sampler():
    """With no rule (uninstalled, or native_verify) the wrapped ``take_last_draft_probs`` gives vLLM's own draft
    probabilities: vLLM's rejection sampling at T > 0 needs them (the wrapper used to return None)."""
    from criteria.dropout_heads import HeadSpec
    from runners.backends.vllm_dropmatch_hook import _wrap_captures
    from runners.backends.vllm_verify_step import HookState

    own = torch.full((1, 3, V), 1.0 / V)
    drafter = SimpleNamespace(
        model=SimpleNamespace(compute_logits=lambda h: h),
        propose=lambda: None,
        take_last_draft_probs=lambda: own,
    )
    runner = SimpleNamespace(
        model=SimpleNamespace(compute_logits=lambda h: h),
        drafter=drafter,
        _dropmatch_state=None,
        input_batch=SimpleNamespace(req_ids=["a"]),
        requests={"a": SimpleNamespace(sampling_params=SimpleNamespace(temperature=0.7))},
        _model_forward=lambda **kw: kw["input_ids"],
        device=torch.device("cpu"),
    )
    _wrap_captures(runner)
    assert drafter.take_last_draft_probs() is own  # hook idle
    assert runner._model_forward(input_ids="ids") == "ids"
    runner._dropmatch_state = HookState(rule=None, heads=HeadSpec())
    assert drafter.take_last_draft_probs() is own  # vLLM's own sampler, rounds logged
    # the target's forward is timed for the step's rounds, whatever decides them
    assert runner._model_forward(input_ids="ids") == "ids"
    assert runner._dropmatch_state.forward_s >= 0.0
    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA

    runner._dropmatch_state = HookState(
        rule=CRITERIA.get("dropmatch_js")(), heads=HeadSpec(K=2, p_drop=0.1)
    )
    drafter.propose()  # the rule needs draft probabilities: captured from the draft's logits, softmax at T
    runner._dropmatch_state.capturing_draft = True
    logits = torch.randn((1, V))
    drafter.model.compute_logits(logits)
    got = drafter.take_last_draft_probs()
    assert got.shape == (1, 1, V) and torch.allclose(got[0, 0], torch.softmax(logits[0] / 0.7, -1))


def test_generator_is_made_on_the_hidden_states_device(monkeypatch):
    """A CPU generator with hidden states on another device. The hook asks make_generator for
    the hidden states' device (``meta`` here: the spy stops the round there, as no meta generator exists)."""
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends import vllm_verify_step as hook

    asked = []

    class Made(Exception):
        pass

    def spy(seed, device="cpu"):
        asked.append(torch.device(device))
        raise Made

    monkeypatch.setattr(hook, "make_generator", spy)
    meta, rows = _metadata([[3, 7, 7]])
    sampler, _ = _sampler(
        CRITERIA.get("dropmatch_naive")(),
        HeadSpec(K=5, p_drop=0.3),
        _runner(_head().to("meta"), {"a": 1}),
        torch.zeros((rows, D), device="meta"),
    )
    with pytest.raises(Made):
        sampler.forward(meta, None, torch.zeros((rows, V), device="meta"), SAMPLING)
    assert asked == [torch.device("meta")]


@pytest.mark.parametrize("field", ["top_p", "top_k"])
def test_top_p_and_top_k_are_refused(field):
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA

    meta, rows = _metadata([[3]])
    sampler, _ = _sampler(
        CRITERIA.get("greedy_match")(),
        HeadSpec(),
        _runner(_head(), {"a": 1}),
        torch.zeros((rows, D)),
    )
    sm = SimpleNamespace(**{**vars(SAMPLING), field: torch.tensor([0.9])})
    with pytest.raises(NotImplementedError, match="top_p"):
        sampler.forward(meta, None, torch.zeros((rows, V)), sm)


def test_vocab_shards_gathered_decide_as_the_whole_head():
    """Tensor parallelism in two threads: each rank holds half of the padded head and all-gathers the logits
    (``LMHead.gather``); both ranks decide exactly as one rank with the whole head (same masks: same seed)."""
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from criteria.verify import verify_round
    from runners.backends.seeding import make_generator

    W = _head(3)
    hidden = torch.randn((1, 4, D), generator=torch.Generator().manual_seed(4))  # [B, L+1, d]
    drafts = (hidden[:, :3] @ W[:V].T).argmax(
        -1
    )  # [1, 3]: the plain head's tokens, so some are accepted
    rule, heads = CRITERIA.get("dropmatch_naive")(majority="plurality"), HeadSpec(K=5, p_drop=0.3)
    whole = verify_round(
        hidden,
        LMHead(W, vocab_size=V),
        drafts,
        rule,
        heads,
        temperature=0.0,
        generators=[make_generator(7)],
        trace=True,
    )
    slots, barrier, results = [None, None], threading.Barrier(2), [None, None]

    def rank(r: int) -> None:
        def gather(x: torch.Tensor) -> torch.Tensor:
            slots[r] = x
            barrier.wait()
            full = torch.cat(slots, dim=-1)
            barrier.wait()
            return full

        shard = W[r * V_PAD // 2 : (r + 1) * V_PAD // 2]  # [V_padded / 2, d]
        results[r] = verify_round(
            hidden,
            LMHead(shard, vocab_size=V, gather=gather),
            drafts,
            rule,
            heads,
            temperature=0.0,
            generators=[make_generator(7)],
            trace=True,
        )

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(whole.num_accepted[0]) > 0  # not vacuous: some draft accepted
    for res in results:
        assert torch.equal(res.accept_mask, whole.accept_mask) and torch.equal(
            res.next_token_ids, whole.next_token_ids
        )
        assert torch.equal(res.trace["head_token_ids"], whole.trace["head_token_ids"])


def test_rule_settings_rebuild_every_sd_rule():
    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA
    from runners.backends.vllm_dropmatch_hook import rule_settings
    from runners.backends.vllm_engine import SD_RULES

    for name in SD_RULES:
        kw = (
            {"majority": "plurality", "include_target": True}
            if name.startswith("dropmatch")
            else {}
        )
        rule = CRITERIA.get(name)(**kw)
        assert (
            repr(CRITERIA.get(name)(**rule_settings(rule))) == repr(rule)
            and rule_settings(rule) == kw
        )


def _backend(**kw):
    from runners.backends.vllm_engine import VLLMBackend

    b = VLLMBackend({"target_dir": "/nonexistent/t", "draft_dir": "/nonexistent/d"}, **kw)
    b.engine = lambda *a, **k: pytest.fail(
        "an engine was requested for a run the backend must refuse"
    )
    return b


@pytest.mark.parametrize(
    "case,match",
    [
        (dict(method="draft_only"), "method.ar_model='draft'"),
        (dict(method="dropout_path"), "method.criterion='dropout_path'"),
        (dict(method="sd", top_p=0.9), "decoding.top_p=0.9 .* allowed: 1.0"),
        (dict(method="dropmatch", native_verify=True), "backend.native_verify=true"),
        (dict(method="sd", trace=True, native_verify=True), "backend.native_verify=true"),
        (dict(method="autojudge"), "method.criterion='autojudge' is not supported by backend=vllm"),
    ],
)
def test_backend_refuses_what_it_cannot_run_before_an_engine(case, match):
    """draft_only / dropout_path with backend=vllm used to decode the target and be recorded
    as the other method. Each refusal names the field and the allowed values."""
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.datasets.base import Sample

    method = case["method"]
    L, ar_model, heads = 3, "target", HeadSpec()
    if method == "draft_only":
        L, ar_model, rule = 0, "draft", CRITERIA.get("autoregressive")()
    elif method == "dropout_path":
        L, rule, heads = 0, CRITERIA.get("dropout_path")(), HeadSpec(K=1, p_drop=0.3)
    elif method == "dropmatch":
        rule, heads = CRITERIA.get("dropmatch_js")(), HeadSpec(K=5, p_drop=0.3)
    elif method == "autojudge":
        rule = SimpleNamespace(name="autojudge", needs_hidden=True)
    else:
        rule = CRITERIA.get("rejection")()
    backend = _backend(native_verify=case.get("native_verify", False))
    dec = DecodingConfig(
        num_speculative_tokens=L,
        top_p=case.get("top_p", 1.0),
        ar_model=ar_model,
        trace=case.get("trace", False),
    )
    with pytest.raises(ValueError, match=match):
        next(
            iter(
                backend.generate(
                    [Sample("s/0", [{"role": "user", "content": "x"}])], dec, rule, heads
                )
            )
        )


def test_backend_declares_its_modes():
    from runners.backends.vllm_engine import VLLMBackend

    assert (
        VLLMBackend.SUPPORTS_AR_DRAFT_MODEL is False and VLLMBackend.SUPPORTS_DROPOUT_PATH is False
    )
    from criteria.rules import FIELD_RULES

    assert set(VLLMBackend.SUPPORTED_RULES) == {
        "autoregressive",
        "greedy_match",
        "rejection",
        "dropmatch_naive",
        "dropmatch_js",
        *FIELD_RULES,
    }
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig

    b = _backend()
    for name in VLLMBackend.SUPPORTED_RULES:  # every declared rule passes the check at its L
        L = 0 if name == "autoregressive" else 3
        heads = HeadSpec(K=5, p_drop=0.3) if name.startswith("dropmatch") else HeadSpec()
        b.check(DecodingConfig(num_speculative_tokens=L), CRITERIA.get(name)(), heads)


class CharTokenizer:
    """id i < 26 -> one letter; 99 (EOS) decodes to nothing."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join("" if i == 99 else chr(97 + i) for i in ids)


def _completion(ids, drafted, accepted):
    return SimpleNamespace(
        token_ids=ids,
        spec_decode_metrics=SimpleNamespace(per_step_drafted=drafted, per_step_accepted=accepted),
    )


@pytest.mark.parametrize(
    "raw,steps,cap,stops,kept",
    [
        # cap 17 ends one token into round 3 (prefill token + 3 rounds of 6): vLLM counts 15 accepted, we 13
        (list(range(19)), [5, 5, 5], 17, [], [5, 5, 3]),
        # EOS (99) inside round 1's accepted run; vLLM's step still counts 4 accepted drafts
        ([0, 1, 2, 3, 99, 5], [4], 50, [], [3]),
        # stop string "cd" completed by token 3, in round 1 (rounds of 5 and 4 tokens)
        ([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], [4, 3], 50, ["cd"], [2]),
    ],
)
def test_output_counters_count_only_output_tokens(raw, steps, cap, stops, kept):
    """The counter identity on the vLLM side: vLLM's per-step counts include drafts past the output's end; the
    record counts only tokens in the output: num_drafts + num_accepted == len(ids) - 1 + eos_removed."""
    from runners.backends.output import finalize
    from runners.backends.vllm_counters import output_counters, request_counters

    L = 5
    comp = _completion(raw, [L] * len(steps), steps)
    out = finalize(raw, CharTokenizer(), {99}, stops, cap)
    c, got = output_counters([L] * len(steps), steps, out.emitted, L)
    assert got == kept
    assert c.num_drafts + c.num_accepted_tokens == len(out.token_ids) - 1 + out.eos_removed
    assert c.num_accepted_tokens_per_pos == [sum(a > i for a in kept) for i in range(L)]
    assert request_counters(comp, L)[0].num_accepted_tokens == sum(steps) > c.num_accepted_tokens
