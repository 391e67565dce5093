"""Shared constants and helpers of the vLLM tests (not a test module; imported by them)."""

from __future__ import annotations

L = 3
PROMPTS = ["def add(a, b):", "The quick brown"]


def _run(
    llm,
    rule=None,
    heads=None,
    *,
    rule_kwargs=None,
    max_tokens=24,
    seed=7,
    record_inputs=False,
    record_trace=False,
):
    """Generate PROMPTS greedily with ``rule`` (None: vLLM's own sampler) and ``heads`` (``{"K", "p_drop"}``);
    return (token ids, counters, recorded rounds, outputs).

    The counters are the sum of vLLM's raw per-request spec-decode metrics (``ignore_eos``, so nothing is cut
    but the last step's drafts past ``max_tokens``), which belong to ``llm`` itself.
    ``llm.get_metrics()`` is not used here: vLLM's Prometheus registry is process-wide and keeps only the
    newest engine's counters, and a test session holds several engines (see ``conftest.py``).
    """
    if rule is None:
        llm.collective_rpc("dropmatch_uninstall")
    else:
        llm.collective_rpc(
            "dropmatch_install",
            args=(rule, rule_kwargs or {}, heads or {}, 0, record_inputs, record_trace),
        )
    import vllm

    from runners.backends.vllm_counters import request_counters
    from runners.records.counters import SpecDecodeCounters

    sp = [
        vllm.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, seed=seed + i)
        for i in range(len(PROMPTS))
    ]
    outs = llm.generate(PROMPTS, sp, use_tqdm=False)
    counters = SpecDecodeCounters(num_speculative_tokens=L)
    for o in outs:
        counters = counters + request_counters(o.outputs[0], L)[0]
    rounds = llm.collective_rpc("dropmatch_take_rounds")[0]
    return [list(o.outputs[0].token_ids) for o in outs], counters, rounds, outs
