"""Spec-decode counters and timings of the vLLM backend: ours (cut to the output) and vLLM's own (raw).

Ours, as the HF backend's (:mod:`runners.backends.output`): a request's rounds are the
verify steps the hook logged for it (:class:`runners.backends.vllm_dropmatch_hook.RoundRecord`, one per step
that verified drafts, in order; logged for vLLM's own sampler too), cut by
:func:`runners.backends.output.cut_rounds` to the tokens that are in the finalized output, so
``num_drafts + num_accepted_tokens == len(output_token_ids) - 1 + eos_removed``.

vLLM's own count differs: its aggregate ``vllm:spec_decode_*`` counters (``llm.get_metrics()``) and its
per-request ``CompletionOutput.spec_decode_metrics.per_step_accepted / per_step_drafted`` count every draft
accepted in a step, also those past the EOS, the stop string or ``max_tokens`` that vLLM then discards; and
for a request ended by a stop string (detected in vLLM's frontend, which aborts the request) vLLM returns no
per-request metrics at all. So these raw numbers are never recorded; they are the cross-check: the uncut
logged rounds of a batch must add up to the ``get_metrics()`` delta around it, and where vLLM returns a
request's per-step lists they must equal its logged rounds.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from runners.backends.output import count_mismatched, cut_rounds, round_counters
from runners.records.counters import SpecDecodeCounters

SPEC_METRICS = (
    "num_drafts",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_accepted_tokens_per_pos",
)


def read_spec_metrics(llm: Any) -> dict[str, Any]:
    """Current values of vLLM's ``vllm:spec_decode_*`` counters (zeros / [] when absent)."""
    out: dict[str, Any] = {k: 0 for k in SPEC_METRICS}
    out["num_accepted_tokens_per_pos"] = []
    for m in llm.get_metrics():
        key = m.name.removeprefix("vllm:spec_decode_")
        if m.name.startswith("vllm:spec_decode_") and key in SPEC_METRICS:
            out[key] = list(m.values) if hasattr(m, "values") else int(m.value)
    return out


def metrics_delta(
    before: Mapping[str, Any], after: Mapping[str, Any], L: int
) -> SpecDecodeCounters:
    """Counters of what happened between two :func:`read_spec_metrics` snapshots."""
    pos_a = list(after["num_accepted_tokens_per_pos"]) + [0] * L
    pos_b = list(before["num_accepted_tokens_per_pos"]) + [0] * L
    return SpecDecodeCounters(
        num_speculative_tokens=L,
        num_drafts=int(after["num_drafts"] - before["num_drafts"]),
        num_draft_tokens=int(after["num_draft_tokens"] - before["num_draft_tokens"]),
        num_accepted_tokens=int(after["num_accepted_tokens"] - before["num_accepted_tokens"]),
        num_accepted_tokens_per_pos=[a - b for a, b in zip(pos_a[:L], pos_b[:L])],
    )


def raw_counters(drafted: Iterable[int], accepted: Iterable[int], L: int) -> SpecDecodeCounters:
    """vLLM's way: every step with drafts, every accepted draft (nothing cut)."""
    c = SpecDecodeCounters(num_speculative_tokens=L)
    for n, a in zip(drafted, accepted):
        if n > 0:
            c.observe_draft(int(n), int(a))
    return c


def request_counters(completion: Any, L: int) -> tuple[SpecDecodeCounters, list[int]]:
    """One request's RAW counters from vLLM's per-request metrics (``per_request_spec_decode_metrics="detailed"``).

    Returns ``(counters, accepted per step)``; zeros when vLLM returned no metrics (L = 0, or a request ended
    by a stop string).
    """
    sdm = getattr(completion, "spec_decode_metrics", None)
    if L == 0 or sdm is None:
        return SpecDecodeCounters(num_speculative_tokens=L), []
    return raw_counters(sdm.per_step_drafted, sdm.per_step_accepted, L), [
        int(a) for a in sdm.per_step_accepted
    ]


def logged_rounds(rounds: Iterable[Any]) -> tuple[list[int], list[int]]:
    """``(drafted, accepted)`` per round, in order, of the hook's ``RoundRecord`` s of one request."""
    rounds = list(rounds)
    return [int(r.num_draft_tokens) for r in rounds], [int(r.num_accepted) for r in rounds]


def check_against_vllm(completion: Any, drafted: list[int], accepted: list[int], what: str) -> None:
    """Where vLLM returned a request's per-step lists, they must equal the hook's logged rounds.

    Raises:
        RuntimeError: they differ (the hook's log and vLLM's scheduler saw different verify steps).
    """
    sdm = getattr(completion, "spec_decode_metrics", None)
    if sdm is not None and (list(sdm.per_step_drafted), list(sdm.per_step_accepted)) != (
        drafted,
        accepted,
    ):
        raise RuntimeError(
            f"{what}: the hook logged rounds (drafted {drafted}, accepted {accepted}) but vLLM's "
            f"per-request metrics say drafted {sdm.per_step_drafted}, accepted {sdm.per_step_accepted}"
        )


