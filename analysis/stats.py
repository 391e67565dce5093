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

Paired accuracy difference (:func:`paired_accuracy`, :func:`newcombe_paired_ci`, :func:`mcnemar_exact_p`):
two runs scored on the same items form a paired 2x2 table (both right n11, only A right n10, only B right n01,
both wrong n00). Delta acc = acc(A) - acc(B) = (n10 - n01) / n. Its interval is Newcombe's hybrid score
interval for paired data (Newcombe 1998, Stat. Med. 17:2635, method 10: Wilson score intervals of the two
marginal proportions combined by square-and-add with a continuity-corrected correlation term), and the test is
McNemar's exact (conditional binomial) test on the discordant items. Why these and not a paired bootstrap:
at the n of a CPU run (10-30 items) the discordant items are few (0-3), and the percentile bootstrap of a
paired difference then collapses (no discordant item: interval [0, 0], certainty from ten items) or
under-covers; Newcombe's interval keeps near-nominal coverage at small n and needs no seed (Fagerland,
Lydersen & Laake 2014, Stat. Med. 33:2850, recommend it among the closed-form paired-difference intervals).
Beside it, the number of items whose *output* differs between the runs: only those can change accuracy, so a
lossless rule shows 0 there whatever the interval's width.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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

    def scaled(self, factor: float) -> Estimate:
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


@dataclass(frozen=True)
class PairedDiff:
    """Accuracy of run A minus accuracy of run B on the items both hold.

    Attributes:
        value: acc(A) - acc(B) as a fraction in [-1, 1] (percentage points after :meth:`scaled`); NaN when
            no item is paired.
        lo, hi: Newcombe's paired interval at ``LEVEL`` (same unit as ``value``).
        n: items scored in both runs.
        n10: items only A got right; n01: items only B got right (the discordant pairs).
        p_mcnemar: exact McNemar two-sided p-value (1.0 without discordant items).
        n_diverged: items whose output differs between the runs (None when outputs were not given or not
            recorded); an item can change correctness only if its output diverged.
    """

    value: float
    lo: float
    hi: float
    n: int
    n10: int
    n01: int
    p_mcnemar: float
    n_diverged: int | None = None

    def scaled(self, factor: float) -> PairedDiff:
        """The same difference in other units (``100.0``: percentage points)."""
        return PairedDiff(
            self.value * factor,
            self.lo * factor,
            self.hi * factor,
            self.n,
            self.n10,
            self.n01,
            self.p_mcnemar,
            self.n_diverged,
        )

    @property
    def estimate(self) -> Estimate:
        """As an :class:`Estimate` (for :func:`fmt` and CSV columns)."""
        return Estimate(self.value, self.lo, self.hi, self.n)


NAN_DIFF = PairedDiff(math.nan, math.nan, math.nan, 0, 0, 0, math.nan, None)


