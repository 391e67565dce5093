"""The real embedded pair (Qwen2.5-Coder 0.5B draft -> 1.5B target, fp32) through vLLM with DropMatch.

CPU-heavy (about 8 GB of weights, minutes on 2 cores): marked ``slow``. Prints tokens/s and acceptance.
"""

from __future__ import annotations

import glob
import os
import time

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.embedded, pytest.mark.own_engine]
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it
import vllm  # noqa: E402

MODELS = os.path.expanduser(
    os.environ.get("DROPMATCH_MODELS_DIR", "~/.cache/dropmatch-bench/models")
)
L = 5
MAX_TOKENS = 24
QUESTIONS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
]


def _model_dir(name: str) -> str:
    hits = [
        d
        for d in sorted(glob.glob(os.path.join(MODELS, f"Qwen--{name}-*")))
        if os.path.exists(f"{d}/.complete")
    ]
    if not hits:
        pytest.skip(f"{name} not prepared under {MODELS}")
    return hits[-1]


def test_real_pair_dropmatch_in_vllm():
    from runners.backends.vllm_counters import metrics_delta, read_spec_metrics
    from runners.records.counters import acceptance_rate, mean_acceptance_length

    target, draft = (
        _model_dir("Qwen2.5-Coder-1.5B-Instruct"),
        _model_dir("Qwen2.5-Coder-0.5B-Instruct"),
    )
    llm = vllm.LLM(
        model=target,
        enforce_eager=True,
        dtype="float32",
        max_model_len=1024,
        seed=0,
        disable_log_stats=False,
        per_request_spec_decode_metrics="detailed",
        worker_extension_cls="runners.backends.vllm_dropmatch_hook.DropMatchWorkerExtension",
        speculative_config={"method": "draft_model", "model": draft, "num_speculative_tokens": L},
    )
    tok = llm.get_tokenizer()
    prompts = [
        vllm.TokensPrompt(
            prompt_token_ids=tok.apply_chat_template(
                [{"role": "user", "content": q}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        )
        for q in QUESTIONS
    ]
    results = {}
    for label, rule, kw in [
        ("native", None, None),
        ("dm_naive_p0", "dropmatch_naive", {"K": 5, "p_drop": 0.0}),
        ("dm_naive", "dropmatch_naive", {"K": 5, "p_drop": 0.3}),
        ("dm_js", "dropmatch_js", {"K": 5, "p_drop": 0.3}),
    ]:
        if rule is None:
            llm.collective_rpc("dropmatch_uninstall")
        else:
            llm.collective_rpc("dropmatch_install", args=(rule, {}, kw, 0, False, False))
        ids, c = [], None
        before, t0 = read_spec_metrics(llm), time.perf_counter()
        for i, p in enumerate(prompts):  # batch 1, as the speed tables
            sp = vllm.SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, seed=i)
            ids.append(list(llm.generate([p], sp, use_tqdm=False)[0].outputs[0].token_ids))
        wall = time.perf_counter() - t0
        c = metrics_delta(before, read_spec_metrics(llm), L)
        results[label] = (ids, c)
        print(
            f"\n{label}: {sum(map(len, ids)) / wall:.2f} tok/s, tau={mean_acceptance_length(c):.3f}, "
            f"accepted {c.num_accepted_tokens}/{c.num_draft_tokens}, per_pos={c.num_accepted_tokens_per_pos}"
        )
        llm.collective_rpc("dropmatch_take_rounds")
    assert results["dm_naive_p0"][0] == results["native"][0]
    assert results["dm_naive_p0"][1].to_dict() == results["native"][1].to_dict()
    for _, c in results.values():
        assert sum(c.num_accepted_tokens_per_pos) == c.num_accepted_tokens
        assert c.num_accepted_tokens <= c.num_draft_tokens <= L * c.num_drafts
    # lossy rule: a per-draft-token acceptance rate at least greedy match's (a fixed token budget means
    # fewer rounds, so compare rates, not totals)
    assert acceptance_rate(results["dm_naive"][1]) >= acceptance_rate(results["native"][1])