def logged_mismatches(rounds: Iterable[Any]) -> list[list[int]] | None:
    """Per round, the 0/1 mismatch flags of its accepted drafts; None if any round did not record them."""
    flags = [r.mismatched for r in rounds]
    return None if any(f is None for f in flags) else flags


def logged_times(rounds: Iterable[Any]) -> dict[str, Any]:
    """One request's round-meter timings, summed over its logged rounds (:class:`RoundRecord` ``verify_s``,
    ``plain_s``, ``rule_s``: each round holds its verify step's, as the HF backend's rows do) and its escape
    positions per rung: ``{"verify_s": float, "plain_s": float | None, "rule_s": float | None, "escape":
    dict | None}``. ``verify_s`` is 0.0 and the others None where a round was not timed (vLLM's own sampler; the
    exact rule with ``p_drop > 0`` has no plain moment); no rounds: 0.0 and None."""
    rounds = list(rounds)
    out: dict[str, Any] = {"verify_s": 0.0, "plain_s": None, "rule_s": None, "escape": None}
    if not rounds:
        return out
    if all(getattr(r, "verify_s", None) is not None for r in rounds):
        out["verify_s"] = float(sum(r.verify_s for r in rounds))
    for part in ("plain_s", "rule_s"):
        if all(getattr(r, part, None) is not None for r in rounds):
            out[part] = float(sum(getattr(r, part) for r in rounds))
    reached: dict[str, int] = {}
    for r in rounds:
        for rung, n in (getattr(r, "escape", None) or {}).items():
            reached[rung] = reached.get(rung, 0) + int(n)
    out["escape"] = reached or None
    return out


def output_counters(
    drafted: list[int],
    accepted: list[int],
    emitted: int,
    L: int,
    mismatched: list[list[int]] | None = None,
) -> tuple[SpecDecodeCounters, list[int]]:
    """One request's counters over the tokens that are in its output (the HF backend's definition).

    Args:
        drafted / accepted: the request's rounds, uncut (:func:`logged_rounds`).
        emitted: ``runners.backends.output.Output.emitted`` of the finalized output (``len(ids) - 1 + eos_removed``).
        L: draft length (0: no rounds).
        mismatched: the rounds' mismatch flags (:func:`logged_mismatches`); None: not counted.

    Returns:
        ``(counters, accepted per round)`` with ``num_drafts + num_accepted_tokens == emitted``; at ``L = 0`` no
        drafts are counted and each emitted token is one step with 0 accepted (``[0] * emitted``, as the HF loop).

    Raises:
        RuntimeError: the rounds committed fewer tokens than the output holds (vLLM decoded steps without drafts,
            which happens only near ``backend.max_model_len``; the backend refuses prompts that could get there).
    """
    if (
        L == 0
    ):  # one decode step per emitted token, none of them drafted (as the HF loop records an AR run)
        return SpecDecodeCounters(num_speculative_tokens=0, num_accepted_mismatched=0), [
            0
        ] * emitted
    try:
        kept = cut_rounds(accepted, emitted)
    except ValueError as e:
        raise RuntimeError(
            f"{e}: vLLM decoded tokens without drafts (near backend.max_model_len?)"
        ) from e
    off = count_mismatched(mismatched, kept) if mismatched is not None else None
    return round_counters(kept, L, drafted[: len(kept)], mismatched=off), kept


def request_times(output: Any) -> tuple[float, float]:
    """``(wall_s, prefill_s)`` of one ``vllm.RequestOutput``, seconds.

    ``wall_s``: the generation after the prefill, vLLM's ``decode_time`` = ``last_token_ts - first_token_ts``
    (engine-core timestamps of the first and the last token's outputs), as the HF backend's ``wall_s``.
    ``prefill_s``: vLLM's ``prefill_time`` = ``first_token_ts - scheduled_ts`` (prompt prefill of both models and
    the first token; the wait in vLLM's queue is excluded).

    Raises:
        RuntimeError: the output has no request metrics (an engine built with ``disable_log_stats=True``).
    """
    m = getattr(output, "metrics", None)
    if m is None or not getattr(m, "first_token_ts", 0.0):
        raise RuntimeError(
            "vLLM returned no request timestamps; build the engine with disable_log_stats=False"
        )
    return float(m.last_token_ts - m.first_token_ts), float(m.first_token_ts - m.scheduled_ts)
