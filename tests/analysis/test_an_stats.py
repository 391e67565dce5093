"""analysis.stats: bootstrap intervals with known values (constant, two-point, ratio estimator, paired vs unpaired)
and the paired accuracy difference (Newcombe interval, exact McNemar) on published and hand-built tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.stats import (
    B_DEFAULT,
    NAN_DIFF,
    Estimate,
    fmt,
    fmt_diff,
    mcnemar_exact_p,
    mean_ci,
    newcombe_paired_ci,
    paired_accuracy,
    paired_speedup,
    ratio_ci,
    repeat_spread,
    tau_ci,
    unpaired_speedup,
    wilson_ci,
)


def test_constant_sample_has_zero_width():
    e = mean_ci([3.5] * 7)
    assert (e.value, e.lo, e.hi, e.n) == (3.5, 3.5, 3.5, 7)
    assert fmt(e) == "3.50 [3.50, 3.50]"


def test_single_item_has_zero_width_and_empty_is_nan():
    assert mean_ci([0.25]) == Estimate(0.25, 0.25, 0.25, 1)
    e = mean_ci([])
    assert e.n == 0 and math.isnan(e.value) and fmt(e) == ""


def test_two_point_distribution():
    """Items {0, 1}: resampled means are 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4 -> 95% interval [0, 1]."""
    e = mean_ci([0.0, 1.0])
    assert e.value == 0.5 and (e.lo, e.hi) == (0.0, 1.0)
    # many items of a fair coin: the interval is close to mean +- 1.96 * sqrt(p(1-p)/n) = 0.5 +- 0.098
    e = mean_ci([0.0, 1.0] * 50)
    assert (
        e.value == 0.5
        and e.lo == pytest.approx(0.402, abs=0.03)
        and e.hi == pytest.approx(0.598, abs=0.03)
    )


def test_nan_items_are_dropped():
    assert mean_ci([1.0, float("nan"), 0.0]).n == 2


def test_seeded_and_deterministic():
    x = np.random.default_rng(5).normal(size=30)
    assert mean_ci(x) == mean_ci(x)
    assert mean_ci(x, seed=1) != mean_ci(x, seed=2)
    assert mean_ci(x).value == pytest.approx(float(np.mean(x)))
    assert B_DEFAULT == 2000


def test_tau_is_a_pooled_ratio_not_a_mean_of_item_taus():
    """accepted [3, 1] over rounds [1, 3]: tau = 1 + 4/4 = 2 (the mean of item taus would be (4 + 4/3)/2)."""
    e = tau_ci([3, 1], [1, 3])
    assert e.value == 2.0
    # resamples: {0,0} -> 4, {1,1} -> 1 + 1/3, {0,1} -> 2
    assert (e.lo, e.hi) == pytest.approx((1 + 1 / 3, 4.0))
    assert (
        tau_ci([0, 0], [0, 0]).value == 1.0
    )  # no drafts (AR): tau = 1 as runners.records.counters


def test_ratio_ci_share():
    e = ratio_ci([3, 3, 3], [4, 4, 4])
    assert (e.value, e.lo, e.hi) == (0.75, 0.75, 0.75)


def test_paired_speedup_is_narrower_than_unpaired():
    """Arm A is 1.1x arm B on every item while items differ 100x: paired interval has zero width, unpaired not."""
    b = np.array([1.0, 10.0, 100.0, 3.0, 30.0])
    a = 1.1 * b
    p, u = paired_speedup(a, b), unpaired_speedup(a, b)
    assert p.value == pytest.approx(1.1) and u.value == pytest.approx(1.1)
    assert (p.lo, p.hi) == pytest.approx((1.1, 1.1))
    assert u.hi - u.lo > 1.0


def test_paired_speedup_known_values():
    """SD [2, 4], DM [3, 5] tok/s: ratio of means 8/6; resamples give 3/2, 5/4, 8/6 -> [1.25, 1.5]."""
    e = paired_speedup([3.0, 5.0], [2.0, 4.0])
    assert e.value == pytest.approx(8 / 6) and (e.lo, e.hi) == pytest.approx((1.25, 1.5))
    with pytest.raises(ValueError, match="differ in length"):
        paired_speedup([1.0], [1.0, 2.0])


def test_repeat_spread():
    assert repeat_spread([[1.0, 1.2, 1.1], [2.0, 2.0, 2.0], [5.0]]) == pytest.approx(
        np.median([0.2 / 1.1, 0.0])
    )
    assert math.isnan(repeat_spread([[1.0], [2.0]]))


def test_fmt():
    assert fmt(Estimate(4.861, 4.512, 5.2, 10)) == "4.86 [4.51, 5.20]"
    assert fmt(Estimate(4.861, 4.512, 5.2, 10), 1, interval=False) == "4.9"
    assert fmt(Estimate(1.0, float("nan"), float("nan"), 3)) == "1.00"
    assert Estimate(0.5, 0.25, 0.75, 4).scaled(100.0) == Estimate(50.0, 25.0, 75.0, 4)


# Paired accuracy difference: Newcombe's hybrid score interval (method 10) and exact McNemar


def _items(n11: int, n10: int, n01: int, n00: int) -> tuple[list[float], list[float]]:
    """Per-item correctness of runs A and B that form the paired table (n11, n10, n01, n00)."""
    a = [1.0] * n11 + [1.0] * n10 + [0.0] * n01 + [0.0] * n00
    b = [1.0] * n11 + [0.0] * n10 + [1.0] * n01 + [0.0] * n00
    return a, b


def test_newcombe_paired_interval_on_a_published_table():
    """Cavo et al. (2012) complete response before/after consolidation, the worked example of Fagerland,
    Lydersen & Laake (2014) and of the contingencytables package (ch. 8): table [[59, 6], [16, 80]];
    Newcombe square-and-add: -0.0621 (95% CI -0.1186 to -0.0046); exact McNemar p = 0.052."""
    d, lo, hi = newcombe_paired_ci(59, 6, 16, 80)
    assert (round(d, 4), round(lo, 4), round(hi, 4)) == (-0.0621, -0.1186, -0.0046)
    # exact McNemar by hand: 2 * P(X <= 6), X ~ Bin(22, 1/2) = 2 * 110056 / 2**22
    assert mcnemar_exact_p(6, 16) == pytest.approx(2 * 110056 / 2**22, rel=1e-12)
    assert mcnemar_exact_p(16, 6) == mcnemar_exact_p(6, 16)
    a, b = _items(59, 6, 16, 80)
    diff = paired_accuracy(a, b)
    assert (diff.n, diff.n10, diff.n01) == (161, 6, 16)
    assert (diff.value, diff.lo, diff.hi) == pytest.approx((d, lo, hi))
    assert diff.p_mcnemar == pytest.approx(0.0525, abs=5e-5)


def test_wilson_interval_known_value():
    """Wilson (1927) for 0/10 at 95%: [0, z^2/(n + z^2)] = [0, 0.2775]."""
    lo, hi = wilson_ci(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1.959964**2 / (10 + 1.959964**2), rel=1e-6)


def test_no_discordant_item_keeps_a_nonzero_interval():
    """Identical correctness on 10 items: difference 0, but the interval is not [0, 0] (a paired bootstrap
    would claim certainty from ten items); it is symmetric and narrower than the unpaired one."""
    a, _ = _items(4, 0, 0, 6)
    diff = paired_accuracy(a, a, [("x",)] * 10, [("x",)] * 10).scaled(100.0)
    assert diff.value == 0.0 and diff.n_diverged == 0 and diff.p_mcnemar == 1.0
    assert diff.lo == pytest.approx(-diff.hi) and 5.0 < diff.hi < 30.0
    l1, u1 = wilson_ci(4, 10)
    assert diff.hi < 100.0 * math.hypot(
        u1 - 0.4, 0.4 - l1
    )  # unpaired square-and-add (phi = 0) is wider
    assert (
        paired_speedup([1.0] * 3, [1.0] * 3).lo == 1.0
    )  # (the bootstrap's degenerate case, for contrast)


def test_paired_accuracy_drops_unscored_items_and_counts_diverged_outputs():
    nan = float("nan")
    a = [1.0, 0.0, 1.0, nan, 1.0]
    b = [1.0, 1.0, 0.0, 1.0, nan]
    outs_a = [(1, 2), (3,), (4,), (5,), (6,)]
    outs_b = [(1, 2), (3, 9), (4, 8), (5,), (7,)]
    d = paired_accuracy(a, b, outs_a, outs_b)
    assert (d.n, d.n10, d.n01, d.value) == (3, 1, 1, 0.0)
    assert d.n_diverged == 2  # items 1 and 2; items 3 and 4 are not paired
    assert paired_accuracy(a, b, outs_a, [None] * 5).n_diverged is None
    assert math.isnan(paired_accuracy([nan], [1.0]).value)
    with pytest.raises(ValueError, match="correct_a has 2 items, correct_b 1"):
        paired_accuracy([1, 0], [1])
    with pytest.raises(ValueError, match="must be 0, 1 or NaN"):
        paired_accuracy([0.5], [1])
    with pytest.raises(ValueError, match="non-negative counts"):
        newcombe_paired_ci(0, 0, 0, 0)


def test_fmt_diff():
    a, b = _items(3, 0, 1, 6)
    d = paired_accuracy(a, b, list("abcdefghij"), list("abczefghij")).scaled(100.0)
    text = fmt_diff(d)
    assert text.startswith("-10.0 [") and text.endswith(", 1/10 differ")
    assert fmt_diff(NAN_DIFF) == ""


def test_fmt_spread_shows_no_interval_below_two_repeats():
    """One timing repeat has no spread: its recorded std 0.0 is not shown as ± 0.00 (seen in bench_batch.md)."""
    from analysis.stats import fmt_spread

    assert fmt_spread(5.383, 0.0, 1) == "5.38 (1 repeat, no interval)"
    assert fmt_spread(5.383, 0.1234, 3) == "5.38 ± 0.12"
    assert fmt_spread(5.383, float("nan"), 2) == "5.38 (2 repeats, no interval)"
    assert fmt_spread(float("nan"), 0.0, 1) == ""
