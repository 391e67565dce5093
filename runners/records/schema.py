"""The schema of a ``samples.jsonl`` line and the one reader every consumer uses (:func:`read_samples`).

A record's lines are checked when read, so a damaged record is reported with its file, line and field before
anything is decoded, scored or tabulated, instead of failing later (a ``TypeError`` in a summary) or being
skipped silently. The rules (:func:`read_samples`):

- every line ending in a newline is one JSON object matching the record's line schema (below); anything else
  (junk, a line cut short in the middle of the file, a wrong type, a missing key) raises :class:`RecordError`;
- the part after the last newline is a line torn by a kill during its write (``RunRecord.append`` writes a line
  and its newline in one ``os.write``): it is dropped, the only damage repaired silently
  (``RunRecord.open`` truncates it before appending);
- the first line of a sample id wins (a record copied together by hand never double-counts);
- ``null`` where the schema expects a number (``float``) reads as NaN: the writers write a non-finite float as
  ``null`` (strict JSON, :mod:`runners.records.io`); older records hold a bare ``NaN`` there, read alike.

Line schemas are ``TypedDict`` classes (required keys; ``NotRequired`` keys are typed when present; keys not
declared are allowed, so older readers accept newer records): :class:`DecodeLine` (a decode run,
:func:`runners.records.sample.sample_record`), :class:`LatencyLine`, :class:`BenchLine`,
:class:`SimilarityLine` (measurement runs, ``method.measure``), :class:`MiningLine` (Auto-Judge mining,
:mod:`runners.autojudge.mine`). A record's ``config.json`` picks its schema (:func:`line_schema`); a file
outside a record (no ``config.json`` beside it) is checked against :class:`UnitLine`, what every line has.
"""

from __future__ import annotations

import functools
import json
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict


class RecordError(ValueError):
    """A ``samples.jsonl`` line breaks its record's schema; the message names the file, the line and the field."""


# -- line schemas ---------------------------------------------------------------------------------------------
class UnitLine(TypedDict):
    """What every line of every record has: the id of its unit (a benchmark item, a timing repeat ...)."""

    sample_id: str


class Prompt(TypedDict):
    """:func:`runners.datasets.base.prompt_record`."""

    text: str
    num_tokens: int
    token_ids_sha256: str


class Counters(TypedDict):
    """:class:`runners.records.counters.SpecDecodeCounters` (counts; ``_per_pos``: one entry per draft position)."""

    num_speculative_tokens: int
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    num_accepted_tokens_per_pos: list[int]
    num_accepted_mismatched: NotRequired[
        int
    ]  # accepted drafts off the target's argmax (lossy rules)


class Speed(TypedDict):
    """Tokens and seconds of one sample (``SampleResult``); the summary reads the two required ones."""

    num_output_tokens: int
    wall_s: float
    prefill_s: NotRequired[float]
    draft_s: NotRequired[float]
    verify_s: NotRequired[float]
    criterion_s: NotRequired[float]
    # the parts of criterion_s to the plain logits and after them (runners/backends/round_meter.py)
    plain_s: NotRequired[float]
    rule_s: NotRequired[float]
    audit_s: NotRequired[float]  # the exactness audit's second decision (criteria/audit.py)
    share_s: NotRequired[float]
    wall_s_repeats: NotRequired[list[float]]


class DecodeLine(TypedDict):
    """One decoded sample (:func:`runners.records.sample.sample_record`).

    Required: what the run's summary, resume and every table read (id, counters, tokens and seconds, the
    scorer's result). The other fields the writer always writes are typed when present (a record from before a
    field existed, e.g. ``stop_reason``, still reads; its tables show n/a there).
    """

    sample_id: str
    spec: Counters
    speed: Speed
    quality: dict[str, Any]
    prompt: NotRequired[Prompt]
    output_text: NotRequired[str]
    output_token_ids: NotRequired[list[int]]
    reference: NotRequired[Any]
    accepted_per_round: NotRequired[list[int]]
    stop_reason: NotRequired[Literal["eos", "stop", "length"]]
    eos_removed: NotRequired[int]
    seed: NotRequired[int]
    trace: NotRequired[list[dict[str, Any]]]
    audit: NotRequired[dict[str, Any]]
    escape: NotRequired[dict[str, int]]


class LatencyLine(TypedDict):
    """One timing repeat of ``method.measure=latency`` (seconds per timed step)."""

    sample_id: str
    seconds: dict[str, float]
    model: NotRequired[dict[str, Any]]
    loadavg_1min: NotRequired[float]


