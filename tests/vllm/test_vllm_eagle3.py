"""The hook with vLLM's ``eagle3`` method (random dummy weights: plumbing only, not acceptance quality)."""

from __future__ import annotations

import json
import shutil

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it
import vllm  # noqa: E402


@pytest.fixture(scope="session")
def eagle3_llm(tiny_pair, tmp_path_factory):
    """A 6-layer tiny Qwen2 target plus a 1-layer EAGLE-3 head, both config-only (load_format=dummy).

    The head uses ``eagle_config.use_aux_hidden_state = False`` (last hidden state, like EAGLE-1): with aux
    hidden states this CPU build fails in ``llama_eagle3.combine_hidden_states`` ("shape '[-1, 384]' is
    invalid for input of size 2560") on this tiny target.
    """
    target_src, _ = tiny_pair
    root = tmp_path_factory.mktemp("eagle3")
    target, head = root / "target", root / "head"
    for d in (target, head):
        shutil.copytree(target_src, d, ignore=shutil.ignore_patterns("*.safetensors"))
    cfg = json.loads((target / "config.json").read_text())
    cfg["num_hidden_layers"] = 6
    cfg.pop("layer_types", None)
    (target / "config.json").write_text(json.dumps(cfg))
    (head / "config.json").write_text(
        json.dumps(
            dict(
                architectures=["LlamaForCausalLMEagle3"],
                model_type="llama",
                hidden_size=cfg["hidden_size"],
                intermediate_size=256,
                num_hidden_layers=1,
                num_attention_heads=2,
                num_key_value_heads=1,
                head_dim=64,
                vocab_size=cfg["vocab_size"],
                draft_vocab_size=cfg["vocab_size"],
                max_position_embeddings=1024,
                rms_norm_eps=1e-6,
                tie_word_embeddings=False,
                rope_theta=10000.0,
                torch_dtype="float32",
                eos_token_id=cfg.get("eos_token_id"),
                bos_token_id=cfg.get("bos_token_id"),
                eagle_config={"use_aux_hidden_state": False},
            )
        )
    )
    llm = vllm.LLM(
        model=str(target),
        enforce_eager=True,
        dtype="float32",
        max_model_len=512,
        seed=0,
        load_format="dummy",
        disable_log_stats=False,
        per_request_spec_decode_metrics="detailed",
        worker_extension_cls="runners.backends.vllm_dropmatch_hook.DropMatchWorkerExtension",
        speculative_config={"method": "eagle3", "model": str(head), "num_speculative_tokens": 3},
    )
    # session scope: tearing an engine down mid-session destroys vLLM's process-wide parallel groups,
    # which breaks the other (session) engine
    return llm


def test_eagle3_dm_p0_equals_native_and_js_runs(eagle3_llm):
    from tests.helpers.vllm import _run

    native_ids, native, _, _ = _run(eagle3_llm, None)
    assert native.num_drafts > 0
    ids, counters, rounds, _ = _run(eagle3_llm, "dropmatch_naive", {"K": 5, "p_drop": 0.0})
    assert ids == native_ids and counters.to_dict() == native.to_dict()
    _, js, rounds, _ = _run(eagle3_llm, "dropmatch_js", {"K": 5, "p_drop": 0.3}, record_trace=True)
    assert js.num_drafts == len(rounds) and "js_draft" in rounds[0].trace
