"""The hook refuses other vLLM versions, and the vLLM internals it relies on are still there."""

from __future__ import annotations

import inspect

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it


def test_version_check_refuses_other_versions():
    from runners.backends.vllm_dropmatch_hook import UnsupportedVLLMError, check_vllm_version

    assert check_vllm_version().startswith("0.32")
    assert check_vllm_version("0.32.7") == "0.32.7"
    assert check_vllm_version("0.32.0+cpu") == "0.32.0+cpu"
    for bad in ("0.33.0", "0.31.2", "1.0.0"):
        with pytest.raises(UnsupportedVLLMError, match="0.32"):
            check_vllm_version(bad)


def test_patched_vllm_symbols_unchanged():
    """Fails loudly if a vLLM upgrade moves what vllm_dropmatch_hook replaces or calls."""
    from vllm.config.observability import ObservabilityConfig
    from vllm.config.parallel import ParallelConfig
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.outputs import CompletionOutput
    from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID, RejectionSampler
    from vllm.v1.spec_decode.draft_model import DraftModelProposer
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    # 1. the runner calls self.rejection_sampler(metadata, draft_probs, logits, sampling_metadata) in _sample
    src = inspect.getsource(GPUModelRunner._sample)
    assert "self.rejection_sampler(" in src and "_get_spec_decode_draft_probs" in src
    assert list(inspect.signature(RejectionSampler.forward).parameters) == [
        "self",
        "metadata",
        "draft_probs",
        "logits",
        "sampling_metadata",
    ]
    assert PLACEHOLDER_TOKEN_ID == -1
    # 2. target hidden states reach the sampler through model.compute_logits(sample_hidden_states)
    exec_src = inspect.getsource(GPUModelRunner.execute_model)
    assert "self.model.compute_logits(sample_hidden_states)" in exec_src
    # 5. the target's forward of a step goes through runner._model_forward (timed by the hook)
    assert "self._model_forward(" in exec_src and hasattr(GPUModelRunner, "_model_forward")
    # 3. drafter: propose() then take_last_draft_probs() -> runner._draft_probs keyed by req ids
    prop_src = inspect.getsource(GPUModelRunner.propose_draft_token_ids)
    assert "take_last_draft_probs" in prop_src and "_draft_prob_req_ids" in prop_src
    assert hasattr(DraftModelProposer, "propose") and hasattr(
        DraftModelProposer, "take_last_draft_probs"
    )
    # 4. metadata fields the hook reads
    fields = set(SpecDecodeMetadata.__dataclass_fields__)
    assert {
        "draft_token_ids",
        "num_draft_tokens",
        "cu_num_draft_tokens",
        "target_logits_indices",
        "bonus_logits_indices",
    } <= fields
    # 5. LM head: vocab padding cut and TP gather inside LogitsProcessor
    assert "org_vocab_size" in inspect.getsource(LogitsProcessor._get_logits)
    # 6. extension point and per-request metrics the backend uses
    assert "worker_extension_cls" in ParallelConfig.__dataclass_fields__
    assert "per_request_spec_decode_metrics" in ObservabilityConfig.__dataclass_fields__
    assert "spec_decode_metrics" in CompletionOutput.__dataclass_fields__
