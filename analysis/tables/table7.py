"""Table 7: EAGLE-3 vs EAGLE-3 + DropMatch (naive token matching) on GSM8K, MT-Bench, Alpaca across L.

Paper: DropMatch Table 7 (Llama-3.3-70B-Instruct + yuhuili/EAGLE3-LLaMA3.3-Instruct-70B, 80 questions per
set, p_drop = 0.3, K = 5; Sec. 4.4). Rows: (pair, L, method) with EAGLE3 = exact match (method ``sd`` with an
eagle3 pair) and EAGLE3+DM = ``dropmatch_naive`` (Eq. 4). Columns per set: quality, tau, tok/s and speedup vs
EAGLE3 at the same L (1.0x). Quality: GSM8K exact match on the final number (%); MT-Bench and Alpaca are
GPT-4-judged in the paper, not judged offline here.

    python -m analysis.tables.table7 [--profile default]
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis.load import load_runs
from analysis.render import provenance_lines, write_table
from analysis.equality import equality_footer

BENCHMARKS = ("eagle_gsm8k", "mt_bench", "alpaca")
BENCH_LABEL = {"eagle_gsm8k": "GSM8K", "mt_bench": "MT-Bench", "alpaca": "Alpaca"}
METHOD_LABEL = {"sd": "EAGLE3", "dropmatch_naive": "EAGLE3+DM"}

RANDOM_HEAD_NOTE = "EAGLE3 head: random init (mechanism check, not a speed claim)"
SMALL_N = 30


def select_eagle_runs(runs: pd.DataFrame, profile: str | None, datasets, methods, p_drop: float, K: int,
                      spec_method: str | None = "eagle3") -> pd.DataFrame:
    """Complete greedy vLLM runs on ``datasets`` of ``methods`` (DM at p_drop, K); latest, largest n per cell.

    ``spec_method`` keeps only runs with that drafting (``eagle3``); None keeps both kinds.
    """
    if runs.empty:
        return runs
    r = runs[(runs["temperature"] == 0.0) & (runs["backend"] == "vllm") & runs["dataset"].isin(list(datasets))
             & runs["method"].isin(list(methods)) & (runs["L"] > 0) & (runs["batch_size"] == 1) & runs["complete"]]
    if spec_method is not None:
        r = r[r["spec_method"] == spec_method]
    if profile is not None:
        r = r[r["profile"] == profile]
    dm = r["method"].str.startswith("dropmatch")
    r = r[~dm | ((r["p_drop"].astype(float) == p_drop) & (r["K"] == K))]
    r = r.sort_values(["n", "date_utc"], ascending=[False, False])
    return r.drop_duplicates(["pair", "dataset", "method", "L"])


def fmt_cell(label: str, cell: pd.DataFrame, base: pd.DataFrame, *, graded: bool) -> dict:
    """Columns of one set: quality (GSM8K exact match % or "n.j."), tau, tok/s, speedup vs ``base`` (EAGLE3)."""
    if cell.empty:
        return {f"{label} Q": "pending", f"{label} τ": "", f"{label} tok/s": "", f"{label} speedup": ""}
    c = cell.iloc[0]
    acc = c["accuracy"]
    q = f"{100.0 * float(acc):.1f}" if graded and acc is not None and not pd.isna(acc) else "n.j."
    speed = f"{float(c['tok_per_s']) / float(base.iloc[0]['tok_per_s']):.2f}×" if not base.empty else ""
    return {f"{label} Q": q, f"{label} τ": f"{float(c['tau']):.2f}", f"{label} tok/s": f"{float(c['tok_per_s']):.2f}",
            f"{label} speedup": speed}


def eagle_footer(runs: pd.DataFrame, all_runs: pd.DataFrame, labels: dict) -> list[str]:
    """Footer lines shared by Tables 7 and 10: n, quality note, random-head note, equality check."""
    lines = []
    if runs.empty:
        return lines
    ns = runs.groupby("dataset")["n"].max()
    caps = runs.groupby("dataset")["max_new_tokens"].max()
    lines.append("samples: " + ", ".join(f"{labels.get(d, d)} n={int(n)} (max_new_tokens {int(caps[d])})"
                                        for d, n in ns.items()) + "; first turn only (EAGLE answers turn 2 too)")
    judged = [labels.get(d, d) for d in ns.index if d != "eagle_gsm8k"]
    if judged:
        lines.append(f"quality: not judged offline ({', '.join(judged)}: the paper uses GPT-4 as judge); n.j. = not judged")
    if "eagle_gsm8k" in ns.index:
        lines.append("GSM8K quality: exact match of the last number vs the reference's #### N "
                     "(lm-eval gsm8k flexible-extract), %")
    if "eagle3_random_head" in runs and runs["eagle3_random_head"].astype(bool).any():
        lines.append(RANDOM_HEAD_NOTE)
    if int(ns.max()) < SMALL_N:
        lines.append(f"NOTE: n < {SMALL_N} and short outputs (CPU budget): numbers are not significant")
    lines.extend(equality_footer(runs, all_runs))
    return lines



def build_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per (pair, L, method); per set: quality, tau, tok/s, speedup vs EAGLE3 at that L."""
    rows = []
    if runs.empty:
        return pd.DataFrame()
    for (pair, L), g in runs.groupby(["pair", "L"], sort=True):
        for method, label in METHOD_LABEL.items():
            if not (g["method"] == method).any():
                continue
            row = {"Pair": pair, "L": int(L), "Method": label}
            for b in BENCHMARKS:
                cell = g[(g["dataset"] == b) & (g["method"] == method)]
                base = g[(g["dataset"] == b) & (g["method"] == "sd")]
                row.update(fmt_cell(BENCH_LABEL[b], cell, base, graded=b == "eagle_gsm8k"))
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default", help="profile whose runs to tabulate ('any' for all)")
    ap.add_argument("--p-drop", type=float, default=0.3)
    ap.add_argument("--K", type=int, default=5)
    a = ap.parse_args(argv)
    all_runs = load_runs()
    runs = select_eagle_runs(all_runs, None if a.profile == "any" else a.profile, BENCHMARKS, METHOD_LABEL,
                             a.p_drop, a.K, spec_method="eagle3")
    table = build_table(runs)
    if table.empty:
        print(f"[table7] no complete eagle3 runs for profile={a.profile}; run ./reproduce.sh table7 first")
        return table
    footer = [
        f"EAGLE3 = vLLM eagle3 drafting, exact match (greedy); EAGLE3+DM = DropMatch naive token matching (Eq. 4), "
        f"p_drop={a.p_drop}, K={a.K}; speedup vs EAGLE3 at the same L (1.0×); batch size 1.",
        *eagle_footer(runs, all_runs, BENCH_LABEL),
        *provenance_lines(runs),
    ]
    write_table(table, "table7", title="Table 7: EAGLE3 vs EAGLE3 + DropMatch", footer=footer)
    return table


if __name__ == "__main__":
    main()
