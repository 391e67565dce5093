"""Hydra callbacks (``conf/run.yaml`` ``hydra.callbacks``): sweep validation, job status and the sweep's lines.

:class:`SweepSummary` reports a multirun at the sweep level, whichever launcher runs the jobs:

- each job writes ``<job output dir>/.dropmatch_status.json`` when it starts (``started``, with its run's
  record dir) and again when it ends, in its own process: ``done`` (ran, the record is complete), ``skipped``
  (finished earlier; nothing loaded; ``"stale": true`` when that record was made by other decision code and
  reused under ``reuse=warn``), ``concurrent``
  (another live process holds the record, e.g. the AR point at L=5 and at L=10 of one parallel sweep,
  which are one run; that process completes it) or ``failed`` (the run raised); a job that refuses its config
  only once it runs (e.g. a batch above the prompts a dataset offset leaves) writes ``refused``
  (:func:`runners.sweep.job_status.write_refused`), which a rerun of the same command would refuse again;
- in-process launchers also log (:func:`sweep_logger`), after each job,
  ``[sweep] 3/12 runs ended (2 done, 1 skipped, 0 concurrent, 0 failed), elapsed 0:02:05, ETA 0:04:10``;
- a single run (no ``-m``) is validated before Hydra creates its output directory (:func:`refuse_invalid_run`):
  a bad value exits 2 and writes nothing;
- before launching, every sweep point is composed and validated (:func:`invalid_sweep_points`); any invalid
  point refuses the whole sweep (exit 2, each distinct error printed once with the points it refuses, then
  ``refused before launching: 8 of 12 sweep points invalid``), so nothing runs; with ``DROPMATCH_CHECK_ONLY=1``
  a valid sweep stops there too (exit 0, ``[sweep] checked: 12 points valid``): ``reproduce.sh`` checks every
  sweep of an artefact this way before it installs anything or runs the first one;
- the launching process prints one line when the sweep ends (also when it stops on a failure or
  Ctrl-C, from an ``atexit`` hook), read back from those status files, e.g.
  ``[sweep] ended after 0:10:02: 12 runs: 9 done, 3 skipped, 0 concurrent, 0 failed, 0 unreported (...)``.
  A job still ``started`` (Ctrl-C or a kill ended it before Hydra's ``on_job_end``) counts as ``done`` when its
  run's record is complete (the run finished first), else as ``unreported`` (killed, e.g. ``scancel``, or
  interrupted mid-run); rerun the sweep to resume them.

Hydra imports this module (to build the callbacks) before it builds the launcher, and jobs unpickle it before
they run, so it registers the ``dm.*`` resolvers (:mod:`runners.sweep.resolvers`) the launcher configs use.
"""

from __future__ import annotations

import atexit
import copy
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from hydra import compose
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.errors import MissingConfigException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from runners.config.check_only import check_only
from runners.config.decode_spec import needs_draft
from runners.config.errors import ConfigError
from runners.loggers import hint_wandb
from runners.main import describe, job_of
from runners.models.identity import check_sources
from runners.models.sources import ModelUnavailableError
from runners.paths import results_dir
from runners.records.record import RunRecord
from runners.records.reuse import stale_codes, will_reuse
from runners.sweep.artefact_points import check_shown
from runners.sweep.console import terminal
from runners.sweep.job_status import STARTED, STATUS_FILE, save_status
from runners.sweep.progress import hms
from runners.sweep.resolvers import register_resolvers

register_resolvers()  # the launcher configs resolve ${dm.gpus:...} in this process and in the jobs


def sweep_logger(stream: str = "stderr") -> logging.Logger:
    """``runners.sweep.callbacks.<stream>``: the sweep-level lines, on the terminal only (:func:`runners.sweep.console.terminal`):
    they describe the whole sweep, not one run, so they stay out of the jobs' log files."""
    return terminal(f"{__name__}.{stream}", stream)


def count_jobs(config: DictConfig) -> int | None:
    """Number of jobs the basic sweeper makes of this multirun (None if it cannot tell)."""
    jobs = sweep_job_overrides(config)
    return None if jobs is None else len(jobs)


