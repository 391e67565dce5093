"""Experiment loggers selected by ``conf/logger/``: ``none`` (default) or ``wandb``.

A logger gets each sample record as it is appended, then the run summary. Anything it does is a side
effect at the edge; the run record on disk is the source of truth.
"""

from __future__ import annotations

from typing import Any, Mapping


class NullLogger:
    """Does nothing (``logger=none``)."""

    def log_sample(self, rec: Mapping[str, Any]) -> None:
        pass

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        pass

    def finish(self) -> None:
        pass


def make_logger(cfg: Mapping[str, Any], run_id: str, run_cfg: Mapping[str, Any]) -> Any:
    """Build the logger named by ``cfg['name']`` (``none`` when absent)."""
    name = (cfg or {}).get("name", "none")
    if name == "none":
        return NullLogger()
    if name == "wandb":
        from runners.wandb_logger import WandbLogger

        return WandbLogger(cfg, run_id, run_cfg)
    raise ValueError(f"logger={name!r} is unknown; allowed: none, wandb")
