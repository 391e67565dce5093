"""Same seed, same rule -> the vLLM hook and the HF reference loop decide identically (T = 0)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it


def _assert_same_trace(a, b):
    """Traces of two backends: the same rounds and keys, equal tokens and flags, float statistics within 1e-4
    (the two engines' forward passes round differently: JS divergences and probabilities differ in the 6th digit)."""
    import math

    assert (a is None) == (b is None) and len(a or []) == len(b or [])
    for ra, rb in zip(a or [], b or []):
        assert ra.keys() == rb.keys()
        for key in ra:
            flat_a, flat_b = _flat(ra[key]), _flat(rb[key])
            if any(isinstance(x, float) for x in flat_b):
                assert all(math.isclose(x, y, abs_tol=1e-4) for x, y in zip(flat_a, flat_b)), key
                assert len(flat_a) == len(flat_b), key
            else:
                assert flat_a == flat_b, key


def _flat(x):
    return [y for v in x for y in _flat(v)] if isinstance(x, list) else [x]


def _record(r):
    return dict(
        ids=r.output_token_ids,
        text=r.output_text,
        rounds=r.accepted_per_round,
        counters=r.counters.to_dict(),
        stop_reason=r.stop_reason,
        eos_removed=r.eos_removed,
        trace=r.trace,
    )


@pytest.mark.parametrize("rule", ["greedy_match", "dropmatch_naive", "dropmatch_js"])
def test_vllm_records_equal_hf_records(backends, rule):
    """Same seeds, same rule, same HeadSpec -> the same record from both backends: ids, text, per-round accepted
    counts, counters, stop reason and traces (one verify round; both cut the last round at
    max_new_tokens the same way; 17 and 22 tokens end inside a round)."""
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.datasets.base import Sample

    hf, vb = backends
    samples = [
        Sample(f"x/{i}", [{"role": "user", "content": c}])
        for i, c in enumerate(["def add(a, b):", "The quick brown fox", "for i in range(10):"])
    ]
    heads = HeadSpec(K=5, p_drop=0.3) if rule.startswith("dropmatch") else HeadSpec()
    accepted = 0
    for cap in (17, 22):
        dec = DecodingConfig(
            num_speculative_tokens=3, max_new_tokens=cap, seed=3, trace=rule != "greedy_match"
        )
        h = [_record(r) for r in hf.generate(samples, dec, CRITERIA.get(rule)(), heads)]
        v = [_record(r) for r in vb.generate(samples, dec, CRITERIA.get(rule)(), heads)]
        for i, (a, b) in enumerate(zip(v, h)):
            for key in b:
                if key != "trace":
                    assert a[key] == b[key], (rule, cap, i, key)
            _assert_same_trace(a["trace"], b["trace"])
        accepted += sum(sum(r["rounds"]) for r in h)
        for r in h:
            c = r["counters"]
            assert (
                c["num_drafts"] + c["num_accepted_tokens"] == len(r["ids"]) - 1 + r["eos_removed"]
            )
    assert accepted > 0, "no draft accepted: the comparison is vacuous"


def _hf_reference(target, draft, prompt, L, crit, heads, seed, max_new):
    """Plain transformers SD with vLLM's round structure (token 1 from the prefill, then rounds), no KV cache,
    deciding with the shared verify_round."""
    import torch

    from criteria.dropout_heads import LMHead
    from criteria.verify import verify_round
    from runners.backends.seeding import make_generator

    gen = make_generator(seed)
    ids = list(prompt)
    with torch.no_grad():
        ids.append(int(target(torch.tensor([ids])).logits[0, -1].argmax()))
        rounds = []
        while len(ids) - len(prompt) < max_new:
            drafts, qs = [], []
            for _ in range(L):
                lg = draft(torch.tensor([ids + drafts])).logits[0, -1].float()
                drafts.append(int(lg.argmax()))
                qs.append(torch.softmax(lg, dim=-1))
            hidden = target.model(torch.tensor([ids + drafts])).last_hidden_state[
                :, -(L + 1) :
            ]  # [1, L+1, d]
            res = verify_round(
                hidden,
                LMHead(target.lm_head.weight),
                torch.tensor([drafts]),
                crit,
                heads,
                temperature=0.0,
                generators=[gen],
                draft_probs=torch.stack(qs)[None],
            )
            a = int(res.num_accepted[0])
            ids += drafts[:a] + [int(res.next_token_ids[0])]
            rounds.append(a)
    return ids[len(prompt) :], rounds


@pytest.mark.parametrize("rule", ["dropmatch_naive", "dropmatch_js"])
def test_vllm_hook_matches_transformers_reference(hf_pair, llm, rule):
    """Same seed, same round structure -> same accepted counts and tokens as a direct transformers loop."""
    from vllm import SamplingParams, TokensPrompt

    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA

    tok, target, draft = hf_pair.tokenizer, hf_pair.target, hf_pair.draft
    crit, heads = CRITERIA.get(rule)(), HeadSpec(K=5, p_drop=0.3)
    llm.collective_rpc("dropmatch_install", args=(rule, {}, heads.as_dict(), 0, False, False))
    total = 0
    for i, text in enumerate(["def add(a, b):", "The quick brown fox"]):
        prompt = tok(text)["input_ids"]
        seed = 100 + i
        ref_ids, ref_rounds = _hf_reference(target, draft, prompt, 3, crit, heads, seed, 24)
        out = llm.generate(
            [TokensPrompt(prompt_token_ids=prompt)],
            SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, seed=seed),
            use_tqdm=False,
        )[0]
        rounds = [r.num_accepted for r in llm.collective_rpc("dropmatch_take_rounds")[0]]
        got = list(out.outputs[0].token_ids)
        assert got == ref_ids[: len(got)]
        k = (
            min(len(rounds), len(ref_rounds)) - 1
        )  # the token limit cuts the final round differently
        assert k > 3 and rounds[:k] == ref_rounds[:k]
        total += sum(ref_rounds[:k])
    assert total > 0
