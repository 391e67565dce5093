"""Summary of a benchmark run from its record lines (pure): rates, ratios, τ, token equality, cost ratios.

Keys (``bench/`` namespace; units in the suffix):
  - ``bench/<arm>/tok_per_s``: total output tokens / total wall seconds over every prompt and repeat, prefill
    included (the same for every arm); ``.../decode_tok_per_s``: after the first committed chunk (prefill excluded);
    ``.../tok_per_s_repeat_std``: std over repeats of the per-repeat rate;
  - ``bench/<arm>/x_<ref>`` (and ``x_<ref>_decode``): rate ratio to arm ``ref`` (``ar``, ``hf_ar``,
    ``hf_assisted``, ``f32_ar``, ``lc_ar``); ``x_<ref>_repeat_std``: std over repeats of the per-repeat (paired) ratio;
    ``x_<ref>_median``: median over lines (prompt x repeat) of the per-line rate ratio (robust to bursts of load);
  - ``bench/<arm>/tau``: 1 + accepted / rounds (speculative arms);
  - ``bench/<arm>/identical_to_ar``: lines whose output token ids equal ``ar``'s on the same prompt and repeat
    (the SD arms of the float32 and llama.cpp engines: ``f32_ar``'s / ``lc_ar``'s, the AR of their own engine), of ``bench/num_lines``; ``.../first_mismatches``: ``{prompt_id, repeat, position, ar_token, arm_token}``
    (position = index of the first differing output token; a token of -1 = the output ended there);
  - ``bench/in_situ/verify_over_decode``: our SD's mean verify seconds per pass / our AR's per step, inside
    the loop; ``bench/in_situ/dm_overhead_share``: SD+DM's extra verify + criterion seconds per pass over SD's,
    as a share of SD's verify pass (the exactness audit not included: ``bench/in_situ/dm_audit_share``, the
    audit's seconds per pass over SD's verify pass); ``bench/in_situ/dm_decision_share``: the decision alone,
    SD+DM's decision seconds per pass less SD's over SD's verify pass, the round meter's parts where recorded
    (:func:`runners.records.bench_lines.decision_share`: the two arms' forwards do the same work, so their
    difference is the forward's own variation, not the decision); ``bench/in_situ/f32_*`` / ``lc_*``: the same for
    the float32 and llama.cpp arms (:mod:`runners.records.bench_arm_names`);
  - ``bench/latency/*``: :func:`runners.measure.latency.summarize_timings` of the ``latency/<k>`` lines.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from runners.measure.latency import summarize_timings
from runners.records.bench_arm_names import ENGINES, SPEC_ARMS, engine_ar
from runners.records.bench_lines import decision_per_pass, decision_share

REFS = ("ar", "hf_ar", "hf_assisted", "f32_ar", "lc_ar")


def first_mismatch(a: Sequence[int], b: Sequence[int]) -> tuple[int, int, int] | None:
    """``(position, a_token, b_token)`` of the first difference of two id lists (-1 past an end), None if equal."""
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else -1
        y = b[i] if i < len(b) else -1
        if x != y:
            return i, x, y
    return None


def _rate(results: Sequence[Mapping[str, Any]], tokens: str, seconds: str) -> float:
    s = sum(r[seconds] for r in results)
    return sum(r[tokens] for r in results) / s if s > 0 else float("nan")


def _std(xs: Sequence[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def summarize_bench(
    lines: Sequence[Mapping[str, Any]], arms: Sequence[str], L: int, context: int
) -> dict:
    """The ``bench/*`` summary of a run's lines (see the module docstring)."""
    prompts = [ln for ln in lines if ln.get("kind") == "prompt"]
    reps = sorted({int(p["repeat"]) for p in prompts})
    out: dict[str, Any] = {
        "bench/L": L,
        "bench/arms": list(arms),
        "bench/num_lines": len(prompts),
        "bench/num_prompts": len({p["prompt_id"] for p in prompts}),
        "bench/repeats": len(reps),
    }
    if prompts:
        out["model/dtype"] = prompts[-1]["model"]["dtype"]
        out["model/threads"] = sorted({p["model"]["threads"] for p in prompts})
        if prompts[-1]["model"].get("isa") is not None:
            out["model/isa"] = prompts[-1]["model"]["isa"]
        if prompts[-1]["model"].get("f32_dtype"):
            out["model/f32_dtype"] = prompts[-1]["model"]["f32_dtype"]
        if prompts[-1]["model"].get("gguf"):
            out["model/gguf_precision"] = prompts[-1]["model"]["gguf"]["precision"]
        out["bench/prompt_tokens_mean"] = statistics.fmean(p["prompt_tokens"] for p in prompts)
        out["bench/loadavg_1min_max"] = max(p.get("loadavg_1min") or 0.0 for p in prompts)
    arm_results = _Results(prompts)
    rate = {a: _rate(arm_results(a), "tokens", "seconds") for a in arms}
    for arm in arms:
        out.update(_arm_summary(arm, arm_results, reps, rate[arm]))
        for ref in REFS:
            if ref in arms and ref != arm:
                out.update(_speedups(arm, ref, arm_results, reps, rate))
        # speculative arms against their own engine's AR; the other engines' AR against ours (do they agree?)
        ref_ar = engine_ar(arm) if arm in SPEC_ARMS and engine_ar(arm) in arms else "ar"
        if arm != ref_ar:
            out.update(_identical_to_ar(arm, prompts, ref_ar))
    ar_runs = {}
    for p in prompts:  # greedy AR must repeat itself exactly
        ar_runs.setdefault(p["prompt_id"], set()).add(tuple(p["arms"]["ar"]["output_token_ids"]))
    out["bench/ar/deterministic"] = all(len(v) == 1 for v in ar_runs.values())
    out.update(_in_situ(arms, arm_results))
    lat = [ln for ln in lines if ln.get("kind") == "latency"]
    out.update(
        {k.replace("latency/", "bench/latency/", 1): v for k, v in summarize_timings(lat).items()}
    )
    out["bench/latency/context"] = context
    return out


class _Results:
    """``results(arm, rep=None)``: the arm's per-prompt results, of one repeat or of all."""

    def __init__(self, prompts: Sequence[Mapping[str, Any]]) -> None:
        self.prompts = prompts

    def __call__(self, arm: str, rep: int | None = None) -> list[Mapping[str, Any]]:
        return [
            p["arms"][arm]
            for p in self.prompts
            if arm in p["arms"] and (rep is None or p["repeat"] == rep)
        ]


def _arm_summary(arm: str, results: _Results, reps: Sequence[int], rate: float) -> dict:
    """One arm's rates (all tokens, decode only), tokens, seconds and, for speculative arms, tau."""
    res = results(arm)
    per_rep = [_rate(results(arm, r), "tokens", "seconds") for r in reps]
    out = {
        f"bench/{arm}/tok_per_s": rate,
        f"bench/{arm}/tok_per_s_repeat_std": _std(per_rep),
        f"bench/{arm}/decode_tok_per_s": _rate(res, "decode_tokens", "decode_s"),
        f"bench/{arm}/num_output_tokens": sum(r["tokens"] for r in res),
        f"bench/{arm}/wall_s": sum(r["seconds"] for r in res),
    }
    if arm in SPEC_ARMS:
        rounds = sum(r["rounds"] for r in res)
        out[f"bench/{arm}/tau"] = (
            1 + sum(r["accepted"] for r in res) / rounds if rounds else float("nan")
        )
    return out


def _speedups(
    arm: str, ref: str, results: _Results, reps: Sequence[int], rate: Mapping[str, float]
) -> dict:
    """``arm`` over ``ref``: pooled, decode only, its spread over repeats, and the median per-line ratio."""
    key = f"bench/{arm}/x_{ref}"
    paired = [
        _rate(results(arm, r), "tokens", "seconds") / _rate(results(ref, r), "tokens", "seconds")
        for r in reps
    ]
    per_line = [
        p["arms"][arm]["tokens"]
        / p["arms"][arm]["seconds"]
        * p["arms"][ref]["seconds"]
        / p["arms"][ref]["tokens"]
        for p in results.prompts
        if arm in p["arms"]
        and ref in p["arms"]
        and p["arms"][ref]["tokens"]
        and p["arms"][arm]["seconds"] > 0
    ]
    return {
        key: rate[arm] / rate[ref],
        f"{key}_decode": _rate(results(arm), "decode_tokens", "decode_s")
        / _rate(results(ref), "decode_tokens", "decode_s"),
        f"{key}_repeat_std": _std(paired),
        f"{key}_median": statistics.median(per_line) if per_line else float("nan"),
    }


def _identical_to_ar(arm: str, prompts: Sequence[Mapping[str, Any]], ref_ar: str = "ar") -> dict:
    """How many of the arm's outputs equal the AR arm ``ref_ar``'s, and where the others first differ."""
    same, mism = 0, []
    for p in prompts:
        if arm not in p["arms"] or ref_ar not in p["arms"]:
            continue
        d = first_mismatch(
            p["arms"][ref_ar]["output_token_ids"], p["arms"][arm]["output_token_ids"]
        )
        if d is None:
            same += 1
        else:
            mism.append(
                {
                    "prompt_id": p["prompt_id"],
                    "repeat": p["repeat"],
                    "position": d[0],
                    "ar_token": d[1],
                    "arm_token": d[2],
                }
            )
    return {f"bench/{arm}/identical_to_ar": same, f"bench/{arm}/first_mismatches": mism}


def _in_situ(arms: Sequence[str], results: _Results) -> dict:
    """Verify pass over decode step and the DropMatch decision's share of a verify pass, as the loop ran them."""

    def per_pass(arm: str, *parts: str) -> float:
        res = results(arm)
        n = sum(r["verify_passes"] for r in res)
        return sum(r.get(p, 0.0) for r in res for p in parts) / n if n else float("nan")

    out = {}
    for pre in ENGINES:
        if f"{pre}sd" in arms and f"{pre}ar" in arms:
            sd_verify = per_pass(f"{pre}sd", "verify_s")
            out[f"bench/in_situ/{pre}verify_over_decode"] = sd_verify / per_pass(
                f"{pre}ar", "verify_s"
            )
            if f"{pre}sd_dm" in arms:
                extra = per_pass(f"{pre}sd_dm", "verify_s", "criterion_s") - per_pass(
                    f"{pre}sd", "verify_s", "criterion_s"
                )
                out[f"bench/in_situ/{pre}dm_overhead_share"] = extra / sd_verify
                # the decision alone: the rounds' criterion time, without the forward's own variation
                out[f"bench/in_situ/{pre}dm_decision_share"] = decision_share(
                    decision_per_pass(results.prompts, f"{pre}sd_dm", f"{pre}sd")
                )
                # the exactness audit (a measurement on top of the sparse decision, criteria/audit.py)
                out[f"bench/in_situ/{pre}dm_audit_share"] = (
                    per_pass(f"{pre}sd_dm", "audit_s") / sd_verify
                )
    return out
