"""The CPU loops' :class:`criteria.base.RoundMeter`: the seconds of a round's decision after the plain logits, and
the rows that reached each rung of the escape ladder.

``rule`` seconds run from the moment the plain head's logits are ready to the end of
:func:`criteria.verify.verify_round`: the dropout masks and heads, the candidates, the JS test and its escape, the
rule's bookkeeping. A run's DropMatch decision costs ``rule_s`` over its verify pass (the target's forward plus
the plain LM head). The exact rule computes the plain and the head rows in one matmul, so it has no such split
(``rule_s`` None).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch


class RoundClock:
    """One round's meter for ``rows`` batch rows; :meth:`stop` when the round's decision returns, then
    :meth:`charge` its rows."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.plain_at: float | None = None
        self.end: float | None = None
        self.rungs: dict[str, torch.Tensor] = {}  # rung -> [rows] int64 positions that reached it

    def plain(self) -> None:
        self.plain_at = time.perf_counter()

    def escape(self, samples: int | None, rows: torch.Tensor) -> None:
        key = "exact" if samples is None else str(samples)
        hits = torch.bincount(rows.cpu(), minlength=self.rows)
        self.rungs[key] = self.rungs[key] + hits if key in self.rungs else hits

    def stop(self) -> None:
        self.end = time.perf_counter()

    @property
    def rule_s(self) -> float | None:
        """Seconds from the plain logits to the end of the decision; None when the round had no such moment."""
        if self.plain_at is None or self.end is None:
            return None
        return self.end - self.plain_at

    def charge(self, rows: Sequence[Any]) -> None:
        """Add the round to each row (:class:`runners.backends.batch_rows.Row`): ``timing["rule"]`` (the whole
        round's seconds, as the loops add every part) when measured, and its own positions per rung to
        ``escape``."""
        rule_s = self.rule_s
        for i, r in enumerate(rows):
            if rule_s is not None:
                r.timing["rule"] = r.timing.get("rule", 0.0) + rule_s
            for key, hits in self.rungs.items():
                if int(hits[i]):
                    r.escape[key] = r.escape.get(key, 0) + int(hits[i])
