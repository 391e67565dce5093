"""The logger of ``logger=none`` (the default), and the one-line hint that W&B logging exists."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runners.sweep.console import terminal


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
    """Show :data:`WANDB_HINT` once per process (on stderr; :func:`runners.sweep.console.terminal`)."""
    global _hinted
    if not _hinted:
        _hinted = True
        terminal(f"{__name__}.hint").info(WANDB_HINT)
