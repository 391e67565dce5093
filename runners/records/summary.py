"""Aggregate a run's sample records into its summary (pure; ``spec/``, ``speed/``, ``quality/`` keys).

Speed follows Spec-Bench: ``speed/tok_per_s`` is the mean of per-sample rates (output tokens / generation
wall seconds, prefill excluded); ``speed/tok_per_s_total`` is total tokens / total seconds;
``speed/tok_per_s_aggregate`` (when records carry ``speed.share_s``) is total tokens / the run's decoding
wall time (the sum of the samples' shares of the batch's time): the aggregate throughput of a batched run.
``speed/draft_s`` / ``verify_s`` / ``criterion_s`` / ``audit_s`` sum the samples' parts (each sample counts
every round it took part in), ``speed/plain_s`` / ``speed/rule_s`` (when every sample with rounds has them) the
parts of ``criterion_s`` to the plain logits and after them; ``escape/positions`` sums the positions that reached each rung of the escape ladder.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from runners.records.counters import (
    SpecDecodeCounters,
    acceptance_histogram,
    acceptance_rate,
    mean_acceptance_length,
    per_position_rate,
)


def total_counters(samples: Sequence[Mapping[str, Any]], L: int) -> SpecDecodeCounters:
    total = SpecDecodeCounters(num_speculative_tokens=L)
    for s in samples:
        total = total + SpecDecodeCounters.from_dict(s["spec"])
    return total


def summarize(
    samples: Sequence[Mapping[str, Any]],
    L: int,
    aggregate: Callable[[list[dict]], dict] | None = None,
) -> dict[str, Any]:
    """Summary of one run from its sample records.

    Args:
        samples: records as written by ``runners.run`` (keys ``spec``, ``speed``, ``quality``).
        L: draft length of the run (0 for AR).
        aggregate: the scorer's ``aggregate(per_sample_quality) -> dict`` (None: no quality).
    """
    c = total_counters(samples, L)
    rates = [
        s["speed"]["num_output_tokens"] / s["speed"]["wall_s"]
        for s in samples
        if s["speed"]["wall_s"] > 0
    ]
    tokens = sum(s["speed"]["num_output_tokens"] for s in samples)
    wall = sum(s["speed"]["wall_s"] for s in samples)
    out: dict[str, Any] = {
        "num_samples": len(samples),
        "spec/counters": c.to_dict(),
        "spec/mean_acceptance_length": mean_acceptance_length(c),
        "spec/acceptance_rate": acceptance_rate(c) if c.num_draft_tokens else None,
        "spec/per_position_rate": per_position_rate(c) if c.num_drafts else [],
        # the same run in the names of vLLM's per-request spec-decode metrics (mean acceptance length and the
        # accepted-draft-length distribution, bonus token not counted), so a client's tooling reads it as is
        "speculative_decoding": {
            "num_drafts": c.num_drafts,
            "num_draft_tokens": c.num_draft_tokens,
            "num_accepted_tokens": c.num_accepted_tokens,
            "mean_acceptance_length": mean_acceptance_length(c),
            "draft_acceptance_rate": acceptance_rate(c) if c.num_draft_tokens else None,
            "acceptance_histogram": {
                str(k): v
                for k, v in acceptance_histogram(
                    [a for s in samples for a in s.get("accepted_per_round") or []]
                ).items()
            }
            if L > 0
            else {},
        },
        "speed/num_output_tokens": tokens,
        "speed/wall_s": wall,
        "speed/prefill_s": sum(s["speed"].get("prefill_s", 0.0) for s in samples),
        "speed/tok_per_s": statistics.fmean(rates) if rates else math.nan,
        "speed/tok_per_s_std": statistics.stdev(rates) if len(rates) > 1 else 0.0,
        "speed/tok_per_s_total": tokens / wall if wall > 0 else math.nan,
    }
    reps = [s["speed"].get("wall_s_repeats") or [s["speed"]["wall_s"]] for s in samples]
    R = min((len(r) for r in reps), default=1)
    if R > 1:  # per-repeat run rate (mean over samples), then mean +- std over repeats
        per_rep = [
            statistics.fmean(
                s["speed"]["num_output_tokens"] / r[j] for s, r in zip(samples, reps) if r[j] > 0
            )
            for j in range(R)
        ]
        out["speed/tok_per_s"] = statistics.fmean(per_rep)
        out["speed/tok_per_s_repeat_std"] = statistics.stdev(per_rep)
    out["speed/repeats"] = R
    shares = [s["speed"].get("share_s") for s in samples]
    if (
        samples and all(x is not None for x in shares) and sum(shares) > 0
    ):  # batched backends: aggregate rate
        out["speed/tok_per_s_aggregate"] = tokens / sum(shares)
    out.update(round_parts(samples))
    if any("audit_s" in s["speed"] for s in samples):
        out["speed/audit_s"] = sum(s["speed"].get("audit_s", 0.0) for s in samples)
        # True when every audited sample's wall_s left the audit out (records written before that count it in)
        out["speed/audit_outside_wall"] = all(
            bool(s["speed"].get("audit_outside_wall")) for s in samples if "audit_s" in s["speed"]
        )
    if aggregate is not None:
        q = aggregate([s["quality"] for s in samples]) if samples else {}
        out.update({f"quality/{k}": v for k, v in q.items()})
    return out


def round_parts(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The rounds' seconds by part summed over the samples (``speed/draft_s`` / ``verify_s`` / ``criterion_s``, and
    ``speed/plain_s`` / ``rule_s`` when every sample with rounds has them) and ``escape/positions`` (per rung)."""
    out: dict[str, Any] = {
        f"speed/{part}": sum(s["speed"].get(part, 0.0) for s in samples)
        for part in ("draft_s", "verify_s", "criterion_s")
    }
    # a sample that ended at its prefill had no round to measure: the run's sums need every other sample's
    decided = [s for s in samples if s.get("accepted_per_round")]
    if decided and all("rule_s" in s["speed"] for s in decided):
        for part in ("plain_s", "rule_s"):
            out[f"speed/{part}"] = sum(s["speed"].get(part, 0.0) for s in decided)
    rungs = sorted({k for s in samples for k in s.get("escape", {})})
    if rungs:
        out["escape/positions"] = {
            k: sum(s.get("escape", {}).get(k, 0) for s in samples) for k in rungs
        }
    return out
