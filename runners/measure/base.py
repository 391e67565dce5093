"""The measurement seam: a run whose record holds measurements (timings, judge scores) instead of decodes.

A measurement is selected by ``method.measure`` (``conf/method/<name>.yaml``) and runs through the same
entry point, run id and record as every run (``python -m runners.main method=latency ...``): its
``samples.jsonl`` has one line per *unit* (a timing repeat, a prompt's similarity matrices, a prompt x
repeat of the benchmark), appended as each unit finishes, so an interrupted run resumes at the first unit
without a line; ``summary.json`` aggregates the lines. ``analysis/`` reads only these records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from criteria.registry import Registry, UnknownNameError
from runners.config.errors import ConfigError
from runners.config.resolve import resolve_run_config
from runners.paths import results_dir
from runners.records.fingerprint import rules_decision_code
from runners.records.provenance import provenance
from runners.records.record import RunRecord

logger = logging.getLogger(__name__)

MEASUREMENTS: Registry = Registry("method.measure")


class MissingRecordsError(ConfigError):
    """A measurement's input records (e.g. Fig. 3's single-path decodes) are absent or unfinished."""


def _measurement(c: Mapping[str, Any]) -> Any:
    try:
        return MEASUREMENTS.get(str(c["method"]["measure"]))
    except UnknownNameError as e:
        raise ConfigError(str(e)) from None


def check(c: Mapping[str, Any]) -> None:
    """Validate a measurement config before anything loads (:func:`resolve_measurement` runs it).

    Raises:
        ConfigError: unknown ``method.measure`` or a field the measurement refuses.
    """
    _measurement(c).check(c)


def check_backend(c: Mapping[str, Any]) -> None:
    """The measurement's optional ``check_backend(c)`` (a staticmethod), before the backend's keys are validated
    (:func:`runners.config.resolve.resolve_run_config`'s ``precheck``).

    Raises:
        ConfigError: unknown ``method.measure``, or a backend the measurement does not run on.
    """
    own = getattr(_measurement(c), "check_backend", None)
    if callable(own):
        own(c)


def positive_int(c: Mapping[str, Any], field: str, minimum: int = 1) -> int:
    """``c["method"][field]`` as an int >= ``minimum``, else ConfigError naming ``method.<field>``."""
    v = c["method"].get(field)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ConfigError(f"method.{field}={v!r} is invalid; allowed: an integer >= {minimum}")
    return v


@runtime_checkable
class Measurement(Protocol):
    """One kind of measurement. Constructed from the resolved run config ``c`` (cheap: nothing loads).

    ``check(c)`` (a staticmethod) raises :class:`runners.config.validate.ConfigError` naming the field and its
    allowed values; it runs in :func:`resolve_measurement`, so a sweep with a bad point is refused up front.
    """

    def unit_ids(self) -> list[str]:
        """Every unit id the finished run has, in the order they are measured (may read other records)."""
        ...

    def measure(self, todo: Sequence[str], log: Callable[[str], None]) -> Iterator[dict]:
        """Load what is needed and yield one JSON-serialisable line (with ``sample_id``) per unit of ``todo``."""
        ...

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        """The run's summary from its lines (pure)."""
        ...


def decision_rules(job: Any) -> list[tuple[str, str]]:
    """The ``(criterion, backend)`` pairs whose acceptance decisions a measurement makes (its optional
    ``decision_rules()``; none for measurements that decide nothing, e.g. judging)."""
    rules = getattr(job, "decision_rules", None)
    return list(rules()) if callable(rules) else []


def resolve_measurement(cfg: Any, identify_models: bool = True) -> dict:
    """:func:`runners.config.resolve.resolve_run_config` with the measurement's own checks (:func:`check`), its
    backend checked before the backend's keys (:func:`check_backend`)."""
    return resolve_run_config(cfg, identify_models, check=check, precheck=check_backend)


def run_measurement(cfg: Any, log: Callable[[str], None] = logger.info) -> dict:
    """Execute one measurement run (resumable) and return its summary (the entry ``runners.main`` picks for a
    config whose ``method.measure`` names a measurement).

    Same contract as :func:`runners.run.run`: a finished run returns its stored summary without loading
    anything; a run another live process writes is left to it (``{"complete": False, "running_elsewhere": True}``).

    Raises:
        runners.config.validate.ConfigError: invalid field, or (``MissingRecordsError``) input records absent.
    """
    return run_resolved(resolve_measurement(cfg), log)


def run_resolved(c: Mapping[str, Any], log: Callable[[str], None] = logger.info) -> dict:
    """:func:`run_measurement` of a config that is already resolved and checked: one derived from a stored
    record's ``config.json`` (a judging run of a decode run: :mod:`runners.judging.runs`), which resolving again
    would re-validate against this machine (a vLLM decode judged where vLLM is absent) and re-identify its models.

    Raises:
        MissingRecordsError: the measurement's input records are absent.
    """
    job = MEASUREMENTS.get(c["method"]["measure"])(c)
    record = RunRecord(results_dir() / "runs", c)
    units = job.unit_ids()
    tag = f"{c['method']['name']} pair={c['pair']['name']} dtype={c['pair'].get('dtype')} n={len(units)}"
    with record:
        rules = decision_rules(job)  # the fingerprint is hashed only for a run that is written
        skip = record.open_or_skip(
            lambda: {
                **provenance(),
                "run_id": record.run_id,
                **({"decision_code": rules_decision_code(rules)} if rules else {}),
            },
            num_expected=len(units),
            tag=tag,
            log=log,
        )
        if skip is not None:
            return skip
        done = record.done_ids()
        todo = [u for u in units if u not in done]
        log(f"[run {record.run_id}] {tag}: {len(units) - len(todo)} done, {len(todo)} to go")
        if todo:
            for line in job.measure(todo, log):
                record.append(line)
        wanted = set(units)
        lines = [s for s in record.samples() if s["sample_id"] in wanted]
        summary = job.summarize(lines)
        summary.update(
            {
                "run_id": record.run_id,
                "num_samples": len(lines),
                "num_expected": len(units),
                "complete": len(lines) == len(units),
                **({"decision_code": rules_decision_code(rules)["fingerprint"]} if rules else {}),
                **provenance(),
            }
        )
        record.write_summary(summary)
    log(f"[run {record.run_id}] done: {len(lines)}/{len(units)} units ({record.dir})")
    return summary
