"""Interval estimates over benchmark items: percentile bootstrap for tau, accuracy, tokens/s and speedups.

Pure numpy; every function takes per-item arrays (one entry per benchmark item, aligned by the caller) and
returns an :class:`Estimate` (point value, 95 % interval, n). The items are the unit of resampling: the
question is how much a number would move on another draw of items of the same benchmark, which is what
the paper's comparisons across methods rest on. Timing noise of one item is summarised separately
(:func:`repeat_spread`).

Bootstrap: ``B`` = :data:`B_DEFAULT` resamples of the n items with replacement, from
``numpy.random.default_rng(seed)`` (``seed`` = :data:`SEED`, so a table rebuilds byte for byte); the
interval is the 2.5th and 97.5th percentile of the resampled statistic (percentile method, Efron &
Tibshirani 1993, ch. 13). With n = 1, or a sample whose statistic does not vary, the interval has zero
width: read it together with n.

Estimators:
    share or pooled mean = sum(num) / sum(den) over items (:func:`ratio_ci`; Tables 2-3 over positions).
    tau = 1 + sum(accepted) / sum(rounds): a ratio estimator (vLLM's definition, pooled over items, not a
        mean of per-item taus); resampled by items, recomputed from the resampled sums.
    accuracy = mean of per-item correct (0/1), in the caller's unit.
    tok/s = mean of per-item output tokens / wall seconds (Spec-Bench's ``speed``).
    speedup of arm A over arm B = mean(tok/s of A) / mean(tok/s of B) over the items both ran: Spec-Bench's
        ``speedup_ratio`` (``evaluation/speed.py``), so it equals the ratio of the two tok/s cells. Paired
        (:func:`paired_speedup`): each resample draws the same items for both arms, so the per-item
        difficulty shared by both arms cancels; :func:`unpaired_speedup` resamples the arms independently
        (for comparison; it ignores the pairing and gives wider intervals when items vary).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

B_DEFAULT = 2000
SEED = 0
LEVEL = 0.95


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval.

    Attributes:
        value: the statistic on all items (NaN when undefined, e.g. no items).
        lo, hi: the interval bounds at ``LEVEL`` (NaN when undefined).
        n: items used.
    """

    value: float
    lo: float
    hi: float
    n: int

    def scaled(self, factor: float) -> "Estimate":
        """The same estimate in other units (e.g. a fraction as percent)."""
        return Estimate(self.value * factor, self.lo * factor, self.hi * factor, self.n)


NAN = Estimate(math.nan, math.nan, math.nan, 0)


def _arr(x: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).reshape(-1)