def sweep_job_overrides(config: DictConfig) -> list[list[str]] | None:
    """The override list of every job the basic sweeper makes of this multirun (None if it cannot tell)."""
    try:
        params = [
            f"{k}={v}" for k, v in (OmegaConf.select(config, "hydra.sweeper.params") or {}).items()
        ]
        params += list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
        overrides = OverridesParser.create().parse_overrides(params)
        return [
            list(job) for batch in BasicSweeper.split_arguments(overrides, None) for job in batch
        ]
    except Exception:  # glob(), custom sweepers ...
        return None


def invalid_sweep_points(
    config: DictConfig, reused: list[bool] | None = None
) -> tuple[list[tuple[str, str]], int | None]:
    """``([(overrides, error), ...], number of points)``: every sweep point whose config is refused
    (:func:`check_point`), and how many points the sweep has (None if the sweeper cannot tell).

    Composes each point as the launcher will (``hydra.compose`` inside the running app) and validates it
    before any job starts, so a bad value late in a sweep does not stop it after hours of earlier runs.
    Points that cannot be composed here (e.g. interpolations of Hydra's runtime config) are left to the job.
    ``reused``: a list to which each valid point's :func:`_reuse_of` verdict is appended (a point that cannot be
    resolved here counts as not reused), so ``reproduce.sh`` can tell a sweep that decodes nothing.
    """
    jobs = sweep_job_overrides(config)
    if not jobs:
        return [], None
    bad = []
    for job in jobs:
        try:
            point = compose(config_name=str(config.hydra.job.config_name), overrides=job)
            check_point(point)
        except (ConfigError, ModelUnavailableError) as e:
            bad.append((" ".join(job), str(e)))
            continue
        except (
            MissingConfigException
        ) as e:  # a group option that does not exist (method=dropmach): never runs
            bad.append((" ".join(job), " ".join(str(e).split("Config search path")[0].split())))
            continue
        except Exception:  # noqa: BLE001  (left to the job, which reports it in full)
            continue
        if reused is not None:
            try:
                reused.append(_reuse_of(point)[1])
            except Exception:  # noqa: BLE001  (unknown: decoded, or refused, by the job itself)
                reused.append(False)
    return bad, len(jobs)


def _reuse_of(task: DictConfig) -> tuple[Any, bool]:
    """``(RunRecord, finished)`` of a run's task config: its record, and whether a run would only reuse it
    (:func:`runners.records.reuse.will_reuse`). Raises what resolving the config raises."""
    c = job_of(task).resolve(task)
    record = RunRecord(results_dir() / "runs", c)
    return record, will_reuse(record, str(c.get("reuse") or "warn"))


def check_point(task: DictConfig) -> None:
    """Validate one run's config and check its models have a source, without loading or writing anything; a
    point of an artefact's sweep must also be one its table shows (:func:`runners.sweep.artefact_points.check_shown`).

    Raises:
        ConfigError: an invalid field, or a point the artefact would decode and never show; ModelUnavailableError:
            a model without a source (a missing local_path).
    """
    c = job_of(task).resolve(task, identify_models=False)
    check_sources(c["pair"], ["target", "draft"] if needs_draft(c) else ["target"])
    check_shown(c)


def refusal_lines(bad: list[tuple[str, str]], total: int | None) -> list[str]:
    """The lines a refused sweep prints: each distinct error once, with how many points (and which) it refuses,
    then the count of invalid points out of all."""
    by_error: dict[str, list[str]] = {}
    for overrides, error in bad:
        by_error.setdefault(error, []).append(overrides)
    lines = []
    for error, points in by_error.items():
        which = points[0] if len(points) == 1 else f"{len(points)} points, e.g. {points[0]}"
        lines.append(f"[sweep] config error ({which}): {error}")
    of = f" of {total}" if total is not None else ""
    lines.append(
        f"[sweep] refused before launching: {len(bad)}{of} sweep points invalid; nothing ran"
    )
    return lines


def read_statuses(sweep_dir: Path) -> dict[str, int]:
    """Counts of ``done`` / ``skipped`` / ``concurrent`` / ``failed`` / ``unreported`` / ``refused`` jobs of a sweep.

    A job that started but never ended (``started``: Ctrl-C exits the job with SystemExit, past Hydra's
    ``on_job_end``; a kill) counts by its run's record as it is now: ``done`` when the record is complete (the
    run finished before the interrupt, e.g. while its exports were written), ``skipped`` when it was complete
    before the job started, else ``unreported`` (rerun the sweep to resume it)."""
    counts = {"done": 0, "skipped": 0, "concurrent": 0, "failed": 0, "unreported": 0, "refused": 0}
    if not sweep_dir.is_dir():
        return counts
    for job_dir in sorted(
        p for p in sweep_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
    ):
        if not (job_dir / ".hydra").exists() and not (job_dir / STATUS_FILE).exists():
            continue  # not a job directory
        try:
            entry = json.loads((job_dir / STATUS_FILE).read_text())
            status = entry["status"]
        except (OSError, ValueError, KeyError, TypeError):
            entry, status = {}, "unreported"
        if status == STARTED:
            status = started_status(entry)
        counts[status if status in counts else "failed"] += 1
    return counts


