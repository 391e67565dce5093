"""VLLMBackend end to end on the tiny pair: Backend protocol, per-sample counters, batching."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it


def test_backend_generates_with_dropmatch(tiny_pair, llm):
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import Backend, DecodingConfig
    from runners.backends.vllm_engine import VLLMBackend
    from runners.datasets.base import Sample
    from runners.records.counters import SpecDecodeCounters

    target, draft = tiny_pair
    backend = VLLMBackend(
        {"target_dir": target, "draft_dir": draft}, max_model_len=512, batch_size=2
    )
    backend._llm, backend._llm_key = llm, (3, False)  # reuse the session engine (same config)
    backend.tokenizer = llm.get_tokenizer()
    assert isinstance(backend, Backend)
    samples = [
        Sample(f"t/{i}", [{"role": "user", "content": c}])
        for i, c in enumerate(["def add(a, b):", "The quick brown fox", "for i in range(10):"])
    ]
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=16, seed=1, trace=True)
    heads = HeadSpec(K=5, p_drop=0.3)
    res = list(backend.generate(samples, dec, CRITERIA.get("dropmatch_js")(), heads))
    assert [r.sample_id for r in res] == ["t/0", "t/1", "t/2"]
    total = SpecDecodeCounters(num_speculative_tokens=3)
    for r in res:
        assert 0 < r.num_output_tokens <= 16 and r.num_output_tokens == len(r.output_token_ids)
        assert r.counters.num_drafts == len(r.accepted_per_round) > 0
        # the counter identity: rounds + accepted == output tokens - 1 + removed EOS
        assert (
            r.counters.num_drafts + r.counters.num_accepted_tokens
            == r.num_output_tokens - 1 + r.eos_removed
        )
        assert r.wall_s > 0 and r.prefill_s > 0 and r.stop_reason in ("eos", "length")
        assert r.counters.num_accepted_tokens == sum(r.accepted_per_round)
        assert r.trace and len(r.trace) == r.counters.num_drafts
        total = total + r.counters
    assert total.num_accepted_tokens > 0
    # same seed, batch 1 -> same tokens and counts as batch 2 (per-request generators)
    backend.batch_size = 1
    t0 = time.perf_counter()
    res1 = list(backend.generate(samples, dec, CRITERIA.get("dropmatch_js")(), heads))
    elapsed = time.perf_counter() - t0
    # wall_s is the generation after the prefill (as HF's), prefill_s the prefill; at batch
    # size 1 they are disjoint parts of each request's time (the old wall_s held the prefill: the sum exceeded)
    assert sum(r.wall_s + r.prefill_s for r in res1) <= elapsed
    assert [r.output_token_ids for r in res1] == [r.output_token_ids for r in res]
    assert [r.counters.to_dict() for r in res1] == [r.counters.to_dict() for r in res]
