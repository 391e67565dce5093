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

from runners.config.errors import ConfigError
from runners.config.optional_deps import gpu_available
from runners.datasets.sources import DatasetUnavailableError
from runners.models.sources import ModelUnavailableError
from runners.paths import REPO_ROOT, directory_env_errors
from runners.sweep.console import console
from runners.sweep.resolvers import register_resolvers

_logger = logging.getLogger(__name__)

# mine(pair_cfg, judge_cfg, log=None) -> summary, likewise train and build
Stage = Callable[..., Mapping[str, Any]]


def hydra_entry(name: str, stage: Stage) -> None:
    """Compose ``conf/run.yaml`` with the command line's overrides and run ``stage`` on its pair and judge."""
    register_resolvers()  # conf/run.yaml's run directory names ${dm.unique:}

    # absolute: a relative config_path resolves against the calling module, which breaks `-m runners.autojudge.train`
    @hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="run")
    def _main(cfg: Any) -> None:
        c = OmegaConf.to_container(cfg, resolve=True)
        judge = (c.get("method") or {}).get("judge")
        if not isinstance(judge, dict):
            _logger.error(
                f"config error: method={c['method']['name']} has no judge; allowed: method=autojudge or "
                f"method=autojudge_dropmatch (their method.judge: conf/autojudge/*.yaml)"
            )
            sys.exit(2)
        judge.pop("key", None)
        if (c.get("pair") or {}).get("requires_gpu") and not gpu_available():
            _logger.error(
                f"[autojudge {name}] cannot build the judge here: pair={c['pair']['name']} needs a CUDA GPU and "
                f"none is visible; allowed here: pair=qwen25coder_0.5b_1.5b (the embedded CPU pair)"
            )
            sys.exit(2)
        try:
            stage(c["pair"], judge)
        except (ConfigError, DatasetUnavailableError, ModelUnavailableError) as e:
            _logger.error(f"[autojudge {name}] cannot build the judge here: {e}")
            sys.exit(2)

    bad_dirs = directory_env_errors()  # before Hydra makes its output directory there
    if bad_dirs:
        console()
        _logger.error("config error: %s", bad_dirs[0])
        sys.exit(2)
    # the run callbacks refuse a config whose judge is missing: the judge is what this entry builds
    sys.argv.append("~hydra.callbacks.sweep_summary")
    _main()
