"""Summary of the benchmark's batched units (``batch<B>/<repeat>`` lines, pure): aggregate rates at batch B,
their ratio to the same arm at batch 1 on the same prompts, to the engine's AR at batch B, τ, and whether
decoding together changed an output.

A batch line (``kind: batch``, :meth:`runners.measure.bench._Arms.batch_line`) holds, per arm, the output tokens of
the B prompts decoded together, the wall seconds of that one call and each prompt's output
(:func:`runners.measure.bench_arms.our_generate_batch`). Keys (``bench/batch<B>/`` namespace):
  - ``num_prompts`` (B), ``repeats``, ``prompt_ids`` (the first B prompts of the data set);
  - ``<arm>/tok_per_s``: Σ output tokens / Σ wall seconds over the repeats (aggregate: all B prompts);
    ``<arm>/tok_per_s_repeat_std``: std over repeats of the per-repeat rate;
  - ``<arm>/batch1_tok_per_s``: the same arm at batch 1 (the ``<prompt>#<repeat>`` lines) on the same B prompts
    and repeats, Σ tokens / Σ seconds; ``<arm>/x_batch1``: the ratio of the two rates;
  - ``<arm>/x_<ref>``: rate ratio to the engine's AR at batch B (``ar``, ``f32_ar``, ``lc_ar``:
    :func:`runners.records.bench_arm_names.engine_ar`);
  - ``<arm>/decode_tok_per_s``, ``<arm>/batch1_decode_tok_per_s``, ``<arm>/decode_x_batch1``: the same with the
    prefills left out (the batch call's ``decode_tokens`` / ``decode_s``: each prompt's first token and its
    prefill excluded; batch 1: the calls' own ``decode_*``), absent in lines recorded before those fields;
  - ``<arm>/tau``: 1 + accepted / rounds over the B prompts and repeats (speculative arms);
  - ``<arm>/identical_to_batch1`` of ``<arm>/num_outputs``: outputs (prompt x repeat) equal to the same arm's
    batch-1 output of that prompt and repeat; ``<arm>/first_mismatches``: ``{prompt_id, repeat, position,
    batch1_token, batch_token}`` (-1: the output ended there).
:func:`paired_repeats` gives the per-repeat totals both ratios pool (``analysis.tables.bench_batch`` reads the same
totals from the lines for its bootstrap over repeats).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from runners.measure.bench_summary import first_mismatch
from runners.records.bench_arm_names import SPEC_ARMS, engine_ar
from runners.records.bench_lines import batch_lines, paired_repeats

PREFIX = "bench/batch"


def pooled_ratio(pairs: Sequence[tuple[float, float, float, float]]) -> float:
    """(Σtokens / Σseconds of the arm) / (that of the reference); NaN without pairs or seconds."""
    ta, sa, tb, sb = (sum(p[i] for p in pairs) for i in range(4))
    if not pairs or sa <= 0 or sb <= 0 or tb <= 0:
        return float("nan")
    return (ta / sa) / (tb / sb)


def summarize_batches(lines: Sequence[Mapping[str, Any]], arms: Sequence[str]) -> dict:
    """The ``bench/batch<B>/*`` keys of every batch size present, and ``bench/batch_sizes`` (see the module
    docstring); empty when the run has no batch lines."""
    sizes = sorted({int(ln["batch_size"]) for ln in lines if ln.get("kind") == "batch"})
    if not sizes:
        return {}
    out: dict[str, Any] = {"bench/batch_sizes": [1, *sizes]}
    for B in sizes:
        bl = batch_lines(lines, B)
        key = f"{PREFIX}{B}"
        out[f"{key}/num_prompts"] = B
        out[f"{key}/repeats"] = len({int(ln["repeat"]) for ln in bl})
        out[f"{key}/prompt_ids"] = list(bl[0]["prompt_ids"])
        for arm in arms:
            if not any(arm in ln["arms"] for ln in bl):
                continue
            out.update(_arm(lines, bl, B, arm, f"{key}/{arm}"))
    return out


def _arm(
    lines: Sequence[Mapping[str, Any]],
    bl: Sequence[Mapping[str, Any]],
    B: int,
    arm: str,
    key: str,
) -> dict:
    res = [ln["arms"][arm] for ln in bl if arm in ln["arms"]]
    tokens, seconds = sum(r["tokens"] for r in res), sum(r["seconds"] for r in res)
    per_rep = [r["tokens"] / r["seconds"] for r in res if r["seconds"] > 0]
    one = paired_repeats(lines, B, arm)
    out = {
        f"{key}/tok_per_s": tokens / seconds if seconds > 0 else float("nan"),
        f"{key}/tok_per_s_repeat_std": statistics.stdev(per_rep) if len(per_rep) > 1 else 0.0,
        f"{key}/num_output_tokens": tokens,
        f"{key}/wall_s": seconds,
        f"{key}/batch1_tok_per_s": (
            sum(p[2] for p in one) / sum(p[3] for p in one) if one else float("nan")
        ),
        f"{key}/x_batch1": pooled_ratio(one),
    }
    dec = paired_repeats(lines, B, arm, decode=True)
    if dec and sum(p[1] for p in dec) > 0 and sum(p[3] for p in dec) > 0:
        out[f"{key}/decode_tok_per_s"] = sum(p[0] for p in dec) / sum(p[1] for p in dec)
        out[f"{key}/batch1_decode_tok_per_s"] = sum(p[2] for p in dec) / sum(p[3] for p in dec)
        out[f"{key}/decode_x_batch1"] = pooled_ratio(dec)
    ref = engine_ar(arm)
    if ref != arm and any(ref in ln["arms"] for ln in bl):
        out[f"{key}/x_{ref}"] = pooled_ratio(paired_repeats(lines, B, arm, ref))
    if arm in SPEC_ARMS:
        outs = [o for r in res for o in r["outputs"]]
        rounds = sum(o["rounds"] for o in outs)
        out[f"{key}/tau"] = (
            1 + sum(o["accepted"] for o in outs) / rounds if rounds else float("nan")
        )
    out.update(_identical_to_batch1(lines, bl, arm, key))
    return out


def _identical_to_batch1(
    lines: Sequence[Mapping[str, Any]], bl: Sequence[Mapping[str, Any]], arm: str, key: str
) -> dict:
    """Outputs at batch B equal to the same arm's batch-1 output of the same prompt and repeat."""
    single = {
        (p["prompt_id"], p["repeat"]): p["arms"][arm]["output_token_ids"]
        for p in lines
        if p.get("kind") == "prompt" and arm in p["arms"]
    }
    same, n, mism = 0, 0, []
    for ln in bl:
        if arm not in ln["arms"]:
            continue
        for o in ln["arms"][arm]["outputs"]:
            ref = single.get((o["prompt_id"], ln["repeat"]))
            if ref is None:
                continue
            n += 1
            d = first_mismatch(ref, o["output_token_ids"])
            if d is None:
                same += 1
            else:
                mism.append(
                    {
                        "prompt_id": o["prompt_id"],
                        "repeat": ln["repeat"],
                        "position": d[0],
                        "batch1_token": d[1],
                        "batch_token": d[2],
                    }
                )
    return {
        f"{key}/identical_to_batch1": same,
        f"{key}/num_outputs": n,
        f"{key}/first_mismatches": mism,
    }