def started_status(entry: dict) -> str:
    """The count a job that started and never reported its end goes under (:func:`read_statuses`)."""
    record_dir = entry.get("record_dir")
    complete = False
    if record_dir:
        try:
            complete = bool(
                json.loads((Path(record_dir) / "summary.json").read_text()).get("complete")
            )
        except (OSError, ValueError, AttributeError):
            complete = False
    if not complete:
        return "unreported"
    return "skipped" if entry.get("finished_before") else "done"


def count_stale(sweep_dir: Path) -> int:
    """Runs a sweep reused although other decision code made them (``"stale": true`` in their jobs' status), each
    counted once: jobs that differ only in settings a rule ignores (SD beside a p_drop sweep) share one run."""
    runs = set()
    for f in sweep_dir.glob(f"*/{STATUS_FILE}") if sweep_dir.is_dir() else []:
        try:
            status = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if status.get("stale"):
            runs.add(status.get("run_id") or f.parent.name)
    return len(runs)


def _finished_run(config: DictConfig) -> tuple[Any, bool]:
    """``(RunRecord, finished)`` of the run a job config describes, without loading anything heavy."""
    try:
        task = copy.deepcopy(
            config
        )  # what the task function gets (as hydra.core.utils.run_job makes it)
        with read_write(task), open_dict(task):
            del task["hydra"]
        return _reuse_of(task)
    except Exception:  # an invalid config fails in the job itself, with its message
        return None, False


def refuse_invalid_run(config: DictConfig) -> None:
    """Exit 2 with the config error if a single run's config is invalid (before Hydra creates its output dir).

    Prints what ``runners.main`` prints for a :class:`~runners.config.validate.ConfigError` (what the run would do,
    then ``config error: <field>=<value> is invalid; allowed: ...``). Other errors are left to the run.
    """
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]
    try:
        check_point(task)
    except (ConfigError, ModelUnavailableError) as e:
        try:
            sweep_logger().error(describe(task))
        except Exception:  # noqa: BLE001  (a config too broken to describe still gets its error line)
            pass
        sweep_logger().error(f"config error: {e}")
        sys.exit(2)
    except Exception:  # noqa: BLE001  (left to the run, which reports it in full)
        return


def _multirun(config: DictConfig) -> bool:
    return str(OmegaConf.select(config, "hydra.mode")).endswith("MULTIRUN")


