"""Hydra entry point: ``python -m runners.main [overrides]`` (``-m`` for sweeps). No logic here: a config is a
decode run (:func:`runners.run.run`) or a measurement (:func:`runners.measure.run_measurement`), see :func:`job_of`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

# torch and llama.cpp (backend=llamacpp) share one GNU OpenMP runtime in a run's process; with its default
# active waiting, the idle threads of one spin while the other computes (slowing the llama.cpp decode steps that
# follow a torch matmul). Passive waiting must be chosen before torch loads the runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from runners.config.errors import ConfigError  # noqa: E402
from runners.config.resolve import resolve_run_config  # noqa: E402
from runners.measure import resolve_measurement, run_measurement  # noqa: E402
from runners.models.sources import ModelUnavailableError  # noqa: E402
from runners.records.io import get_number  # noqa: E402
from runners.records.schema import RecordError  # noqa: E402
from runners.run import run  # noqa: E402
from runners.sweep.job_status import write_refused  # noqa: E402
from runners.sweep.resolvers import register_resolvers  # noqa: E402

logger = logging.getLogger(__name__)


register_resolvers()  # conf/run.yaml names ${dm.unique:} (run dirs) and the launchers ${dm.gpus:...}


def describe(cfg: DictConfig) -> str:
    """A few lines saying what this run would do (shown when it is refused)."""
    pair = cfg.pair
    return (
        f"run: method={cfg.method.name} L={0 if cfg.method.get('autoregressive') else cfg.L} "
        f"dataset={cfg.dataset.name} backend={cfg.backend.name} "
        f"profile={cfg.profile.name}\n"
        f"pair={pair.name}: target={pair.target.name} draft={pair.draft.name} dtype={pair.dtype} "
        f"tensor_parallel_size={pair.get('tensor_parallel_size', 1)} requires_gpu={pair.get('requires_gpu', False)}\n"
        f"dropmatch: p_drop={cfg.dropmatch.p_drop} K={cfg.dropmatch.K}; decoding: {dict(cfg.decoding)}"
    )


class Job(NamedTuple):
    """What a config runs: ``resolve(cfg, identify_models=True) -> dict`` (validated, before anything loads) and
    ``run(cfg, log=...) -> summary``."""

    resolve: Callable[..., dict]
    run: Callable[..., dict]


DECODE = Job(resolve_run_config, run)
MEASURE = Job(resolve_measurement, run_measurement)


def job_of(cfg: Any) -> Job:
    """:data:`MEASURE` when ``method.measure`` names a measurement (a key of ``runners.measure.MEASUREMENTS``:
    Table 4's timings, Fig. 3's similarity, the benchmark; their records hold measurements), else :data:`DECODE`."""
    return MEASURE if (cfg.get("method") or {}).get("measure") else DECODE


# Samples are appended to the run record as each finishes and a finished run is never decoded again
# (runners.records.record.RunRecord.open_or_skip), so a rerun resumes where the interrupted one stopped.
INTERRUPTED = (
    "interrupted; finished runs and the samples already recorded are kept, "
    "rerun the same command to resume"
)


def interrupted() -> None:
    """Ctrl-C: one line on stderr instead of a traceback, exit status 130 (128 + SIGINT, as a shell reports)."""
    print(INTERRUPTED, file=sys.stderr, flush=True)
    sys.exit(130)


@hydra.main(version_base="1.3", config_path="../conf", config_name="run")
def main(cfg: DictConfig) -> float | None:
    try:
        summary = job_of(cfg).run(cfg)
    except KeyboardInterrupt:
        interrupted()
    except (ConfigError, ModelUnavailableError) as e:
        logger.error("%s\nconfig error: %s", describe(cfg), e)
        if isinstance(e, ConfigError):
            write_refused(str(e))
        sys.exit(2)
    except RecordError as e:  # a damaged record: where, before anything was decoded
        logger.error("record error: %s", e)
        sys.exit(2)
    return get_number(summary, "speed/tok_per_s")  # (a stored summary writes a NaN rate as null)


if __name__ == "__main__":
    from runners.config.optional_deps import MissingExtraError, check_launcher
    from runners.config.overrides import align_with_sweep, check_overrides
    from runners.paths import REPO_ROOT, directory_env_errors
    from runners.sweep.console import LEVEL_ENV, console, level

    try:
        os.environ[LEVEL_ENV] = level()  # normalised for the job logging config, which reads it
        bad = None
    except ValueError as e:
        bad = e
    console(
        None if bad is None else "INFO"
    )  # until Hydra configures the job's logging (conf/hydra/job_logging/)
    try:
        if bad is not None:
            raise bad
        bad_dirs = directory_env_errors()  # before Hydra makes its output directory there
        if bad_dirs:
            raise ValueError(bad_dirs[0])
        # a key the experiment's sweep force-adds (++key): the user's value replaces the sweep's
        sys.argv[1:] = align_with_sweep(sys.argv[1:])
        check_overrides(sys.argv[1:])  # before Hydra: its own errors exit 1 in its wording
        check_launcher(sys.argv[1:], str(REPO_ROOT / "conf" / "local" / "default.yaml"))
    except (MissingExtraError, ValueError) as e:
        logger.error("config error: %s", e)
        sys.exit(2)
    try:
        main()
    except KeyboardInterrupt:  # while Hydra composes or launches, outside main()'s own handler
        interrupted()