class BenchLine(TypedDict):
    """One unit of ``method.measure=bench``: a prompt x repeat (``kind: prompt``), the first ``batch_size``
    prompts decoded together x repeat (``kind: batch``, ``prompt_ids``) or a verify timing (``kind: latency``)."""

    sample_id: str
    kind: Literal["prompt", "batch", "latency"]
    batch_size: NotRequired[int]
    prompt_ids: NotRequired[list[str]]
    arms: NotRequired[dict[str, dict[str, Any]]]
    order: NotRequired[list[str]]
    prompt_id: NotRequired[str]
    prompt_tokens: NotRequired[int]
    repeat: NotRequired[int]
    seconds: NotRequired[dict[str, float]]
    model: NotRequired[dict[str, Any]]
    loadavg_1min: NotRequired[float]


class SimilarityLine(TypedDict):
    """One prompt of ``method.measure=similarity`` (Fig. 3): ``[n, n]`` matrices over its dropout paths."""

    sample_id: str
    paths: list[int]
    cosine: list[list[float]]
    entail_p: list[list[float]]
    identical: list[list[bool]]
    question: NotRequired[str]
    judge: NotRequired[str]
    num_judge_calls: NotRequired[int]
    sbert: NotRequired[str]


class MiningLine(TypedDict):
    """One mined prompt of Auto-Judge (:func:`runners.autojudge.mine.mined_record`)."""

    sample_id: str
    index: NotRequired[int]  # position in the mining data set (records are written as searches end)
    response_token_ids: list[int]
    correct: int
    mismatches: list[dict[str, Any]]
    features: dict[str, Any]
    outcome: NotRequired[Any]  # the extracted answer (label=answer) or 0/1 (label=correctness)
    truncated: NotRequired[bool]
    skipped: NotRequired[bool]
    wall_s: NotRequired[float]


MEASURE_LINES: dict[str, type] = {
    "latency": LatencyLine,
    "bench": BenchLine,
    "similarity": SimilarityLine,
}


def line_schema(config: Mapping[str, Any] | None) -> type:
    """The line schema of the record whose ``config.json`` is ``config`` (None: :class:`UnitLine`)."""
    if not isinstance(config, Mapping):
        return UnitLine
    if config.get("kind") == "autojudge_mining":
        return MiningLine
    measure = (config.get("method") or {}).get("measure")
    if measure:
        return MEASURE_LINES.get(str(measure), UnitLine)
    return DecodeLine


def record_schema(run_dir: Path) -> type:
    """:func:`line_schema` of the record in ``run_dir`` (its ``config.json``; :class:`UnitLine` without one).

    Raises:
        RecordError: ``config.json`` exists but is not a JSON object.
    """
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return UnitLine
    return line_schema(read_json_object(path))


def read_json_object(path: Path) -> dict:
    """A record's JSON file (``config.json``, ``summary.json``, ``meta.json``) as a dict.

    Raises:
        RecordError: the file is unreadable, not JSON, or not a JSON object (the path and why).
    """
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RecordError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(value, dict):
        raise RecordError(f"{path}: not a JSON object")
    return value


