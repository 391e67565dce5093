"""Experiment loggers selected by ``conf/logger/``: ``none`` (default, :mod:`.null_logger`) or ``wandb``
(:mod:`.wandb_logger`).

A logger gets each sample record as it is appended, then the run summary. Anything it does is a side
effect at the edge; the run record on disk is the source of truth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runners.loggers.null_logger import NullLogger, hint_wandb
from runners.loggers.wandb_logger import WandbLogger


def make_logger(cfg: Mapping[str, Any], run_id: str, run_cfg: Mapping[str, Any]) -> Any:
    """Build the logger named by ``cfg['name']`` (``none`` when absent; prints a one-line W&B hint once)."""
    name = (cfg or {}).get("name", "none")
    if name == "none":
        hint_wandb()
        return NullLogger()
    if name == "wandb":
        return WandbLogger(cfg, run_id, run_cfg)
    raise ValueError(f"logger={name!r} is unknown; allowed: none, wandb")


__all__ = ["NullLogger", "WandbLogger", "hint_wandb", "make_logger"]
