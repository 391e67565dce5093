"""Shared constants and helpers of the vLLM tests (not a test module; imported by them)."""

from __future__ import annotations

L = 3
PROMPTS = ["def add(a, b):", "The quick brown"]


def _run(llm, rule=None, kwargs=None, *, max_tokens=24, seed=7, record_inputs=False, record_trace=False):
    """Generate PROMPTS greedily; return (token ids, counters delta, recorded rounds, outputs)."""
    if rule is None:
        llm.collective_rpc("dropmatch_uninstall")
    else:
        llm.collective_rpc("dropmatch_install", args=(rule, kwargs or {}, 0, record_inputs, record_trace))
    import vllm

    from runners.backends.vllm_engine import metrics_delta, read_spec_metrics

    sp = [vllm.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, seed=seed + i)
          for i in range(len(PROMPTS))]
    before = read_spec_metrics(llm)
    outs = llm.generate(PROMPTS, sp, use_tqdm=False)
    delta = metrics_delta(before, read_spec_metrics(llm), L)
    rounds = llm.collective_rpc("dropmatch_take_rounds")[0]
    return [list(o.outputs[0].token_ids) for o in outs], delta, rounds, outs
