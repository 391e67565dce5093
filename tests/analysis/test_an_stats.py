"""analysis.stats: bootstrap intervals with known values (constant, two-point, ratio estimator, paired vs unpaired)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.stats import (
    B_DEFAULT,
    Estimate,
    fmt,
    mean_ci,
    paired_speedup,
    ratio_ci,
    repeat_spread,
    tau_ci,
    unpaired_speedup,
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