# -- checking -------------------------------------------------------------------------------------------------
_WORDS = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp in _WORDS:
        return _WORDS[tp]
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(json.dumps(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is list:
        return (
            f"a list of {_describe(typing.get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
        )
    if origin is dict or typing.is_typeddict(tp):
        return "an object"
    return getattr(tp, "__name__", str(tp))


def _problem(value: Any, tp: Any, field: str) -> tuple[str, str] | None:
    """``(field, what is wrong)`` for the first part of ``value`` that is not of type ``tp``, else None."""
    if tp is Any:
        return None
    if typing.is_typeddict(tp):
        if not isinstance(value, dict):
            return field, f"{_show(value)} is not an object"
        hints = _hints(tp)
        for key, (_, required) in hints.items():
            if required and key not in value:
                return _join(field, key), "is missing (required)"
        for key, (sub, _) in hints.items():
            if key in value:
                bad = _problem(value[key], sub, _join(field, key))
                if bad is not None:
                    return bad
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if any(_problem(value, a, field) is None for a in typing.get_args(tp)):
            return None
        return field, f"{_show(value)} is not {_describe(tp)}"
    if origin is Literal:
        return (
            None
            if value in typing.get_args(tp)
            else (field, f"{_show(value)} is not {_describe(tp)}")
        )
    if origin is list:
        if not isinstance(value, list):
            return field, f"{_show(value)} is not {_describe(tp)}"
        (item,) = typing.get_args(tp)
        for i, x in enumerate(value):
            bad = _problem(x, item, f"{field}[{i}]")
            if bad is not None:
                return bad
        return None
    if origin is dict:
        if not isinstance(value, dict):
            return field, f"{_show(value)} is not an object"
        _, item = typing.get_args(tp)
        for k, x in value.items():
            bad = _problem(x, item, _join(field, str(k)))
            if bad is not None:
                return bad
        return None
    if tp is type(None):
        ok = value is None
    elif tp is float:  # JSON has one number type: an integral value may be written without a point
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, tp)
    return None if ok else (field, f"{_show(value)} is not {_describe(tp)}")


@functools.cache
def _hints(tp: type) -> dict[str, tuple[Any, bool]]:
    """``{key: (type, required)}`` of a TypedDict. (Read from the hints: with postponed annotations
    ``__required_keys__`` counts every key as required on Python 3.11.)"""
    out = {}
    for key, hint in typing.get_type_hints(tp, include_extras=True).items():
        optional = typing.get_origin(hint) is NotRequired
        out[key] = (typing.get_args(hint)[0] if optional else hint, not optional)
    return out


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if field else key


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


@functools.cache
def _holds_float(tp: Any) -> bool:
    """Whether a value of type ``tp`` (a line schema or part of one) can hold a ``float`` anywhere."""
    if tp is float:
        return True
    if typing.is_typeddict(tp):
        return any(_holds_float(sub) for sub, _ in _hints(tp).values())
    return any(_holds_float(a) for a in typing.get_args(tp) if not isinstance(a, str))


def nan_for_null(value: Any, tp: Any) -> Any:
    """``value`` (a parsed line or part of one) with ``None`` as NaN wherever ``tp`` expects a ``float`` (how the
    writers write a non-finite float, :func:`runners.records.io.strict`); everything else as it is."""
    if tp is float:
        return math.nan if value is None else value
    if not _holds_float(tp):
        return value
    if typing.is_typeddict(tp) and isinstance(value, dict):
        hints = _hints(tp)
        return {k: nan_for_null(v, hints[k][0]) if k in hints else v for k, v in value.items()}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is list and isinstance(value, list):
        return [nan_for_null(x, args[0]) for x in value]
    if origin is dict and isinstance(value, dict):
        return {k: nan_for_null(x, args[1]) for k, x in value.items()}
    return value


def check_line(line: Any, schema: type = DecodeLine) -> tuple[str, str] | None:
    """``(field, problem)`` when ``line`` (a parsed JSON value) breaks ``schema``, else None."""
    return _problem(line, schema, "")


# -- the reader -----------------------------------------------------------------------------------------------
def read_samples(path: Path | str, schema: type | None = None) -> list[dict]:
    """The lines of a ``samples.jsonl``, checked; the first line per sample id; a torn last line dropped.

    Args:
        path: the file (absent: no lines).
        schema: the line schema (default: the one of the record around it, :func:`record_schema`).

    Returns:
        the parsed lines in file order, one per sample id (its first line).

    Raises:
        RecordError: a line that is not a JSON object of the schema: ``<file> line <n> (sample <id>): <field>
            <problem>``, raised before the caller uses any line.
    """
    path = Path(path)
    if not path.exists():
        return []
    schema = record_schema(path.parent) if schema is None else schema
    data = path.read_bytes()
    complete = data[: data.rfind(b"\n") + 1]  # the rest is a line torn by a kill mid-write
    out, seen = [], set()
    for n, raw in enumerate(complete.split(b"\n")[:-1], start=1):
        where = f"{path} line {n}"
        try:
            line = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise RecordError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None
        except json.JSONDecodeError as e:
            raise RecordError(
                f"{where}: not a JSON object ({e.msg} at column {e.colno}: "
                f"{_show(raw.decode('utf-8', 'replace'))}); only the last line of a record may be torn "
                "(a kill during its write): fix or delete this line (a deleted sample is decoded again on "
                "the next run)"
            ) from None
        line = nan_for_null(line, schema)
        bad = check_line(line, schema)
        if bad is not None:
            sid = line.get("sample_id") if isinstance(line, dict) else None
            field, problem = bad
            what = f"{where} (sample {sid!r})" if isinstance(sid, str) else where
            raise RecordError(
                f"{what}: {field + ' ' if field else ''}{problem}"
                f"{'' if field else ' (a line is a JSON object)'}; expected by the "
                f"{schema.__name__} schema (runners/records/schema.py)"
            )
        if line["sample_id"] in seen:
            continue
        seen.add(line["sample_id"])
        out.append(line)
    return out
