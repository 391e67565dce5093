"""Per-cell numbers with intervals from a run's items (:func:`analysis.load.load_items`), for the tables.

A *cell* is one run (pair, benchmark, method, L, setting). Its accuracy, tau and tok/s come with 95 %
bootstrap intervals over the run's items; a speedup between two cells is paired on the items both hold
(:func:`analysis.stats.paired_speedup`), and so is an accuracy difference (:func:`delta_acc`,
:func:`paired_items`: Newcombe's paired interval, exact McNemar, items whose output diverged). Estimators,
the bootstrap and the paired interval are documented in :mod:`analysis.stats`.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from analysis.load import load_items
from analysis.stats import (
    B_DEFAULT,
    NAN,
    NAN_DIFF,
    SEED,
    Estimate,
    PairedDiff,
    mean_ci,
    paired_accuracy,
    paired_speedup,
    repeat_spread,
    tau_ci,
)

CI_NOTE = (
    f"value [95% CI]: percentile bootstrap over items (B={B_DEFAULT}, seed {SEED}); τ pooled over items "
    "(1 + Σaccepted / Σrounds), accuracy and tok/s as means over items"
)
# Two runs finished further apart than this were timed in different sessions, possibly on another host or a host
# running at another speed: their tok/s ratio would measure the host as much as the rule, so it is not printed.
SAME_SESSION_HOURS = 6.0

SPEEDUP_NOTE = (
    "speedup = mean per-item tok/s of the row / that of its reference on the items both runs hold "
    "(Spec-Bench's speedup ratio), 95% CI by paired bootstrap over those items; only between runs finished "
    f"within {SAME_SESSION_HOURS:g} h of each other (one session: across sessions the host's speed differs, and "
    "such a cell is left empty)"
)


@dataclass
class Cell:
    """One run's numbers. ``acc`` in percent (the scorer's primary metric), ``tau`` in tokens per round, ``tps``
    in tokens/s; ``comparable`` in percent: the run's ``comparable_metric`` (lm-eval's own number when the
    primary is another, e.g. GSM8K's strict-match beside the numerically normalised match), else NaN."""

    run_id: str
    n: int
    acc: Estimate
    tau: Estimate
    tps: Estimate
    repeats: int
    spread: float
    items: pd.DataFrame = field(repr=False)
    comparable_metric: str | None = None
    comparable: Estimate = NAN
    timed: str | None = None  # the run's date_utc (ISO 8601), when its records have one


def comparable_of(run: pd.Series) -> str | None:
    """The run's ``comparable_metric`` when its records carry one other than the primary, else None."""
    m = run.get("comparable_metric")
    return str(m) if isinstance(m, str) and m and m != run.get("quality_metric") else None


class ItemCache:
    """Reads each run's ``samples.jsonl`` once per artefact build."""

    def __init__(self) -> None:
        self._items: dict[str, pd.DataFrame] = {}

    def items(self, run: pd.Series) -> pd.DataFrame:
        key = str(run["run_dir"])
        if key not in self._items:
            self._items[key] = load_items(key, comparable_of(run))
        return self._items[key]

    def cell(self, run: pd.Series) -> Cell:
        """The numbers of one run (a row of :func:`analysis.load.load_runs`)."""
        it = self.items(run)
        acc = mean_ci(it["correct"]).scaled(100.0) if it["correct"].notna().any() else NAN
        reps = min((len(r) for r in it["wall_s_repeats"]), default=1)
        other = comparable_of(run)
        return Cell(
            run_id=str(run["run_id"]),
            n=len(it),
            acc=acc,
            tau=tau_ci(it["accepted"], it["rounds"]),
            tps=mean_ci(it["tok_per_s"]),
            repeats=reps,
            spread=repeat_spread(list(it["wall_s_repeats"])),
            items=it,
            comparable_metric=other,
            comparable=mean_ci(it["comparable"]).scaled(100.0)
            if other and it["comparable"].notna().any()
            else NAN,
            timed=run.get("date_utc") if isinstance(run.get("date_utc"), str) else None,
        )


def speedup(a: Cell | None, b: Cell | None) -> Estimate:
    """Speedup of cell ``a`` over cell ``b`` on the items both hold (paired); NaN when either is missing or they
    were not timed in one session (:func:`timed_together`)."""
    if a is None or b is None or not timed_together(a, b):
        return NAN
    m = (
        a.items[["sample_id", "tok_per_s"]]
        .merge(b.items[["sample_id", "tok_per_s"]], on="sample_id", suffixes=("_a", "_b"))
        .dropna()
    )
    return paired_speedup(m["tok_per_s_a"], m["tok_per_s_b"])


