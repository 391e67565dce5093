"""Did the host run at one speed across the runs a speed ratio divides? A check from the records alone.

A table's speedup divides the tok/s of two runs that were timed one after the other. On a shared or throttling
machine the host's own speed can change between them, and the ratio then carries that change. Two runs of the
same model, draft length and batch size make verify passes of the same shape, so their verify seconds per round
(``speed/verify_s`` over ``spec/counters.num_drafts``) should match; their ratio measures the host's change
between the two runs, whatever the decision rule.
"""

from __future__ import annotations

import math

import pandas as pd

# Above this relative change of the verify pass's cost between two runs the footer warns.
TOLERANCE = 0.10


def verify_per_round(run: pd.Series) -> float:
    """Verify seconds per round of one run (``verify_s / num_drafts``); NaN when the record lacks either."""
    v, n = run.get("verify_s"), run.get("num_drafts")
    if v is None or n is None or not n or (isinstance(v, float) and math.isnan(v)):
        return math.nan
    return float(v) / float(n)


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def drift_line(pairs: list[tuple[str, pd.Series, pd.Series]], what: str) -> list[str]:
    """Footer lines of the check: ``[]`` when no pair can be checked.

    Args:
        pairs: ``(label, run, reference run)``, two runs of the same model, L and batch size whose tok/s the table
            divides (``run`` over ``reference``).
        what: the ratio's name, e.g. ``"SD+DM vs SD"``.

    Returns:
        One line with each pair's verify-seconds-per-round ratio, plus a warning line when one is off by more
        than :data:`TOLERANCE`.
    """
    ratios = [(label, _ratio(verify_per_round(a), verify_per_round(b))) for label, a, b in pairs]
    ratios = [(label, r) for label, r in ratios if math.isfinite(r) and r > 0]
    if not ratios:
        return []
    lines = [
        f"host speed check ({what}): verify seconds per round of the run over its reference's (same model, L and "
        "batch: 1.00 = the host ran both at one speed; the tok/s ratio carries this factor): "
        + ", ".join(f"{label} {r:.2f}" for label, r in ratios)
    ]
    off = [label for label, r in ratios if abs(r - 1.0) > TOLERANCE]
    if off:
        lines.append(
            f"WARNING: the host's speed changed by more than {TOLERANCE:.0%} between the runs of {', '.join(off)}: "
            f"their {what} tok/s ratios measure the host as well as the rule (rerun them side by side, or read τ)"
        )
    return lines
