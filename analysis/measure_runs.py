"""Select measurement runs (``method=latency | bench | similarity``) and read their summaries, for the tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pandas as pd


def newest_complete(runs: pd.DataFrame, method: str, profile: str | None, pair: str | None,
                    key: Callable[[pd.Series, dict], tuple]) -> list[tuple[pd.Series, dict]]:
    """Complete runs of ``method`` of one pair (the given one, else the most frequent), the newest per ``key``.

    Args:
        runs: :func:`analysis.load.load_runs` rows.
        key: ``key(row, summary)`` -> the cell a run fills (e.g. its dtype and L).

    Returns:
        ``[(row, summary)]`` sorted by key (numbers numerically, other parts as text).
    """
    if runs.empty:
        return []
    sel = runs[(runs["method"] == method) & runs["complete"]]
    if profile is not None:
        sel = sel[sel["profile"] == profile]
    if sel.empty:
        return []
    sel = sel[sel["pair"] == (pair or sel["pair"].value_counts().index[0])].sort_values("date_utc", ascending=False)
    chosen: dict[tuple, tuple[pd.Series, dict]] = {}
    for _, row in sel.iterrows():
        summ = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        chosen.setdefault(key(row, summ), (row, summ))
    return [chosen[k] for k in sorted(chosen, key=_order)]


def _order(key: tuple) -> tuple:
    """Numbers in numeric order, anything else (dtype names, None) as text after them."""
    return tuple((0, float(x), "") if isinstance(x, (int, float)) and not isinstance(x, bool) else (1, 0.0, str(x))
                 for x in key)
