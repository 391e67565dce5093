"""Table 1: HumanEval pass@1 of each single MC-dropout decoding path at p_drop = 0.1 / 0.3 / 0.5, next to
the target without dropout and the draft alone.

Paper: DropMatch (arXiv 2603.03333) Table 1 (Llama-3.1-70B-Instruct paths H1-H5; target without dropout
81.7, Llama-3.1-8B-Instruct draft 72.6 -- the numbers the caption states).

    python -m runners.main -m experiment=table1
    python -m analysis.render table1 --profile default
Writes results/table1/table1.* (wide: one row per decoder, one column per p_drop, each cell pass@1 % with
its 95 % bootstrap interval over problems; CSV columns ``<col>``, ``<col>_lo``, ``<col>_hi``) and
results/table1/table1_runs.* (long: one row per run).
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.artefact import Artefact, Profile, Table, of_profile, pick_backend
from analysis.cells import CI_NOTE, ItemCache
from analysis.footer import provenance_lines, quality_lines
from analysis.stats import NAN, Estimate, fmt, mean_ci
from analysis.traces import n_line, select_runs

NAME = "table1"
DATASET = "humaneval"
METHODS = ("ar", "draft_only", "dropout_path")
PAPER = {"target (no dropout)": 81.7, "draft alone": 72.6}  # Table 1 caption, pass@1 (%)
NO_DROPOUT = "without dropout"


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Greedy AR / draft-only / single-path runs on HumanEval of the profile; one pair, one run per cell."""
    r = of_profile(runs, profile)
    r = pick_backend(r[r["temperature"] == 0.0], profile, default="hf")
    return select_runs(r, dataset=DATASET, profile=None, pair=None, methods=METHODS)


def _pass(cache: ItemCache, runs: pd.DataFrame) -> Estimate:
    """pass@1 (%) over the problems of ``runs`` (several runs: per-problem mean over them, then over problems)."""
    if runs.empty:
        return NAN
    items = pd.concat([cache.items(r) for _, r in runs.iterrows()])
    per_problem = items.groupby("sample_id")["correct"].mean()
    return mean_ci(per_problem.to_numpy()).scaled(100.0) if per_problem.notna().any() else NAN


def estimates(
    runs: pd.DataFrame, cache: ItemCache
) -> tuple[list[str], list[tuple[str, dict[str, Estimate]]]]:
    """(columns, [(decoder, {column: pass@1 estimate})]) of the wide table."""
    paths = runs[runs["method"] == "dropout_path"]
    ps = sorted({float(p) for p in paths["p_drop"]})
    cols = [f"p_drop={p:g}" for p in ps]
    rows = []
    for i in sorted({int(x) for x in paths["path"]}):
        rows.append(
            (
                f"H{i}",
                {
                    c: _pass(
                        cache, paths[(paths["path"] == i) & (paths["p_drop"].astype(float) == p)]
                    )
                    for p, c in zip(ps, cols)
                },
            )
        )
    if rows:
        rows.append(
            (
                "mean over paths",
                {
                    c: _pass(cache, paths[paths["p_drop"].astype(float) == p])
                    for p, c in zip(ps, cols)
                },
            )
        )
    for method, name in (("ar", "target (no dropout)"), ("draft_only", "draft alone")):
        rows.append((name, {NO_DROPOUT: _pass(cache, runs[runs["method"] == method])}))
    return [*cols, NO_DROPOUT], rows


def tables(runs: pd.DataFrame, cache: ItemCache | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(numbers, display) of the wide Table 1: pass@1 (%) with ``_lo``/``_hi`` columns; paper values."""
    cols, rows = estimates(runs, cache or ItemCache())
    data, display = [], []
    for name, cells in rows:
        d, s = {"decoder": name}, {"decoder": name}
        for c in cols:
            e = cells.get(c, NAN)
            d.update({c: e.value, f"{c}_lo": e.lo, f"{c}_hi": e.hi})
            s[c] = fmt(e, 1)
        d["paper"] = PAPER.get(name, math.nan)
        s["paper (70B / 8B)"] = "" if math.isnan(d["paper"]) else f"{d['paper']:.1f}"
        data.append(d)
        display.append(s)
    return pd.DataFrame(data), pd.DataFrame(display)


def build(selected: pd.DataFrame) -> Artefact:
    runs = selected
    data, display = tables(runs)
    long = (
        runs[
            [
                "run_id",
                "method",
                "p_drop",
                "path",
                "n",
                "complete",
                "accuracy",
                "num_output_tokens",
                "tok_per_s",
                "max_new_tokens",
            ]
        ]
        .sort_values(["method", "p_drop", "path"])
        .reset_index(drop=True)
    )
    caps = ", ".join(str(int(x)) for x in sorted(set(runs["max_new_tokens"].dropna())))
    footer = [
        n_line(runs),
        "pass@1 (%) on HumanEval, greedy (the scorer's metric below); H_i = target decoding along MC-dropout "
        "path i alone (fresh mask per step, Eq. 1-3)",
        *quality_lines(runs),
        f"cells: {CI_NOTE.split(';')[0]} (problems); mean over paths = per-problem mean over the paths, then "
        "over problems",
        f"max_new_tokens: {caps}",
        "paper: Llama-3.1-70B-Instruct target 81.7, Llama-3.1-8B-Instruct draft 72.6 (caption)",
        *provenance_lines(runs),
    ]
    fmt_long = long.round(3).astype(object).where(long.notna(), "")
    return Artefact(
        NAME,
        tables=[
            Table(
                "table1",
                "Table 1: HumanEval pass@1 (%) of single MC-dropout paths",
                data,
                display,
                footer,
            ),
            Table(
                "table1_runs",
                "Table 1: the runs (one row per run)",
                long,
                fmt_long,
                provenance_lines(runs),
            ),
        ],
        runs=runs,
    )


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