def wilson_ci(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (Wilson 1927), without continuity correction.

    Raises:
        ValueError: ``n < 1`` or ``k`` outside ``[0, n]``.
    """
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"wilson_ci needs 0 <= k <= n and n >= 1; got k={k}, n={n}")
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + level / 2.0))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe_paired_ci(
    n11: int, n10: int, n01: int, n00: int, level: float = LEVEL
) -> tuple[float, float, float]:
    """Newcombe's hybrid score interval for the difference of two paired proportions (method 10).

    The table counts items by (A correct, B correct): ``n11`` both, ``n10`` A only, ``n01`` B only, ``n00``
    neither; n = their sum. With p1 = (n11 + n10)/n, p2 = (n11 + n01)/n, D = p1 - p2, (l_i, u_i) the Wilson
    score intervals of p1 and p2, and phi the continuity-corrected correlation of the two margins
    (C = n11*n00 - n10*n01; C' = C - n/2 if C > n/2, 0 if 0 <= C <= n/2, C if C < 0;
    phi = C' / sqrt((n11+n10)(n01+n00)(n11+n01)(n10+n00)), 0 when a margin is empty):

        L = D - sqrt((p1 - l1)^2 - 2 phi (p1 - l1)(u2 - p2) + (u2 - p2)^2)
        U = D + sqrt((p2 - l2)^2 - 2 phi (p2 - l2)(u1 - p1) + (u1 - p1)^2)

    (Newcombe 1998, Stat. Med. 17:2635-2650, Sec. 2, method 10.)

    Returns:
        ``(D, L, U)`` as fractions.

    Raises:
        ValueError: a negative count or an empty table.
    """
    counts = (n11, n10, n01, n00)
    if any(c < 0 for c in counts) or sum(counts) == 0:
        raise ValueError(f"newcombe_paired_ci needs non-negative counts, n >= 1; got {counts}")
    n = sum(counts)
    a1, a2 = n11 + n10, n11 + n01  # A right, B right
    p1, p2 = a1 / n, a2 / n
    l1, u1 = wilson_ci(a1, n, level)
    l2, u2 = wilson_ci(a2, n, level)
    margins = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
    phi = 0.0
    if margins > 0:
        c = n11 * n00 - n10 * n01
        c = c - n / 2 if c > n / 2 else (0.0 if c >= 0 else c)
        phi = c / math.sqrt(margins)
    d = p1 - p2
    lo = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = d + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return d, max(-1.0, lo), min(1.0, hi)


def mcnemar_exact_p(n10: int, n01: int) -> float:
    """Exact (conditional) McNemar test: two-sided p of ``n10`` successes in ``n10 + n01`` fair coin flips
    (``scipy.stats.binomtest``); 1.0 without discordant pairs."""
    if n10 < 0 or n01 < 0:
        raise ValueError(f"discordant counts must be >= 0; got n10={n10}, n01={n01}")
    if n10 + n01 == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(n10, n10 + n01, 0.5).pvalue)


def paired_accuracy(
    correct_a: Sequence[float],
    correct_b: Sequence[float],
    outputs_a: Sequence[object] | None = None,
    outputs_b: Sequence[object] | None = None,
    *,
    level: float = LEVEL,
) -> PairedDiff:
    """acc(A) - acc(B) on aligned items, Newcombe's paired interval, exact McNemar p, outputs diverged.

    Args:
        correct_a, correct_b: per-item correctness (0/1, NaN = not scored), aligned (entry i = the same item
            in both runs). Items unscored in either run are left out (n counts the rest).
        outputs_a, outputs_b: optional per-item outputs, aligned likewise (token-id tuples or texts; compared
            with ``==``; None entries = not recorded). ``n_diverged`` counts paired items whose outputs differ;
            it is None when outputs are not given or an item lacks one.
        level: interval coverage.

    Returns:
        :class:`PairedDiff` as fractions (``.scaled(100.0)`` for percentage points); :data:`NAN_DIFF` when no
        item is scored in both runs.

    Raises:
        ValueError: sequences of unequal length, or correctness other than 0/1/NaN.
    """
    a, b = _arr(correct_a), _arr(correct_b)
    if len(a) != len(b):
        raise ValueError(f"paired_accuracy: correct_a has {len(a)} items, correct_b {len(b)}")
    both = ~np.isnan(a) & ~np.isnan(b)
    bad = both & ~(np.isin(a, (0.0, 1.0)) & np.isin(b, (0.0, 1.0)))
    if bad.any():
        raise ValueError(
            f"paired_accuracy: correctness must be 0, 1 or NaN; item {int(np.argmax(bad))} has "
            f"({a[bad][0]}, {b[bad][0]})"
        )
    diverged = None
    if outputs_a is not None and outputs_b is not None:
        oa, ob = list(outputs_a), list(outputs_b)
        if not len(oa) == len(ob) == len(a):
            raise ValueError(
                f"paired_accuracy: outputs have {len(oa)} / {len(ob)} items, correctness {len(a)}"
            )
        kept = [(x, y) for x, y, k in zip(oa, ob, both) if k]
        if all(x is not None and y is not None for x, y in kept):
            diverged = sum(x != y for x, y in kept)
    a, b = a[both], b[both]
    if len(a) == 0:
        return NAN_DIFF
    n11 = int(((a == 1) & (b == 1)).sum())
    n10 = int(((a == 1) & (b == 0)).sum())
    n01 = int(((a == 0) & (b == 1)).sum())
    n00 = int(((a == 0) & (b == 0)).sum())
    d, lo, hi = newcombe_paired_ci(n11, n10, n01, n00, level)
    return PairedDiff(d, lo, hi, len(a), n10, n01, mcnemar_exact_p(n10, n01), diverged)


def fmt_diff(d: PairedDiff, digits: int = 1, *, interval: bool = True) -> str:
    """``"-10.0 [-40.4, 21.3]"`` with a sign, plus ``", 2/10 differ"`` when outputs were compared
    (``""`` when undefined)."""
    if d is None or d.n == 0 or math.isnan(d.value):
        return ""
    text = f"{d.value:+.{digits}f}"
    if interval and not math.isnan(d.lo):
        text += f" [{d.lo:+.{digits}f}, {d.hi:+.{digits}f}]"
    if d.n_diverged is not None:
        text += f", {d.n_diverged}/{d.n} differ"
    return text


def fmt_spread(value: float, sd: float, n: int, digits: int = 2) -> str:
    """``"4.86 ± 0.12"``: a mean over ``n`` timing repeats and their standard deviation. Below two repeats there
    is no spread to show (a recorded 0.0 is not one): ``"4.86 (1 repeat, no interval)"`` (the repeats, not the
    prompts a table's other columns pair over); ``""`` when the value is undefined (NaN)."""
    if value is None or math.isnan(value):
        return ""
    v = f"{value:.{digits}f}"
    if n < 2 or sd is None or math.isnan(sd):
        return f"{v} ({int(n)} repeat{'' if int(n) == 1 else 's'}, no interval)"
    return f"{v} ± {sd:.{digits}f}"


def fmt(e: Estimate, digits: int = 2, *, interval: bool = True) -> str:
    """``"4.86 [4.51, 5.20]"`` (``""`` when undefined; no interval when it is undefined or not asked for)."""
    if e is None or math.isnan(e.value):
        return ""
    v = f"{e.value:.{digits}f}"
    if not interval or math.isnan(e.lo):
        return v
    return f"{v} [{e.lo:.{digits}f}, {e.hi:.{digits}f}]"
