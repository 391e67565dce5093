"""Hydra entry point: ``python -m runners.main [overrides]`` (``-m`` for sweeps). No logic here.

Importing this module registers the resolver ``${dm.unique:}`` (:func:`unique_suffix`), which
``conf/run.yaml`` appends to the time stamp of ``hydra.run.dir`` and ``hydra.sweep.dir``: two commands
started in the same second get their own directories (their ``.hydra/`` and job status files would
otherwise overwrite each other). The value is cached in the config (``use_cache``), so every job of one
sweep, and Hydra's copies of the config (``OmegaConf.copy_cache``, also when pickled to a Slurm or
subprocess job, which imports this module to run the task), sees the same directory.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys

# torch and llama.cpp (backend=llamacpp) share one GNU OpenMP runtime in a run's process; with its default
# active waiting, the idle threads of one spin while the other computes (a llama.cpp decode step ran 16x slower
# right after a torch matmul, measured). Passive waiting must be chosen before torch loads the runtime.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import hydra  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from runners.validate import ConfigError  # noqa: E402

logger = logging.getLogger(__name__)


def unique_suffix() -> str:
    """``<pid>-<6 random hex digits>``: unique among commands started at the same instant, also on several
    hosts writing one shared results directory."""
    return f"{os.getpid()}-{secrets.token_hex(3)}"


if not OmegaConf.has_resolver("dm.unique"):
    OmegaConf.register_new_resolver("dm.unique", unique_suffix, use_cache=True)


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


@hydra.main(version_base="1.3", config_path="../conf", config_name="run")
def main(cfg: DictConfig) -> float | None:
    from runners.run import run

    try:
        summary = run(cfg)
    except ConfigError as e:
        logger.error("%s\nconfig error: %s", describe(cfg), e)
        sys.exit(2)
    return summary.get("speed/tok_per_s")


if __name__ == "__main__":
    from runners.extras import MissingExtraError, check_launcher
    from runners.logs import LEVEL_ENV, console, level
    from runners.paths import REPO_ROOT

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
        check_launcher(sys.argv[1:], str(REPO_ROOT / "conf" / "local" / "default.yaml"))
    except (MissingExtraError, ValueError) as e:
        logger.error("config error: %s", e)
        sys.exit(2)
    main()
