"""Table 5: throughput of SD vs SD + DropMatch across batch sizes (GSM8K, L = 10), SD = 1.0x.

Paper: DropMatch Table 5 (Llama-3.1-8B -> 70B, vLLM, TP = 4, batch sizes 1..128; DM ~1.10x throughout).
Throughput of a run at batch size B = output tokens / wall seconds of its ``llm.generate`` batches. The
vLLM backend records each sample's ``wall_s`` as its batch's wall time, so with full batches (n a
multiple of B) this is ``B * speed/tok_per_s_total``; a run with a partial batch is flagged. Columns per
batch size: SD tok/s, DM tok/s, DM / SD, and tau of both.

    python -m analysis.tables.table5 [--profile default] [--L 10]
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis.equality import equality_footer
from analysis.load import load_runs, one_setting
from analysis.render import provenance_lines, write_table

METHOD_LABEL = {"sd": "SD", "dropmatch": "SD+DM"}
DATASET_LABEL = {"gsm8k": "GSM8K 8-shot CoT", "eagle_gsm8k": "GSM8K zero-shot (EAGLE's 80)"}


def select_runs(runs: pd.DataFrame, profile: str | None, L: int, p_drop: float, K: int,
                datasets: tuple[str, ...] = ("gsm8k", "eagle_gsm8k")) -> pd.DataFrame:
    """Complete greedy vLLM runs of SD / DM (at p_drop, K) on a GSM8K set at draft length ``L``.

    All cells of a (pair, dataset) come from one setting (same items and cap; :func:`analysis.load.one_setting`).
    """
    if runs.empty:
        return runs
    r = runs[(runs["temperature"] == 0.0) & (runs["backend"] == "vllm") & runs["dataset"].isin(list(datasets))
             & runs["method"].isin(METHOD_LABEL) & (runs["L"] == L) & runs["complete"]]
    if "spec_method" in r:
        r = r[r["spec_method"] == "draft_model"]
    if profile is not None:
        r = r[r["profile"] == profile]
    dm = r["method"] == "dropmatch"
    r = r[~dm | ((r["p_drop"].astype(float) == p_drop) & (r["K"] == K))]
    return one_setting(r, cell=("method", "batch_size"))


def throughput(row: pd.Series) -> float:
    """Output tokens per wall second of the run's batches (see module docstring)."""
    return float(row["batch_size"]) * float(row["tok_per_s_total"])


def build_table(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(table, notes): one row per (pair, batch size); notes name runs with a partial last batch."""
    rows, notes = [], []
    for (pair, ds, B), g in runs.groupby(["pair", "dataset", "batch_size"], sort=True):
        cells = {m: g[g["method"] == m].iloc[0] for m in METHOD_LABEL if (g["method"] == m).any()}
        for m, c in cells.items():
            if int(c["n"]) % int(B):
                notes.append(f"{pair} {METHOD_LABEL[m]} B={B}: n={int(c['n'])} is not a multiple of B "
                             "(last batch partial; throughput approximate)")
        sd, dm = cells.get("sd"), cells.get("dropmatch")
        row = {"Pair": pair, "Dataset": DATASET_LABEL.get(ds, ds), "Batch size": int(B),
               "SD tok/s": f"{throughput(sd):.2f}" if sd is not None else "pending",
               "SD+DM tok/s": f"{throughput(dm):.2f}" if dm is not None else "pending",
               "SD": "1.00×" if sd is not None else "",
               "SD+DM": f"{throughput(dm) / throughput(sd):.2f}×" if sd is not None and dm is not None else "",
               "SD τ": f"{float(sd['tau']):.2f}" if sd is not None else "",
               "SD+DM τ": f"{float(dm['tau']):.2f}" if dm is not None else "",
               "n": int(max(c["n"] for c in cells.values()))}
        rows.append(row)
    return pd.DataFrame(rows), notes


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default", help="profile whose runs to tabulate ('any' for all)")
    ap.add_argument("--L", type=int, default=10)
    ap.add_argument("--p-drop", type=float, default=0.3)
    ap.add_argument("--K", type=int, default=5)
    a = ap.parse_args(argv)
    runs = select_runs(load_runs(), None if a.profile == "any" else a.profile, a.L, a.p_drop, a.K)
    table, notes = build_table(runs)
    if table.empty:
        print(f"[table5] no complete runs for profile={a.profile} L={a.L}; run ./reproduce.sh table5 first")
        return table
    footer = [
        f"L={a.L}, greedy; SD = exact match (1.0× baseline per batch size), SD+DM = DropMatch "
        f"JS rule (Eq. 5-7), p_drop={a.p_drop}, K={a.K}; vLLM, batch size = prompts per llm.generate call.",
        "throughput: output tokens / wall seconds of the batches (prefill included); τ = 1 + accepted/rounds.",
        f"max_new_tokens: {int(runs['max_new_tokens'].max())}; n per run as shown"
        + ("; NOTE: tiny n and short outputs (CPU budget): ratios are noisy" if int(runs["n"].max()) < 30 else ""),
        *equality_footer(runs),
        *notes,
        *provenance_lines(runs),
    ]
    write_table(table, "table5", title="Table 5: throughput vs batch size, SD vs SD + DropMatch", footer=footer)
    return table


if __name__ == "__main__":
    main()