def timed_together(a: Cell, b: Cell) -> bool:
    """Whether two runs finished within :data:`SAME_SESSION_HOURS` of each other (True when either lacks a date)."""
    if a.timed is None or b.timed is None:
        return True
    gap = dt.datetime.fromisoformat(a.timed) - dt.datetime.fromisoformat(b.timed)
    return abs(gap.total_seconds()) <= SAME_SESSION_HOURS * 3600


DELTA_ACC_NOTE = (
    "Δ acc = accuracy of the row minus that of its reference on the items both runs scored, in points, "
    "95% CI by Newcombe's paired score interval (method 10), exact McNemar test in the CSV; 'k/n differ' = "
    "items whose output (token ids) differs from the reference's, the only ones whose score can change"
)


def paired_items(items_a: pd.DataFrame, items_b: pd.DataFrame) -> PairedDiff:
    """acc(A) - acc(B) in percentage points on the items both runs hold (joined on ``sample_id``), with the
    paired interval, McNemar p and the items whose output differs (:func:`analysis.stats.paired_accuracy`).

    Args:
        items_a, items_b: :func:`analysis.load.load_items` frames (columns ``sample_id``, ``correct``,
            ``output``) of two runs on the same benchmark, e.g. a rule and its reference.

    Returns:
        :class:`analysis.stats.PairedDiff` in points; :data:`analysis.stats.NAN_DIFF` when no item is paired.
    """
    cols = ["sample_id", "correct", "output"]
    m = items_a[cols].merge(items_b[cols], on="sample_id", suffixes=("_a", "_b"))
    if m.empty:
        return NAN_DIFF
    return paired_accuracy(
        m["correct_a"], m["correct_b"], list(m["output_a"]), list(m["output_b"])
    ).scaled(100.0)


def delta_acc(a: Cell | None, b: Cell | None) -> PairedDiff:
    """Accuracy of cell ``a`` minus cell ``b`` (points, paired; :func:`paired_items`); NaN when either is
    missing or unscored."""
    if a is None or b is None:
        return NAN_DIFF
    return paired_items(a.items, b.items)


def diff_columns(prefix: str, d: PairedDiff) -> dict[str, float]:
    """CSV columns of a paired difference: ``<prefix>`` (+ ``_lo``, ``_hi``), ``<prefix>_n`` (paired items),
    ``<prefix>_diverged`` (outputs differing; NaN when unknown), ``<prefix>_p_mcnemar``."""
    return {
        **est_columns(prefix, d.estimate),
        f"{prefix}_n": d.n,
        f"{prefix}_diverged": float("nan") if d.n_diverged is None else d.n_diverged,
        f"{prefix}_p_mcnemar": d.p_mcnemar,
    }


def est_columns(prefix: str, e: Estimate) -> dict[str, float]:
    """CSV columns ``<prefix>``, ``<prefix>_lo``, ``<prefix>_hi`` (NaN when undefined)."""
    return {prefix: e.value, f"{prefix}_lo": e.lo, f"{prefix}_hi": e.hi}


def timing_note(cells: Iterable[Cell]) -> str:
    """Footer line: timing repeats per item and how much an item's time moved between them."""
    cells = list(cells)
    reps = sorted({c.repeats for c in cells})
    spreads = [c.spread for c in cells if not math.isnan(c.spread)]
    if not reps or max(reps) <= 1:
        return (
            "timing: one timing per item (no repeats): tok/s intervals reflect item-to-item variation, "
            "not timing noise"
        )
    rtext = "/".join(map(str, reps))
    med = sorted(spreads)[len(spreads) // 2] if spreads else math.nan
    return (
        f"timing: {rtext} repeats per item, an item's wall time = the median of its repeats; median spread "
        f"between repeats (max-min)/median = {100.0 * med:.1f}%"
    )


def cap_note(cells_by_label: dict[str, Iterable[Cell]]) -> str:
    """Footer line: per benchmark, the share of outputs that ended at ``max_new_tokens`` (over every cell's items).

    Args:
        cells_by_label: ``{benchmark label: its cells}``.
    """
    parts = []
    for label, cells in cells_by_label.items():
        hit = pd.concat([c.items["hit_cap"] for c in cells]) if cells else pd.Series(dtype=float)
        hit = hit.dropna()
        if len(hit):
            parts.append(f"{label} {int(hit.sum())}/{len(hit)}")
    return (
        ("outputs that hit max_new_tokens (capped, answer possibly cut): " + ", ".join(parts))
        if parts
        else "outputs that hit max_new_tokens: not recorded (records without stop_reason)"
    )
