"""Spec-Bench-style equality on vLLM: greedy SD output == greedy AR output (tiny pair; draft model and EAGLE-3).

The AR reference is a target-only engine. SD runs through the conftest engine (draft-model, L = 3) with vLLM's
own sampler and with the hook's ``rejection`` rule, and through an EAGLE-3 engine whose head is built by
``runners.models.eagle3_random`` with auxiliary hidden states (distinct layer ids: vLLM's default for a
2-layer target repeats layers). Divergences are reported as (prompt, token position).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it
import vllm  # noqa: E402

from tests.helpers.vllm import PROMPTS, _run  # noqa: E402


def _greedy(llm, max_tokens=24):
    sp = [
        vllm.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, seed=7 + i)
        for i in range(len(PROMPTS))
    ]
    return [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, sp, use_tqdm=False)]


@pytest.fixture(scope="session")
def ar_llm(tiny_pair):
    """Target-only engine; kept alive for the session (an engine torn down mid-session destroys vLLM's
    process-wide parallel groups and breaks the other engines)."""
    target, _ = tiny_pair
    return vllm.LLM(
        model=str(target), enforce_eager=True, dtype="float32", max_model_len=512, seed=0
    )


@pytest.fixture(scope="session")
def ar_ids(ar_llm):
    return _greedy(ar_llm)


@pytest.fixture(scope="session")
def eagle3_aux_llm(tiny_pair, tmp_path_factory):
    from runners.models.eagle3_random import build_eagle3_head

    target, _ = tiny_pair
    head = build_eagle3_head(
        target,
        tmp_path_factory.mktemp("e3head"),
        seed=0,
        intermediate_size=256,
        use_aux_hidden_state=True,
        aux_layer_ids=[0, 1],
        log=lambda *_: None,
    )
    return vllm.LLM(
        model=str(target),
        enforce_eager=True,
        dtype="float32",
        max_model_len=512,
        seed=0,
        disable_log_stats=False,
        per_request_spec_decode_metrics="detailed",
        worker_extension_cls="runners.backends.vllm_dropmatch_hook.DropMatchWorkerExtension",
        speculative_config={"method": "eagle3", "model": str(head), "num_speculative_tokens": 3},
    )


def _assert_equal(ref, test, what):
    from analysis.equality import compare_outputs

    r = compare_outputs(
        {str(i): x for i, x in enumerate(ref)}, {str(i): x for i, x in enumerate(test)}
    )
    assert r["equal"] == r["n"] == len(PROMPTS), (
        f"{what}: divergences (prompt, token position) {r['divergences']}"
    )


def test_draft_model_sd_equals_ar(llm, ar_ids):
    native, counters, _, _ = _run(llm, None)
    assert counters.num_drafts > 0
    _assert_equal(ar_ids, native, "native rejection sampler")
    hooked, _, _, _ = _run(llm, "rejection")
    _assert_equal(ar_ids, hooked, "hook, rejection rule")


def test_eagle3_aux_hidden_states_sd_equals_ar(eagle3_aux_llm, ar_ids):
    native, counters, _, _ = _run(eagle3_aux_llm, None)
    assert counters.num_drafts > 0
    _assert_equal(ar_ids, native, "eagle3 native")
    naive0, c0, _, _ = _run(eagle3_aux_llm, "dropmatch_naive", {"K": 5, "p_drop": 0.0})
    _assert_equal(ar_ids, naive0, "eagle3 + DropMatch naive at p_drop 0")
    _, dm, rounds, _ = _run(eagle3_aux_llm, "dropmatch_naive", {"K": 5, "p_drop": 0.3})
    assert dm.num_drafts == len(rounds) > 0


def test_random_head_builder_files(tiny_pair, tmp_path):
    import json

    from runners.models.eagle3_random import MARKER, NOTE, build_eagle3_head

    target, _ = tiny_pair
    out = build_eagle3_head(
        target, tmp_path / "h", aux_layer_ids=[0, 1], intermediate_size=64, log=lambda *_: None
    )
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["_note"] == NOTE
    assert cfg["eagle_config"] == {
        "use_aux_hidden_state": True,
        "eagle_aux_hidden_state_layer_ids": [0, 1],
    }
    assert (out / MARKER).exists() and build_eagle3_head(
        target, out, aux_layer_ids=[0, 1], intermediate_size=64
    ) == out