def _resample_idx(n: int, B: int, seed: int) -> np.ndarray:
    """``[B, n]`` item indices drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n, size=(B, n))


def _interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    a = (1.0 - level) / 2.0
    lo, hi = np.nanpercentile(stats, [100.0 * a, 100.0 * (1.0 - a)])
    return float(lo), float(hi)


def bootstrap(
    stat: Callable[[np.ndarray], np.ndarray],
    columns: Sequence[np.ndarray],
    *,
    B: int = B_DEFAULT,
    seed: int = SEED,
    level: float = LEVEL,
) -> Estimate:
    """Percentile bootstrap over items of a statistic of aligned per-item columns.

    Args:
        stat: maps ``[..., n]`` arrays (one per column, resampled on the last axis) to ``[...]`` values;
            called once on the items (shape ``[n]``) and once on all resamples (shape ``[B, n]``).
        columns: per-item arrays of equal length n (float64).
        B: resamples; seed: RNG seed; level: interval coverage.

    Returns:
        :class:`Estimate`; :data:`NAN` when n = 0.

    Raises:
        ValueError: columns of unequal length.
    """
    cols = [_arr(c) for c in columns]
    n = len(cols[0]) if cols else 0
    if any(len(c) != n for c in cols):
        raise ValueError(f"per-item columns differ in length: {[len(c) for c in cols]}")
    if n == 0:
        return NAN
    with np.errstate(divide="ignore", invalid="ignore"):
        value = float(stat(*cols))
        idx = _resample_idx(n, B, seed)
        stats = stat(*(c[idx] for c in cols))
    if np.all(np.isnan(stats)):
        return Estimate(value, math.nan, math.nan, n)
    lo, hi = _interval(stats, level)
    return Estimate(value, lo, hi, n)


def _mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=-1)


def mean_ci(values: Sequence[float], **kw) -> Estimate:
    """Mean of per-item values (accuracy as 0/1, tokens/s) with its bootstrap interval; NaN items dropped."""
    v = _arr(values)
    return bootstrap(_mean, [v[~np.isnan(v)]], **kw)


def ratio_ci(num: Sequence[float], den: Sequence[float], **kw) -> Estimate:
    """sum(num) / sum(den) over items (a pooled share or mean, e.g. positions of a pattern / all positions),
    with its bootstrap interval over items; resamples with sum(den) = 0 are left out of the interval."""

    def stat(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        sb = b.sum(axis=-1)
        return np.where(sb > 0, a.sum(axis=-1) / np.where(sb > 0, sb, 1.0), np.nan)

    return bootstrap(stat, [_arr(num), _arr(den)], **kw)


def tau_ci(accepted: Sequence[float], rounds: Sequence[float], **kw) -> Estimate:
    """tau = 1 + sum(accepted) / sum(rounds) over items, with its bootstrap interval (ratio estimator).

    Args:
        accepted: per-item ``num_accepted_tokens`` (tokens); rounds: per-item ``num_drafts`` (rounds).
        A resample without rounds has tau = 1 (no drafts, as :func:`runners.records.counters.mean_acceptance_length`).
    """

    def stat(a: np.ndarray, r: np.ndarray) -> np.ndarray:
        sa, sr = a.sum(axis=-1), r.sum(axis=-1)
        return np.where(sr > 0, 1.0 + sa / np.where(sr > 0, sr, 1.0), 1.0)

    return bootstrap(stat, [_arr(accepted), _arr(rounds)], **kw)


def _ratio_of_means(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.mean(axis=-1) / b.mean(axis=-1)


def paired_speedup(tps_a: Sequence[float], tps_b: Sequence[float], **kw) -> Estimate:
    """Speedup of arm A over arm B: mean(tps_a) / mean(tps_b) on the same items, paired bootstrap.

    Args:
        tps_a, tps_b: per-item tokens/s of the two arms, aligned (entry i = the same item in both).

    Raises:
        ValueError: the arrays differ in length (not paired).
    """
    return bootstrap(_ratio_of_means, [_arr(tps_a), _arr(tps_b)], **kw)


def unpaired_speedup(
    tps_a: Sequence[float],
    tps_b: Sequence[float],
    *,
    B: int = B_DEFAULT,
    seed: int = SEED,
    level: float = LEVEL,
) -> Estimate:
    """The same ratio with each arm resampled on its own (independent draws; n = min of the two)."""
    a, b = _arr(tps_a), _arr(tps_b)
    if len(a) == 0 or len(b) == 0:
        return NAN
    value = float(a.mean() / b.mean())
    rng = np.random.default_rng(seed)
    sa = a[rng.integers(0, len(a), size=(B, len(a)))].mean(axis=1)
    sb = b[rng.integers(0, len(b), size=(B, len(b)))].mean(axis=1)
    lo, hi = _interval(sa / sb, level)
    return Estimate(value, lo, hi, min(len(a), len(b)))


def repeat_spread(wall_repeats: Sequence[Sequence[float]]) -> float:
    """Median over items of (max - min) / median of an item's repeated wall times; NaN with < 2 repeats.

    A summary of timing noise (how much one item's time moves between identical repeats), beside the
    bootstrap intervals that describe item-to-item variation.
    """
    spreads = [
        (max(r) - min(r)) / float(np.median(r))
        for r in wall_repeats
        if len(r) > 1 and np.median(r) > 0
    ]
    return float(np.median(spreads)) if spreads else math.nan


def clopper_pearson_lower(k: int, n: int, alpha: float = 0.05) -> float:
    """One-sided (1 - alpha) lower confidence bound of a binomial proportion k/n (exact, Clopper-Pearson)."""
    from scipy.stats import beta

    return 0.0 if k == 0 else float(beta.ppf(alpha, k, n - k + 1))


def fmt(e: Estimate, digits: int = 2, *, interval: bool = True) -> str:
    """``"4.86 [4.51, 5.20]"`` (``""`` when undefined; no interval when it is undefined or not asked for)."""
    if e is None or math.isnan(e.value):
        return ""
    v = f"{e.value:.{digits}f}"
    if not interval or math.isnan(e.lo):
        return v
    return f"{v} [{e.lo:.{digits}f}, {e.hi:.{digits}f}]"
