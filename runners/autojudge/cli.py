"""The Hydra command line shared by ``python -m runners.autojudge.{mine,train,build}``: the overrides of
``python -m runners.main`` over ``conf/run.yaml``, then one stage for the resolved pair and ``method.judge``.

Exit status 2 (with the reason) when the config has no judge, the pair needs a GPU that is not there, or the
stage cannot run here (invalid field, no model or mining data source).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import hydra
from omegaconf import OmegaConf

from runners.autojudge.mining_config import check_mining
from runners.config.errors import ConfigError
from runners.config.optional_deps import gpu_available
from runners.config.overrides import check_overrides, command_overrides, compose_run
from runners.datasets.sources import DatasetUnavailableError
from runners.models.sources import ModelUnavailableError
from runners.paths import REPO_ROOT, directory_env_errors
from runners.sweep.console import console
from runners.sweep.resolvers import register_resolvers

_logger = logging.getLogger(__name__)

# mine(pair_cfg, judge_cfg, log=None) -> summary, likewise train and build
Stage = Callable[..., Mapping[str, Any]]


def judge_error(c: Mapping[str, Any], name: str) -> str | None:
    """Why stage ``name`` cannot run for the resolved config ``c`` (no judge; a GPU-only pair without a GPU), or
    None."""
    if not isinstance((c.get("method") or {}).get("judge"), Mapping):
        return (
            f"config error: method={c['method']['name']} has no judge; allowed: method=autojudge or "
            f"method=autojudge_dropmatch (their method.judge: conf/autojudge/*.yaml)"
        )
    try:
        check_mining(c["method"]["judge"])
    except ConfigError as e:
        return f"config error: {e}"
    if (c.get("pair") or {}).get("requires_gpu") and not gpu_available():
        return (
            f"[autojudge {name}] cannot build the judge here: pair={c['pair']['name']} needs a CUDA GPU and "
            f"none is visible; allowed here: pair=qwen25coder_0.5b_1.5b (the embedded CPU pair)"
        )
    return None


def composed(argv: list[str]) -> dict | None:
    """The resolved run config of a command line, composed with Hydra's compose API (no output directory, no
    job); None when it cannot be composed here (Hydra's own run then reports why)."""
    split = command_overrides(argv)
    if split is None:
        return None
    try:
        return OmegaConf.to_container(compose_run(split[0]), resolve=True)
    except Exception:  # noqa: BLE001  (left to Hydra's run, which reports it in full)
        return None


def refusal(name: str, argv: list[str]) -> str | None:
    """Why the command line ``argv`` of stage ``name`` is refused before Hydra creates its run directory: a
    results or cache variable naming a file, an unknown key or group option
    (:func:`runners.config.overrides.check_overrides`), no judge or no GPU for the pair (:func:`judge_error`)."""
    bad_dirs = directory_env_errors()
    if bad_dirs:
        return f"config error: {bad_dirs[0]}"
    try:
        check_overrides(argv)
    except ConfigError as e:
        return f"config error: {e}"
    c = composed(argv)
    return None if c is None else judge_error(c, name)


def hydra_entry(name: str, stage: Stage) -> None:
    """Compose ``conf/run.yaml`` with the command line's overrides and run ``stage`` on its pair and judge.

    A command line refused by :func:`refusal` exits 2 with the reason before Hydra writes anything.
    """
    register_resolvers()  # conf/run.yaml's run directory names ${dm.unique:}

    # absolute: a relative config_path resolves against the calling module, which breaks `-m runners.autojudge.train`
    @hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="run")
    def _main(cfg: Any) -> None:
        c = OmegaConf.to_container(cfg, resolve=True)
        error = judge_error(c, name)
        if error:
            _logger.error(error)
            sys.exit(2)
        judge = c["method"]["judge"]
        judge.pop("key", None)
        try:
            stage(c["pair"], judge)
        except (ConfigError, DatasetUnavailableError, ModelUnavailableError) as e:
            _logger.error(f"[autojudge {name}] cannot build the judge here: {e}")
            sys.exit(2)

    error = refusal(name, sys.argv[1:])
    if error:
        console()
        _logger.error(error)
        sys.exit(2)
    # the run callbacks refuse a config whose judge is missing: the judge is what this entry builds
    sys.argv.append("~hydra.callbacks.sweep_summary")
    _main()
