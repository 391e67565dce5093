"""Which cost regime a table's SD-over-AR speed ratios were made in, from the runs' own records.

A speculative round costs L draft steps and one verify pass of L + 1 tokens and commits τ tokens; an AR step costs
one decode step and commits one. So SD's tokens/s over AR's is at most ``τ / (v + L·c)``, where
``v = verify(L+1) / decode`` and ``c`` is a draft step over a target step. Where a verify pass costs about one
decode step (a large model at small batch on a GPU: memory-bound, the regime the paper's speedups come from)
``v ≈ 1``; on a CPU, or at a batch that makes the pass compute-bound, ``v`` is several, and the same τ buys
less. The line this module writes gives ``v`` as the table's runs measured it, so nobody reads a compute-bound
machine's SD/AR ratio as a claim about GPUs.

``v`` of one benchmark = (Σ verify seconds / Σ verify passes of the SD run) / (the same of the AR run), over the
items (:func:`analysis.load.load_items`: an item's ``verify_s`` is the whole batch's pass of each round it was
in, so both means weigh a pass by the rows in it, alike in both runs). The two runs were timed one after the other,
so a change of the host's speed between them enters ``v`` (the table's host speed check measures it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd


def per_pass(items: pd.DataFrame) -> float:
    """Verify seconds per verify pass over a run's items; NaN without passes or timings."""
    if items.empty or "verify_s" not in items or items["verify_s"].isna().any():
        return math.nan
    passes = int(items["verify_passes"].sum())
    return float(items["verify_s"].sum()) / passes if passes > 0 else math.nan


def verify_step_ratio(sd_items: pd.DataFrame, ar_items: pd.DataFrame) -> float:
    """``v`` = verify(L+1) / decode step: SD's seconds per verify pass over AR's (module docstring); NaN when
    either run lacks the timings."""
    sd, ar = per_pass(sd_items), per_pass(ar_items)
    return sd / ar if math.isfinite(sd) and math.isfinite(ar) and ar > 0 else math.nan


def regime_line(ratios: Sequence[tuple[str, float]], L: int, batch: str) -> list[str]:
    """The footer line: ``[]`` when no benchmark has both runs timed.

    Args:
        ratios: ``(benchmark label, v)`` per benchmark (NaN ones are left out).
        L: the SD runs' draft length; batch: the runs' batch size as text (``"10"``).
    """
    ok = [(label, v) for label, v in ratios if math.isfinite(v) and v > 0]
    if not ok:
        return []
    lo, hi = min(v for _, v in ok), max(v for _, v in ok)
    span = f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"
    return [
        f"cost regime: a verify pass of L+1 = {L + 1} tokens at batch {batch} cost {span}x an AR decode step on "
        "this machine ("
        + ", ".join(f"{label} {v:.2f}" for label, v in ok)
        + "; SD run's verify seconds per pass over the AR run's). SD's tok/s over AR is at most τ / (v + L·c), v "
        "that ratio and c a draft step over a target decode step, so the SD vs AR ratios above are this machine's "
        "regime; the paper's speedups come from GPUs where a verify pass costs about one decode step "
        "(memory-bound): compare τ, not tok/s, with them"
    ]
