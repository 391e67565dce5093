"""Progress lines of a run and of a sweep: samples or runs done, rates, elapsed time and ETA."""

from __future__ import annotations

import sys
import time
from typing import Any

from tqdm import tqdm


def hms(seconds: float) -> str:
    """``H:MM:SS`` of a duration (negative values count as 0)."""
    s = int(round(max(seconds, 0.0)))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class RunProgress:
    """Progress of one run: samples done, tok/s, running tau and ETA.

    Its tok/s is the output tokens over the time since the run started (prefill and waits included): how fast the
    run goes. The run's recorded ``speed/tok_per_s`` (its ``done`` line, the tables) is the mean of the items' own
    rates with prefill left out, so the two differ.

    ``mode`` (config ``progress``): ``bar`` a tqdm bar on stderr, ``log`` one line per ~10% of the samples
    (for non-interactive Slurm/CI logs), ``quiet`` nothing, ``auto`` bar on a terminal else log.
    """

    def __init__(self, total: int, desc: str, mode: str, log) -> None:
        mode = (
            mode if mode in ("bar", "log", "quiet") else ("bar" if sys.stderr.isatty() else "log")
        )
        self.total, self.mode, self.log, self.n, self.tokens = total, mode, log, 0, 0
        self.drafts = self.accepted = 0
        self.t0 = time.perf_counter()
        self.bar = None
        if mode == "bar":
            self.bar = tqdm(total=total, desc=desc, unit="sample", dynamic_ncols=True)

    def update(self, num_tokens: int, counters: Any, prefix: str) -> None:
        self.n += 1
        self.tokens += num_tokens
        self.drafts += counters.num_drafts
        self.accepted += counters.num_accepted_tokens
        elapsed = time.perf_counter() - self.t0
        rate, tau = self.tokens / max(elapsed, 1e-9), 1 + self.accepted / max(self.drafts, 1)
        if self.bar is not None:  # tqdm shows elapsed<remaining (ETA) itself
            self.bar.set_postfix(tok_s=f"{rate:.2f}", tau=f"{tau:.2f}")
            self.bar.update(1)
        elif self.mode == "log" and (
            self.n == self.total or self.n % max(1, self.total // 10) == 0
        ):
            eta = elapsed / self.n * (self.total - self.n)
            self.log(
                f"{prefix} {self.n}/{self.total} samples, {rate:.2f} tok/s over the elapsed time, tau {tau:.2f}, "
                f"elapsed {hms(elapsed)}, ETA {hms(eta)}"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
