"""Same seed, same rule -> the vLLM hook and the HF reference loop decide identically (T = 0)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it


@pytest.mark.parametrize("rule", ["dropmatch_naive", "dropmatch_js"])
def test_vllm_hook_matches_hf_loop(tiny_pair, llm, rule):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA
    from runners.backends.base import DecodingConfig
    from runners.backends.hf_loop import HFLoopBackend
    from runners.backends.vllm_engine import VLLMBackend
    from runners.datasets.base import Sample

    target, draft = tiny_pair
    load = lambda p: AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval()  # noqa: E731
    hf_pair = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(target), target=load(target), draft=load(draft),
                              target_dir=str(target), draft_dir=str(draft))
    hf = HFLoopBackend(hf_pair, prefix_caching=False)
    vb = VLLMBackend(hf_pair, max_model_len=512)
    vb._llm, vb._llm_key = llm, (3, False)
    samples = [Sample(f"x/{i}", [{"role": "user", "content": c}]) for i, c in
               enumerate(["def add(a, b):", "The quick brown fox"])]
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=24, seed=3)
    crit = CRITERIA.get(rule)(K=5, p_drop=0.3)
    for h, v in zip(hf.generate(samples, dec, crit), vb.generate(samples, dec, crit)):
        n = min(len(h.output_token_ids), len(v.output_token_ids))
        assert n > 0 and h.output_token_ids[:n] == v.output_token_ids[:n]
        # rounds before the last one (the token limit is applied differently in the final round)
        k = min(len(h.accepted_per_round), len(v.accepted_per_round)) - 1
        assert k > 0 and h.accepted_per_round[:k] == v.accepted_per_round[:k]
        assert sum(h.accepted_per_round[:k]) > 0


def _hf_reference(target, draft, prompt, L, crit, seed, max_new):
    """Plain transformers SD with vLLM's round structure (token 1 from the prefill, then rounds), no KV cache."""
    import torch

    from criteria.base import VerifyInputs
    from criteria.dropout_heads import dropout_head_logits

    gen = torch.Generator().manual_seed(seed)
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
            hidden = target.model(torch.tensor([ids + drafts])).last_hidden_state[0, -(L + 1):]  # [L+1, d]
            heads = dropout_head_logits(hidden, target.lm_head.weight, None, num_heads=crit.num_heads,
                                        p_drop=crit.p_drop, generator=gen)  # [L+1, 1+K, V]
            res = crit(VerifyInputs(draft_token_ids=torch.tensor([drafts]), target_logits=heads[:, 0][None],
                                    draft_probs=torch.stack(qs)[None], head_logits=heads[:, 1:][None],
                                    temperature=0.0, generator=gen))
            a = int(res.num_accepted[0])
            ids += drafts[:a] + [int(res.next_token_ids[0])]
            rounds.append(a)
    return ids[len(prompt):], rounds


@pytest.mark.parametrize("rule", ["dropmatch_naive", "dropmatch_js"])
def test_vllm_hook_matches_transformers_reference(tiny_pair, llm, rule):
    """Same seed, same round structure -> same accepted counts and tokens as a direct transformers loop."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vllm import SamplingParams, TokensPrompt

    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA

    target_dir, draft_dir = tiny_pair
    tok = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=torch.float32).eval()
    crit = CRITERIA.get(rule)(K=5, p_drop=0.3)
    llm.collective_rpc("dropmatch_install", args=(rule, {"K": 5, "p_drop": 0.3}, 0, False, False))
    total = 0
    for i, text in enumerate(["def add(a, b):", "The quick brown fox"]):
        prompt = tok(text)["input_ids"]
        seed = 100 + i
        ref_ids, ref_rounds = _hf_reference(target, draft, prompt, 3, crit, seed, 24)
        out = llm.generate([TokensPrompt(prompt_token_ids=prompt)],
                           SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, seed=seed), use_tqdm=False)[0]
        rounds = [r.num_accepted for r in llm.collective_rpc("dropmatch_take_rounds")[0]]
        got = list(out.outputs[0].token_ids)
        assert got == ref_ids[: len(got)]
        k = min(len(rounds), len(ref_rounds)) - 1  # the token limit cuts the final round differently
        assert k > 3 and rounds[:k] == ref_rounds[:k]
        total += sum(ref_rounds[:k])
    assert total > 0
