"""Build Auto-Judge's judge for a run config: mine (resumable) and train, each only when missing or stale.

    python -m runners.autojudge.build method=autojudge [pair=...] [profile=...] [method.judge.mining.limit=...]

Takes the same overrides as ``python -m runners.main`` and builds the judge a run with those overrides would
use (``method.judge``: ``conf/autojudge/<name>.yaml``, keyed by pair + mining config, see
:mod:`runners.autojudge.artefact`). ``./reproduce.sh table8|table9|fig1|fig5|fig6`` call it before their sweeps.
Exit status 2 (with the reason) when the config is invalid or the judge cannot be built here
(:mod:`runners.autojudge.cli`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from runners.autojudge.artefact import judge_dir, judge_key
from runners.autojudge.cli import hydra_entry
from runners.autojudge.mine import mine
from runners.autojudge.train import existing_judge, train

_logger = logging.getLogger(__name__)


def build(pair_cfg: Any, judge_cfg: Any, log: Callable[[str], None] | None = None) -> dict:
    """The judge of a resolved pair and judge config: an existing one as is, else mined and trained."""
    log = log or _logger.info
    key = judge_key(pair_cfg, judge_cfg)
    if (info := existing_judge(key)) is not None:
        # a committed (or earlier) judge is used as is: its mining records are not needed again
        log(f"[build] judge {key} exists ({judge_dir(key)}); mining and training skipped")
        return info
    mine(pair_cfg, judge_cfg, log=log)
    return train(pair_cfg, judge_cfg, log=log)


def main() -> None:
    hydra_entry("build", build)


if __name__ == "__main__":
    sys.exit(main())
