"""Select the runs an artefact reads and gather their per-position traces (Tables 2-3).

Selection is on run-record config fields only (never on file names or the informational ``artefact``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis.counter_checks import checked_samples
from analysis.head_stats import position_frame
from analysis.load import SETTING


def run_config(run_dir: str | Path) -> dict:
    return json.loads((Path(run_dir) / "config.json").read_text())


def select_runs(
    runs: pd.DataFrame,
    *,
    dataset: str | None,
    profile: str | None,
    pair: str | None,
    methods: Iterable[str],
    trace: bool | None = None,
    K: int | None = None,
) -> pd.DataFrame:
    """Runs of ``methods`` on ``dataset`` with ``profile``; one pair (the given one, else the most frequent).

    Args:
        runs: :func:`analysis.load.load_runs` output.
        trace: if not None, keep runs whose config ``trace`` equals it.
        K: if not None, keep runs with ``dropmatch.K == K``.

    Returns:
        The matching rows (a copy), with a ``trace`` column added.
    """
    if runs.empty:
        return runs.copy()
    sel = runs[runs["method"].isin(list(methods))]
    if dataset is not None:
        sel = sel[sel["dataset"] == dataset]
    if profile is not None:
        sel = sel[sel["profile"] == profile]
    if sel.empty:
        return sel.copy()
    sel = sel.copy()
    if "trace" not in sel:  # frames not from load_runs (which reads config.trace once)
        sel["trace"] = [bool(run_config(d).get("trace")) for d in sel["run_dir"]]
    if trace is not None:
        sel = sel[sel["trace"] == trace]
    if K is not None:
        sel = sel[sel["K"] == K]
    if sel.empty:
        return sel
    chosen = pair if pair is not None else sel["pair"].value_counts().index[0]
    return dedupe(sel[sel["pair"] == chosen])


IDENTITY = ("method", "p_drop", "K", "path", "L", "trace", "temperature", "seed")


def dedupe(runs: pd.DataFrame, keys: Iterable[str] = IDENTITY) -> pd.DataFrame:
    """One run per table cell: among runs equal on ``keys`` (e.g. made with other limits or code versions),
    keep the complete one whose setting (items and ``max_new_tokens``) the most runs of the table share, so the
    cells are comparable (e.g. Table 1's no-dropout row at the paths' cap, not at Table 6's), then the one with
    the most samples, then the newest."""
    if runs.empty:
        return runs
    keys = [k for k in keys if k in runs]
    setting = [c for c in SETTING if c in runs and c not in ("pair", "dataset")]
    pop = runs.groupby(setting, dropna=False)["run_id"].transform("size") if setting else 1
    order = runs.assign(_date=runs["date_utc"].fillna(""), _pop=pop).sort_values(
        ["complete", "_pop", "n", "_date"]
    )
    key_frame = order[keys].astype(str)
    return order[~key_frame.duplicated(keep="last")].drop(columns=["_date", "_pop"]).sort_index()


def trace_positions(runs: pd.DataFrame) -> pd.DataFrame:
    """Positions (:func:`analysis.head_stats.position_frame`) of every run, tagged with run_id, p_drop, L, K_run."""
    frames = []
    for row in runs.itertuples(index=False):
        pos = position_frame(checked_samples(Path(row.run_dir) / "samples.jsonl"))
        pos.insert(0, "run_id", row.run_id)
        pos["p_drop"], pos["L"] = row.p_drop, row.L
        frames.append(pos)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def n_line(runs: pd.DataFrame) -> str:
    """``n (samples per run): 2, 4`` of the runs a table was built from."""
    n = sorted({int(x) for x in runs["n"]}) if not runs.empty else []
    return f"n (samples per run): {', '.join(map(str, n)) or '-'}"
