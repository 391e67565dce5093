"""One line of ``samples.jsonl``: a decoded sample as the record keeps it, made from the backend's result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runners.backends.base import SampleResult


def sample_record(
    res: SampleResult,
    *,
    prompt: Mapping[str, Any],
    reference: Any,
    quality: Mapping[str, Any],
    seed: int,
) -> dict:
    """The record of one sample.

    Args:
        res: the backend's result (output, counters, timings, optional trace).
        prompt: :func:`runners.datasets.base.prompt_record` of the prompt sent.
        reference: the sample's reference (what the scorer graded against).
        quality: the scorer's per-sample result.
        seed: the run's ``decoding.seed``.

    Returns:
        ``sample_id``, ``prompt``, ``output_text``, ``output_token_ids``, ``reference``, ``quality``, ``spec``
        (the counters), ``accepted_per_round``, ``stop_reason``, ``eos_removed``, ``speed`` (tokens and seconds:
        ``wall_s``, ``prefill_s``, ``draft_s``, ``verify_s``, ``criterion_s``, ``plain_s``, ``rule_s``, ``audit_s`` with ``audit_outside_wall`` and ``share_s`` when
        measured), ``seed``, ``trace`` when the backend traced, ``audit`` when it audited the sparse variant and
        ``escape`` (positions per rung of the escape ladder) when a position reached it.
    """
    speed = {
        "num_output_tokens": res.num_output_tokens,
        "wall_s": res.wall_s,
        "prefill_s": res.prefill_s,
        "draft_s": res.draft_s,
        "verify_s": res.verify_s,
        "criterion_s": res.criterion_s,
    }
    if res.plain_s is not None and res.rule_s is not None:
        speed["plain_s"], speed["rule_s"] = res.plain_s, res.rule_s
    if res.audit_s:
        speed["audit_s"] = res.audit_s
        speed["audit_outside_wall"] = True  # the loops leave the audit out of wall_s / share_s
    if res.share_s is not None:
        speed["share_s"] = res.share_s
    rec = {
        "sample_id": res.sample_id,
        "prompt": dict(prompt),
        "output_text": res.output_text,
        "output_token_ids": res.output_token_ids,
        "reference": reference,
        "quality": quality,
        "spec": res.counters.to_dict(),
        "accepted_per_round": res.accepted_per_round,
        "stop_reason": res.stop_reason,
        "eos_removed": res.eos_removed,
        "speed": speed,
        "seed": int(seed),
    }
    if res.trace is not None:
        rec["trace"] = res.trace
    if res.audit is not None:
        rec["audit"] = res.audit
    if res.escape:
        rec["escape"] = dict(res.escape)
    return rec
