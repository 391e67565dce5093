"""Table 1: HumanEval pass@1 of each single MC-dropout decoding path at p_drop = 0.1 / 0.3 / 0.5, next to
the target without dropout and the draft alone.

Paper: DropMatch (arXiv 2603.03333) Table 1 (Llama-3.1-70B-Instruct paths H1-H5; target without dropout
81.7, Llama-3.1-8B-Instruct draft 72.6 -- the numbers the caption states).

    python -m runners.main -m experiment=table1
    python -m analysis.tables.table1 [--profile default] [--pair NAME]
Writes results/table1/table1.{md,csv,tex} (wide: one row per decoder, one column per p_drop) and
results/table1/table1_runs.csv (long: one row per run).
"""

from __future__ import annotations

import math
import sys
from typing import Iterable

import pandas as pd

from analysis.render import artefact_dir
from analysis.traces import cli, footer, load, write_artefact

METHODS = ("ar", "draft_only", "dropout_path")
PAPER = {"target (no dropout)": 81.7, "draft alone": 72.6}  # Table 1 caption, pass@1 (%)
NO_DROPOUT = "without dropout"


def pct(v: float | None) -> float:
    return math.nan if v is None or pd.isna(v) else 100.0 * float(v)


def build(runs: pd.DataFrame) -> pd.DataFrame:
    """Wide Table 1: rows H1..HK, mean over paths, target, draft; columns ``p_drop=<p>`` and ``without dropout``.

    Cells are pass@1 in percent (``quality/accuracy`` of each run: EvalPlus pass@1 on the base tests).
    """
    paths = runs[runs["method"] == "dropout_path"]
    ps = sorted({float(p) for p in paths["p_drop"]})
    cols = [f"p_drop={p:g}" for p in ps]
    rows = []
    for i in sorted({int(x) for x in paths["path"]}):
        row = {"decoder": f"H{i}"}
        for p, col in zip(ps, cols):
            hit = paths[(paths["path"] == i) & (paths["p_drop"].astype(float) == p)]
            row[col] = pct(hit["accuracy"].iloc[0]) if len(hit) else math.nan
        rows.append(row)
    if rows:
        mean = {"decoder": "mean over paths"}
        for p, col in zip(ps, cols):
            vals = paths[paths["p_drop"].astype(float) == p]["accuracy"].dropna()
            mean[col] = pct(vals.mean()) if len(vals) else math.nan
        rows.append(mean)
    for method, name in (("ar", "target (no dropout)"), ("draft_only", "draft alone")):
        hit = runs[runs["method"] == method]
        rows.append({"decoder": name, NO_DROPOUT: pct(hit["accuracy"].iloc[0]) if len(hit) else math.nan})
    out = pd.DataFrame(rows, columns=["decoder", *cols, NO_DROPOUT])
    out["paper"] = [PAPER.get(d, math.nan) for d in out["decoder"]]
    return out


def format_table(t: pd.DataFrame) -> pd.DataFrame:
    f = t.copy()
    for c in f.columns[1:]:
        f[c] = f[c].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    return f.rename(columns={"paper": "paper (70B / 8B)"})


def main(argv: Iterable[str] | None = None) -> int:
    args = cli("Table 1: pass@1 of single MC-dropout paths on HumanEval", argv, dataset="humaneval")
    runs = load(args.profile, args.dataset, args.pair, METHODS)
    if not runs.empty:
        runs = runs[runs["temperature"] == 0.0]
    if runs.empty:
        print(f"no ar/draft_only/dropout_path runs on {args.dataset} (profile={args.profile}); "
              "run: python -m runners.main -m experiment=table1", file=sys.stderr)
        return 1
    t = build(runs)
    long = runs[["run_id", "method", "p_drop", "path", "n", "complete", "accuracy", "num_output_tokens", "tok_per_s",
                 "max_new_tokens"]].sort_values(["method", "p_drop", "path"])
    long.to_csv(artefact_dir("table1") / "table1_runs.csv", index=False)
    notes = ["pass@1 (%) = EvalPlus pass@1 on HumanEval's base tests, greedy; H_i = target decoding along MC-dropout "
             "path i alone (fresh mask per step, Eq. 1-3)",
             f"max_new_tokens: {', '.join(str(int(x)) for x in sorted(set(runs['max_new_tokens'].dropna())))}",
             "paper: Llama-3.1-70B-Instruct target 81.7, Llama-3.1-8B-Instruct draft 72.6 (caption)"]
    write_artefact(t, format_table(t), "table1", title="Table 1: HumanEval pass@1 (%) of single MC-dropout paths",
                footer=footer(runs, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
