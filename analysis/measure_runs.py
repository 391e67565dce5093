"""Select measurement runs (``method=latency | bench | similarity``) and read their summaries and lines.

Used by the artefacts built from measurement records (Table 4, the benchmark table, Fig. 3); pure reads.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.artefact import Profile, of_profile
from runners.records.io import get_number
from runners.records.record import read_samples


def of_method(runs: pd.DataFrame, profile: Profile, method: str) -> pd.DataFrame:
    """Complete runs of ``method`` of the profile (all profiles when its name is None)."""
    r = of_profile(runs, profile)
    if r.empty:
        return r
    return r[(r["method"] == method) & r["complete"].astype(bool)]


def summary_of(row: pd.Series) -> dict:
    """The run's ``summary.json``; a top-level ``null`` is NaN (a measurement summary's values are numbers, lists
    and text: ``null`` is how a NaN is written, :mod:`runners.records.io`)."""
    summary = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
    return {k: get_number(summary, k) for k in summary}


def lines_of(row: pd.Series) -> list[dict[str, Any]]:
    return read_samples(Path(row["run_dir"]) / "samples.jsonl")


def newest(
    runs: pd.DataFrame, key: Callable[[pd.Series, dict], tuple]
) -> list[tuple[pd.Series, dict]]:
    """The newest run per ``key(row, summary)`` (the cell a run fills, e.g. its pair, dtype and L).

    Returns:
        ``[(row, summary)]`` sorted by key (numbers numerically, other parts as text).
    """
    chosen: dict[tuple, tuple[pd.Series, dict]] = {}
    for _, row in runs.sort_values(["date_utc", "run_id"], ascending=False).iterrows():
        summ = summary_of(row)
        chosen.setdefault(key(row, summ), (row, summ))
    return [chosen[k] for k in sorted(chosen, key=_order)]


def used(chosen: list[tuple[pd.Series, Any]]) -> pd.DataFrame:
    """The run rows of ``chosen`` as a frame (an artefact's ``runs``)."""
    return pd.DataFrame([r for r, _ in chosen]).reset_index(drop=True)


def varying(frame: pd.DataFrame, columns: tuple[str, ...]) -> list[str]:
    """The ``columns`` of ``frame`` that take more than one value (label columns worth showing)."""
    return [c for c in columns if c in frame and frame[c].astype(str).nunique() > 1]


def _order(key: tuple) -> tuple:
    """Numbers in numeric order, anything else (dtype names, None) as text after them."""
    return tuple(
        (0, float(x), "")
        if isinstance(x, numbers.Real) and not isinstance(x, bool) and x == x
        else (1, 0.0, str(x))
        for x in key
    )
