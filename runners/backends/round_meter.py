"""The loops' :class:`criteria.base.RoundMeter`: how long a round took to its plain logits and then to its
decision, and the rows that reached each rung of the escape ladder.

``plain`` seconds run from the call of :func:`criteria.verify.verify_round` to the moment the plain head's float32
logits are ready (the transformers loop's LM head; about nothing where the engine computed them, llama.cpp),
``rule`` seconds from then to the end of ``verify_round``: the dropout masks and heads, the candidates, the JS
test and its escape, the rule's bookkeeping. A run's decision costs ``rule_s`` over its verify pass
``verify_s + plain_s``. The exact rule with ``p_drop > 0`` computes the plain and the head rows in one matmul, so
its rounds have no such split (neither is recorded). On CUDA the clock synchronises the device at each mark, so
the seconds are the kernels', not their launches'.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch


class RoundClock:
    """One round's meter for ``rows`` batch rows on ``device``, started when built; :meth:`stop` when the round's
    decision returns, then :meth:`charge` its rows."""

    def __init__(self, rows: int, device: torch.device | str = "cpu") -> None:
        self.rows = rows
        self.cuda = torch.device(device).type == "cuda"
        self.reached: list[
            tuple[str, torch.Tensor]
        ] = []  # (rung, rows [m]) per call, counted in charge
        self.plain_at: float | None = None
        self.end: float | None = None
        self.start = self._now()

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def plain(self) -> None:
        self.plain_at = self._now()

    def escape(self, rung: str, rows: torch.Tensor) -> None:
        self.reached.append((rung, rows))

    def stop(self) -> None:
        self.end = self._now()

    @property
    def plain_s(self) -> float | None:
        """Seconds to the plain logits; None when the round had no plain moment."""
        return None if self.plain_at is None else self.plain_at - self.start

    @property
    def rule_s(self) -> float | None:
        """Seconds from the plain logits to the end of the decision; None when the round had no plain moment."""
        if self.plain_at is None or self.end is None:
            return None
        return self.end - self.plain_at

    def rungs(self) -> dict[str, torch.Tensor]:
        """Per rung, ``[rows]`` int64 positions of each row that reached it."""
        out: dict[str, torch.Tensor] = {}
        for key, rows in self.reached:
            hits = torch.bincount(rows.cpu(), minlength=self.rows)
            out[key] = out[key] + hits if key in out else hits
        return out

    def charge(self, rows: Sequence[Any]) -> None:
        """Add the round to each row (:class:`runners.backends.batch_rows.Row`): ``timing["plain"]`` and
        ``timing["rule"]`` (the whole round's seconds, as the loops add every part) when measured, and its own
        positions per rung to ``escape``."""
        plain_s, rule_s, rungs = self.plain_s, self.rule_s, self.rungs()
        for i, r in enumerate(rows):
            if plain_s is not None and rule_s is not None:
                r.timing["plain"] = r.timing.get("plain", 0.0) + plain_s
                r.timing["rule"] = r.timing.get("rule", 0.0) + rule_s
            for key, hits in rungs.items():
                if int(hits[i]):
                    r.escape[key] = r.escape.get(key, 0) + int(hits[i])