class SweepSummary(Callback):
    """Counts the runs of a multirun as done / skipped / failed and prints progress and a final line.

    Args:
        stream: ``stderr`` (default) or ``stdout``.
    """

    def __init__(self, stream: str = "stderr") -> None:
        self.stream = stream
        self.sweep_dir: str | None = None
        self.total: int | None = None
        self.t0 = 0.0
        self.ended = 0
        self.counts = {"done": 0, "skipped": 0, "concurrent": 0, "failed": 0}
        self._pending: tuple[Any, bool] = (None, False)
        self._reported = False
        self._pid = os.getpid()

    def _print(self, msg: str) -> None:
        sweep_logger(self.stream).info(msg)

    # -- launching process --------------------------------------------------------------------
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A single run: an invalid config exits 2 before Hydra writes anything (:func:`refuse_invalid_run`)."""
        refuse_invalid_run(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        reused: list[bool] | None = [] if check_only() else None
        bad, total = invalid_sweep_points(config, reused)
        if bad:
            for line in refusal_lines(bad, total):
                self._print(line)
            sys.exit(2)
        if reused is not None:
            self._print(
                f"[sweep] checked: {total if total is not None else '?'} points valid"
                + (f", {sum(reused)} of them finished on record" if total is not None else "")
                + "; nothing ran"
            )
            sys.exit(0)
        self.sweep_dir = str(config.hydra.sweep.dir)
        self.total = count_jobs(config)
        self.t0 = time.time()
        self._pid = os.getpid()
        launcher = str(OmegaConf.select(config, "hydra.launcher._target_") or "")
        self._print(
            f"[sweep] {self.total if self.total is not None else '?'} runs, launcher "
            f"{launcher.rsplit('.', 1)[-1] or '?'}, sweep dir {self.sweep_dir}"
        )
        if str(OmegaConf.select(config, "logger.name") or "none") == "none":
            hint_wandb()
        atexit.register(self._report_at_exit)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self._report("ended")

    def _report_at_exit(self) -> None:
        if os.getpid() == self._pid:  # not in forked children
            self._report("stopped")

    def _report(self, how: str) -> None:
        if self._reported or self.sweep_dir is None:
            return
        self._reported = True
        c = read_statuses(Path(self.sweep_dir))
        n = sum(c.values())
        total = f" of {self.total}" if self.total is not None and self.total != n else ""
        self._print(
            f"[sweep] {how} after {hms(time.time() - self.t0)}: {n}{total} runs: {c['done']} done, "
            f"{c['skipped']} skipped, {c['concurrent']} concurrent, {c['failed']} failed, "
            f"{c['unreported']} unreported"
            + (f", {c['refused']} refused" if c["refused"] else "")
            + f" ({self.sweep_dir})"
        )
        if c["refused"]:
            self._print(
                f"[sweep] {c['refused']} run(s) refused their config (the error above); fix the overrides: the "
                "same command would refuse them again"
            )
        stale = count_stale(Path(self.sweep_dir))
        if stale:
            self._print(
                f"[sweep] WARNING: {stale} of the skipped runs were made by other decision code and reused "
                f"(reuse=warn); rerun with reuse=strict to recompute them"
            )
        # a sweep stopped by a refused config resumes into the same refusal: the refusal's line says what to do
        if (how == "stopped" and not c["refused"]) or c["failed"] or c["unreported"]:
            self._print(
                "[sweep] rerun the same command to resume: finished runs are skipped, unfinished ones "
                "continue at the first sample without a record"
            )

    # -- job process (the same one for in-process launchers) ----------------------------------
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Writes ``started`` (with the run's record dir): a job that never reaches ``on_job_end`` (Ctrl-C, a
        kill) is then counted by its record (:func:`started_status`), not as a job that never ran."""
        if _multirun(config):
            self._pending = _finished_run(config)
            record, finished_before = self._pending
            self._write_status(
                config,
                STARTED,
                record,
                finished_before=finished_before,
                record_dir=str(record.dir) if record is not None else None,
            )

    def _write_status(self, config: DictConfig, status: str, record: Any, **extra: Any) -> None:
        out_dir = Path(str(config.hydra.runtime.output_dir))
        try:
            save_status(
                out_dir,
                {
                    "status": status,
                    "run_id": record.run_id if record is not None else None,
                    "job_num": OmegaConf.select(config, "hydra.job.num"),
                    "overrides": list(config.hydra.overrides.task),
                    **extra,
                },
            )
        except OSError as e:
            self._print(f"[sweep] could not write job status to {out_dir}: {e}")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if not _multirun(config):
            return
        record, finished_before = self._pending
        if job_return.status == JobStatus.COMPLETED:
            stale = False
            if finished_before:
                status, stale = "skipped", bool(stale_codes(record))
            elif record is not None and record.existing_summary() is None:
                status = "concurrent"  # run() left it to the process holding its lock
            else:
                status = "done"
            error = None
        else:
            status, error, stale = "failed", repr(job_return._return_value)[:2000], False
        self._write_status(config, status, record, error=error, stale=stale)
        if self.sweep_dir is None or os.getpid() != self._pid:
            return  # a job in another process (its own log gets nothing extra)
        self.ended += 1
        self.counts[status] += 1
        elapsed = time.time() - self.t0
        eta = ""
        if self.total:
            eta = f", ETA {hms(elapsed / self.ended * (self.total - self.ended))}"
        self._print(
            f"[sweep] {self.ended}/{self.total or '?'} runs ended ({self.counts['done']} done, "
            f"{self.counts['skipped']} skipped, {self.counts['concurrent']} concurrent, "
            f"{self.counts['failed']} failed), elapsed {hms(elapsed)}{eta}"
        )
