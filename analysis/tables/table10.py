"""Table 10: EAGLE-3 vs standard SD + DropMatch on KoMT-Bench (out of distribution), L = 7.

Paper: DropMatch Table 10 (Sec. 4.5; target Llama-3.3-70B-Instruct, EAGLE-3 head vs the Llama-3.1-8B draft).
Rows: EAGLE3 (eagle3 pair, exact match), EAGLE3+DM (naive), SD (draft-model pair, exact match), SD+DM (the
DropMatch rule(s) that were run). Columns: tau, tok/s, speedup vs EAGLE3 (1.0x) and vs SD. Quality is
GPT-4-judged in the paper and not judged offline here.

    python -m analysis.tables.table10 [--profile default] [--L 7]
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis.load import load_runs
from analysis.render import provenance_lines, write_table
from analysis.tables.table7 import eagle_footer, select_eagle_runs

DATASET = "komt_bench"
METHOD_LABEL = {"sd": "", "dropmatch_naive": "+DM (naive)", "dropmatch": "+DM (JS)"}


def arm(row: pd.Series) -> str:
    return ("EAGLE3" if row["spec_method"] == "eagle3" else "SD") + METHOD_LABEL[row["method"]]


def build_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (spec_method, method): tau, tok/s, speedup vs EAGLE3 and vs SD."""
    if runs.empty:
        return pd.DataFrame()
    eagle = runs[(runs["spec_method"] == "eagle3") & (runs["method"] == "sd")]
    sd = runs[(runs["spec_method"] == "draft_model") & (runs["method"] == "sd")]
    order = {"EAGLE3": 0, "EAGLE3+DM (naive)": 1, "EAGLE3+DM (JS)": 2, "SD": 3, "SD+DM (naive)": 4, "SD+DM (JS)": 5}
    rows = []
    for _, r in runs.iterrows():
        tps = float(r["tok_per_s"])
        rows.append({
            "Method": arm(r), "Pair": r["pair"], "L": int(r["L"]), "n": int(r["n"]),
            "τ": f"{float(r['tau']):.2f}", "tok/s": f"{tps:.2f}",
            "vs EAGLE3": f"{tps / float(eagle.iloc[0]['tok_per_s']):.2f}×" if not eagle.empty else "",
            "vs SD": f"{tps / float(sd.iloc[0]['tok_per_s']):.2f}×" if not sd.empty else "",
        })
    return pd.DataFrame(rows).sort_values("Method", key=lambda s: s.map(order)).reset_index(drop=True)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default", help="profile whose runs to tabulate ('any' for all)")
    ap.add_argument("--L", type=int, default=7)
    ap.add_argument("--p-drop", type=float, default=0.3)
    ap.add_argument("--K", type=int, default=5)
    a = ap.parse_args(argv)
    all_runs = load_runs()
    runs = select_eagle_runs(all_runs, None if a.profile == "any" else a.profile, (DATASET,), METHOD_LABEL,
                             a.p_drop, a.K, spec_method=None)
    runs = runs[runs["L"] == a.L] if not runs.empty else runs
    table = build_table(runs)
    if table.empty:
        print(f"[table10] no complete runs on {DATASET} for profile={a.profile} L={a.L}; run ./reproduce.sh table10")
        return table
    footer = [
        f"KoMT-Bench (Korean MT-Bench, first turn), L={a.L}, greedy, vLLM, batch size 1; EAGLE3 = eagle3 drafting, "
        f"SD = draft-model drafting; +DM = DropMatch, p_drop={a.p_drop}, K={a.K}.",
        *eagle_footer(runs, all_runs, {DATASET: "KoMT-Bench"}),
        *provenance_lines(runs),
    ]
    write_table(table, "table10", title="Table 10: EAGLE3 vs SD + DropMatch on KoMT-Bench", footer=footer)
    return table


if __name__ == "__main__":
    main()
