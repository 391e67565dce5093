"""Experiment loggers selected by ``conf/logger/``: ``none`` (default) or ``wandb``.

A logger gets each sample record as it is appended, then the run summary. Anything it does is a side
effect at the edge; the run record on disk is the source of truth.
"""

from __future__ import annotations

from typing import Any, Mapping

from runners.logs import terminal


class NullLogger:
    """Does nothing (``logger=none``)."""

    def log_sample(self, rec: Mapping[str, Any]) -> None:
        pass

    def log_summary(self, summary: Mapping[str, Any]) -> None:
        pass

    def finish(self) -> None:
        pass


WANDB_HINT = (
    "[logger] W&B logging is off; enable it with logger=wandb (logger.mode=offline on nodes without "
    "internet, then `wandb sync <results>/wandb/offline-run-*`)"
)
_hinted = False


def hint_wandb() -> None:
    """Show :data:`WANDB_HINT` once per process (on stderr; :func:`runners.logs.terminal`)."""
    global _hinted
    if not _hinted:
        _hinted = True
        terminal(f"{__name__}.hint").info(WANDB_HINT)


def make_logger(cfg: Mapping[str, Any], run_id: str, run_cfg: Mapping[str, Any]) -> Any:
    """Build the logger named by ``cfg['name']`` (``none`` when absent; prints a one-line W&B hint once)."""
    name = (cfg or {}).get("name", "none")
    if name == "none":
        hint_wandb()
        return NullLogger()
    if name == "wandb":
        from runners.wandb_logger import WandbLogger

        return WandbLogger(cfg, run_id, run_cfg)
    raise ValueError(f"logger={name!r} is unknown; allowed: none, wandb")
