"""Build Auto-Judge's judge for a run config: mine (resumable) and train, each only when missing or stale.

    python -m runners.autojudge.build method=autojudge [pair=...] [profile=...] [method.judge.mining.limit=...]

Takes the same overrides as ``python -m runners.main`` and builds the judge a run with those overrides would
use (``method.judge``: ``conf/autojudge/<name>.yaml``, keyed by pair + mining config, see
:mod:`runners.autojudge.artefact`). ``./reproduce.sh table8|table9|fig1|fig5|fig6`` call it before their sweeps.
Exit status 2 (with the reason) when the config is invalid or the judge cannot be built here (no model or
mining data source).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable

_logger = logging.getLogger(__name__)

STAGES = ("mine", "train", "build")


def build(
    pair_cfg: Any, judge_cfg: Any, stage: str = "build", log: Callable[[str], None] | None = None
) -> dict:
    """Run ``stage`` (``mine``, ``train`` or both) for a resolved pair and judge config."""
    from runners.autojudge.artefact import judge_dir, judge_key
    from runners.autojudge.mine import mine
    from runners.autojudge.train import existing_judge, train

    log = log or _logger.info
    out = {}
    key = judge_key(pair_cfg, judge_cfg)
    if stage == "build" and (info := existing_judge(key)) is not None:
        # a committed (or earlier) judge is used as is: its mining records are not needed again
        log(f"[build] judge {key} exists ({judge_dir(key)}); mining and training skipped")
        return info
    if stage in ("mine", "build"):
        out = mine(pair_cfg, judge_cfg, log=log)
    if stage in ("train", "build"):
        out = train(pair_cfg, judge_cfg, log=log)
    return out


def hydra_entry(stage: str) -> None:
    """The Hydra CLI of ``runners.autojudge.{mine,train,build}`` over ``conf/run.yaml``."""
    import hydra
    from omegaconf import OmegaConf

    import runners.main  # noqa: F401  (registers conf/run.yaml's ${dm.unique:} resolver)
    from runners.paths import REPO_ROOT

    # absolute: a relative config_path resolves against the calling module, which breaks `-m runners.autojudge.train`
    @hydra.main(version_base="1.3", config_path=str(REPO_ROOT / "conf"), config_name="run")
    def _main(cfg: Any) -> None:
        from runners.config.validate import ConfigError
        from runners.datasets.sources import DatasetUnavailableError
        from runners.models.sources import ModelUnavailableError

        c = OmegaConf.to_container(cfg, resolve=True)
        judge = (c.get("method") or {}).get("judge")
        if not isinstance(judge, dict):
            _logger.error(
                f"config error: method={c['method']['name']} has no judge; allowed: method=autojudge or "
                f"method=autojudge_dropmatch (their method.judge: conf/autojudge/*.yaml)"
            )
            sys.exit(2)
        judge.pop("key", None)
        from runners.config.optional_deps import gpu_available

        if (c.get("pair") or {}).get("requires_gpu") and not gpu_available():
            _logger.error(
                f"[autojudge {stage}] cannot build the judge here: pair={c['pair']['name']} needs a CUDA GPU and none "
                f"is visible; allowed here: pair=qwen25coder_0.5b_1.5b (the embedded CPU pair)"
            )
            sys.exit(2)
        try:
            build(c["pair"], judge, stage)
        except (ConfigError, DatasetUnavailableError, ModelUnavailableError) as e:
            _logger.error(f"[autojudge {stage}] cannot build the judge here: {e}")
            sys.exit(2)

    # the run callbacks refuse a config whose judge is missing: the judge is what this entry builds
    sys.argv.append("~hydra.callbacks.sweep_summary")
    _main()


def main() -> None:
    hydra_entry("build")


if __name__ == "__main__":
    sys.exit(main())
