"""Value checks of run records: what the schema reader's type checks let through, but no run can produce.

:func:`runners.records.schema.read_samples` checks each line's types; a well-formed line can still hold
impossible values (more tokens accepted than drafted, a ``correct`` of 7), which would be tabulated as a
τ above L + 1 or fail deep inside a statistic. The analysis reads decode lines through
:func:`checked_samples` and summaries through :func:`check_summary`, which raise
:class:`~runners.records.schema.RecordError` naming the file, the sample, the field and the allowed range.

Ranges (L = ``num_speculative_tokens``; ``c`` = a line's ``spec`` or a summary's ``spec/counters``):
``0 ≤ num_draft_tokens ≤ num_drafts × L``; ``0 ≤ num_accepted_tokens ≤ num_draft_tokens``; ``L`` per-position
counts, each ``≤ num_drafts`` and none above the one before (prefix counts);
``0 ≤ num_accepted_mismatched ≤ num_accepted_tokens``; each ``accepted_per_round`` entry in ``[0, L]``;
``quality.correct`` 0 or 1 (true/false; null or NaN: not scored); a summary's τ in ``[1, L + 1]``, its
acceptance rate, per-position rates and accuracy in ``[0, 1]``.

The counter identity (:func:`identity_faults`, :func:`counter_faults`): the counters count only tokens the
output kept. Speculative runs (L > 0): ``num_drafts + num_accepted_tokens == len(output_token_ids) - 1 +
eos_removed`` (rounds emit every output token but the first, which comes from prefill; an EOS the output
dropped was still emitted); ``accepted_per_round`` has one entry per round summing to the accepted count; the
per-position counts sum to it. Autoregressive runs (L = 0) count no drafts (vLLM's convention) and one
zero-accepted step per emitted token. A line without ``output_token_ids`` (a record from before the field)
cannot be checked against it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from runners.records.schema import RecordError, read_samples


class Fault(NamedTuple):
    """One impossible value: ``field`` (dotted path, e.g. ``spec.num_accepted_tokens``), ``problem`` (the
    value and what it breaks) and ``allowed`` (the range or rule it must satisfy)."""

    field: str
    problem: str
    allowed: str


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def counter_range_faults(c: Mapping[str, Any], L: int, prefix: str = "spec.") -> list[Fault]:
    """Counters of one sample or one run outside their ranges (module docstring).

    Args:
        c: counters as :class:`runners.records.counters.SpecDecodeCounters` stores them (counts).
        L: the draft length (tokens per round).
        prefix: how the fields are named in the message (``spec.`` in a line).

    Returns:
        the faults, empty when every counter is in range; the first broken rule of a counter only.
    """
    names = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    for k in names:
        if not (_is_int(c.get(k)) and c[k] >= 0):
            return [Fault(prefix + k, f"{c.get(k)!r} is not a count", "an integer ≥ 0")]
    rounds, drafted, acc = (int(c[k]) for k in names)
    out = []
    if drafted > rounds * L:
        out.append(
            Fault(
                prefix + "num_draft_tokens",
                f"{drafted} > num_drafts × L = {rounds} × {L}",
                "0 ≤ num_draft_tokens ≤ num_drafts × L",
            )
        )
    if acc > drafted:
        out.append(
            Fault(
                prefix + "num_accepted_tokens",
                f"{acc} > num_draft_tokens {drafted}",
                "0 ≤ num_accepted_tokens ≤ num_draft_tokens",
            )
        )
    out += _per_pos_faults(c.get("num_accepted_tokens_per_pos"), rounds, L, prefix)
    mism = c.get("num_accepted_mismatched")
    if mism is not None and not (_is_int(mism) and 0 <= mism <= acc):
        out.append(
            Fault(
                prefix + "num_accepted_mismatched",
                f"{mism!r} with {acc} accepted",
                "0 ≤ num_accepted_mismatched ≤ num_accepted_tokens",
            )
        )
    return out


def _per_pos_faults(per_pos: Any, rounds: int, L: int, prefix: str) -> list[Fault]:
    """The per-position prefix counts: L integers, each in ``[0, rounds]``, none above the one before."""
    name = "num_accepted_tokens_per_pos"
    if not isinstance(per_pos, list) or len(per_pos) != L:
        n = len(per_pos) if isinstance(per_pos, list) else per_pos
        return [Fault(prefix + name, f"has {n!r} entries", f"a list of L = {L} counts")]
    cap = rounds
    for i, n in enumerate(per_pos):
        if not (_is_int(n) and 0 <= n <= cap):
            bound = "num_drafts" if i == 0 else f"{name}[{i - 1}]"
            return [
                Fault(
                    f"{prefix}{name}[{i}]",
                    f"{n!r} with {rounds} rounds",
                    f"0 ≤ {name}[{i}] ≤ {bound} = {cap}" + (" (prefix counts)" if i else ""),
                )
            ]
        cap = n
    return []


def _score_fault(field: str, v: Any, binary: bool) -> Fault | None:
    """A per-sample score outside 0/1 (``binary``) or ``[0, 1]``; None, NaN and true/false are in range."""
    if v is None or isinstance(v, bool) or (isinstance(v, float) and math.isnan(v)):
        return None
    ok = _is_number(v) and (v in (0, 1) if binary else 0 <= v <= 1)
    if ok:
        return None
    allowed = "0 or 1 (true/false; null or NaN: not scored)" if binary else "0 ≤ score ≤ 1"
    return Fault(field, f"{v!r} is out of range", allowed)


def line_faults(line: Mapping[str, Any], scores: Iterable[str] = ()) -> list[Fault]:
    """Impossible values in one decode line (ranges in the module docstring, then the counter identity).

    Args:
        line: a line :func:`runners.records.schema.read_samples` returned (types already checked); a line
            without ``spec.num_drafts`` (a measurement record) has nothing to check.
        scores: more ``quality`` keys that must lie in ``[0, 1]`` (e.g. the comparable metric a table shows).

    Returns:
        the faults, empty when the line is possible.
    """
    spec = line.get("spec")
    if not isinstance(spec, Mapping) or "num_drafts" not in spec:
        return []
    L = int(spec.get("num_speculative_tokens") or 0)
    out = counter_range_faults(spec, L)
    per_round = line.get("accepted_per_round") or []
    wrong = next((i for i, a in enumerate(per_round) if not (_is_int(a) and 0 <= a <= L)), None)
    if wrong is not None:
        out.append(
            Fault(
                f"accepted_per_round[{wrong}]",
                f"{per_round[wrong]} with L = {L}",
                "0 ≤ accepted ≤ L per round",
            )
        )
    q = line.get("quality") or {}
    for key, binary in (("correct", True), *((k, False) for k in scores)):
        f = _score_fault(f"quality.{key}", q.get(key), binary)
        if f is not None:
            out.append(f)
    return out if out else identity_faults(line)


def identity_faults(line: Mapping[str, Any]) -> list[Fault]:
    """The counter identity of one decode line (module docstring); empty when it holds or cannot be checked."""
    spec, ids = line.get("spec") or {}, line.get("output_token_ids")
    if "num_drafts" not in spec or ids is None:
        return []
    rounds, acc = int(spec["num_drafts"]), int(spec["num_accepted_tokens"])
    emitted = max(0, len(ids) - 1 + int(line.get("eos_removed", 0)))
    per_round = line.get("accepted_per_round")
    rule = "num_drafts + num_accepted_tokens = len(output_token_ids) - 1 + eos_removed"
    if not spec.get(
        "num_speculative_tokens"
    ):  # autoregressive (L = 0): no drafts, one step per token
        if (
            rounds
            or acc
            or (per_round is not None and (len(per_round) != emitted or any(per_round)))
        ):
            return [
                Fault(
                    "spec",
                    f"autoregressive run with drafts counted ({rounds} / {acc})",
                    "no drafts at L = 0, one zero-accepted step per emitted token",
                )
            ]
        return []
    out = []
    if rounds + acc != emitted:
        out.append(
            Fault(
                "spec.num_drafts + spec.num_accepted_tokens",
                f"rounds {rounds} + accepted {acc} != emitted {emitted}",
                rule,
            )
        )
    if per_round is not None and (len(per_round) != rounds or sum(per_round) != acc):
        out.append(
            Fault(
                "accepted_per_round",
                f"accepted_per_round has {len(per_round)} rounds summing to {sum(per_round)}; "
                f"counters say {rounds} / {acc}",
                "one entry per round, summing to num_accepted_tokens",
            )
        )
    per_pos = spec.get("num_accepted_tokens_per_pos") or []
    if per_pos and sum(per_pos) != acc:
        out.append(
            Fault(
                "spec.num_accepted_tokens_per_pos",
                f"per-position counts sum to {sum(per_pos)}, accepted {acc}",
                "the per-position counts sum to num_accepted_tokens",
            )
        )
    return out


def counter_faults(run_dir: Path) -> list[str]:
    """Every sample of ``run_dir`` whose counters break the identity, as ``<sample_id>: <problem>`` (empty:
    all hold)."""
    return [
        f"{s['sample_id']}: {f.problem}"
        for s in read_samples(run_dir / "samples.jsonl")
        for f in identity_faults(s)
    ]


def record_error(where: str, fault: Fault) -> RecordError:
    """The error for ``fault`` found at ``where`` (the file, and the sample when there is one)."""
    return RecordError(f"{where}: {fault.field} {fault.problem}; allowed: {fault.allowed}")


def checked_samples(path: Path | str, scores: Iterable[str] = ()) -> list[dict]:
    """:func:`runners.records.schema.read_samples` of ``path``, with every decode line's values checked.

    Args:
        path: a record's ``samples.jsonl``; scores: as :func:`line_faults`.

    Raises:
        RecordError: a damaged line (the reader's message), or the first impossible value:
            ``<file> (sample <id>): <field> <problem>; allowed: <range>``.
    """
    lines = read_samples(path)
    scores = tuple(scores)
    for s in lines:
        faults = line_faults(s, scores)
        if faults:
            raise record_error(f"{path} (sample {s['sample_id']!r})", faults[0])
    return lines


def summary_faults(summary: Mapping[str, Any], L: int) -> list[Fault]:
    """Impossible values in a run's ``summary.json`` (ranges in the module docstring).

    Args:
        summary: the parsed summary; L: the run's draft length (``config.json`` ``L``).
    """
    out = []
    c = summary.get("spec/counters")
    if isinstance(c, Mapping):
        if c.get("num_speculative_tokens", L) != L:
            out.append(
                Fault(
                    "spec/counters.num_speculative_tokens",
                    f"{c.get('num_speculative_tokens')!r}",
                    f"the run's L = {L}",
                )
            )
        out += counter_range_faults(c, L, prefix="spec/counters.")
    tau = summary.get("spec/mean_acceptance_length")
    if _is_number(tau) and not 1 <= tau <= L + 1:
        out.append(
            Fault(
                "spec/mean_acceptance_length",
                f"{tau!r} is out of range",
                f"1 ≤ τ ≤ L + 1 = {L + 1}",
            )
        )
    for key in ("spec/acceptance_rate", "quality/accuracy"):
        f = _score_fault(key, summary.get(key), binary=False)
        if f is not None:
            out.append(f)
    for i, r in enumerate(summary.get("spec/per_position_rate") or []):
        f = _score_fault(f"spec/per_position_rate[{i}]", r, binary=False)
        if f is not None:
            out.append(f)
            break
    return out


def check_summary(summary: Mapping[str, Any], L: int, path: Path) -> None:
    """Raise for the first impossible value of a summary (:func:`summary_faults`).

    Raises:
        RecordError: ``<path>: <field> <problem>; allowed: <range>``.
    """
    faults = summary_faults(summary, L)
    if faults:
        raise record_error(str(path), faults[0])
