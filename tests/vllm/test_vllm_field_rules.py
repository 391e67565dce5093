"""The field's rules through the vLLM hook: same seed, same rule -> the same records as the HF loop (T = 0).

The rules are pure criteria decided by ``criteria.verify.verify_round`` in both backends, so the hook needs nothing
rule-specific; this checks it end to end for every one of them, with settings that make each rule accept drafts
greedy SD rejects (L = 3, the shared engine's draft length)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it

SETTINGS = {
    "fly": {"entropy_threshold": 0.3, "window_size": 1},
    "fsd": {"threshold": 0.5, "divergence": "js"},
    "typical": {},
    "relaxed_topk": {"top_k": 5, "delta": 0.3},
    "prob_threshold": {"threshold_single": 0.05},
    "static_ensemble": {"weight": 0.5},
    "bild": {"fallback_threshold": 0.0, "rollback_threshold": 6.0},
    "block_verify": {},
}


@pytest.mark.parametrize("rule", sorted(SETTINGS))
def test_vllm_hook_records_equal_hf_records(backends, rule):
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from criteria.rules import FIELD_RULES
    from runners.backends.base import DecodingConfig
    from runners.datasets.base import Sample

    assert set(SETTINGS) == set(FIELD_RULES)
    hf, vb = backends
    samples = [
        Sample(f"f/{i}", [{"role": "user", "content": c}])
        for i, c in enumerate(["def add(a, b):", "The quick brown fox"])
    ]
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=20, seed=5, trace=True)
    make = lambda: CRITERIA.get(rule)(**SETTINGS[rule])  # noqa: E731
    h = list(hf.generate(samples, dec, make(), HeadSpec()))
    v = list(vb.generate(samples, dec, make(), HeadSpec()))
    for a, b in zip(v, h):
        assert a.output_token_ids == b.output_token_ids, rule
        assert a.accepted_per_round == b.accepted_per_round, rule
        assert a.counters.to_dict() == b.counters.to_dict(), rule
    assert sum(sum(r.accepted_per_round) for r in h) > 0, (
        "no draft accepted: the comparison is vacuous"
    )
