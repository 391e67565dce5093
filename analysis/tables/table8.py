"""Table 8: Auto-Judge vs Auto-Judge + DropMatch on GSM8K 8-shot across judge thresholds, with SD rows.

Paper: DropMatch Table 8 (Llama-3.1-8B/70B, batch size 1; AJ at L=32; DM p_drop=0.3, K=5; SD at L=8 and 32
as reference; AJ+DM 1.06-1.29x AJ and 1.44-2.11x SD). Rows: SD at each L run, then per threshold AJ and AJ+DM.
Columns: accuracy (%), tau, tokens/s, and the paired speedups (tokens/s ratios of runs on the same items):
AJ+DM vs AJ at the same threshold, AJ / AJ+DM vs SD at each L.

    python -m analysis.tables.table8 [--profile default] [--dataset gsm8k] [--p-drop 0.3]
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis.autojudge import judge_footer, points, select
from analysis.load import load_runs
from analysis.render import provenance_lines, write_table


def build_table(pts: pd.DataFrame, p_drop: float) -> pd.DataFrame:
    sd = pts[pts["method"] == "SD"].sort_values("L")
    aj = pts[pts["method"] == "AJ"]
    dm = pts[(pts["method"] == "AJ+DM") & (pts["p_drop"] == p_drop)]
    counts = pd.concat([aj["L"], dm["L"]]).value_counts()  # the L with the most AJ / AJ+DM runs (ties: largest)
    L_aj = int(max(counts.index, key=lambda L: (counts[L], L))) if len(counts) else 0
    rows = []

    def row(r, vs_aj=None):
        out = {"Method": r["method"], "L": int(r["L"]), "Threshold": "–" if pd.isna(r["threshold"]) else f"{r['threshold']:g}",
               "Acc (%)": f"{r['accuracy']:.1f}", "τ": f"{r['tau']:.2f}", "tok/s": f"{r['tok_per_s']:.2f}",
               "vs AJ": "" if vs_aj is None else f"{r['tok_per_s'] / vs_aj:.2f}×"}
        for _, s in sd.iterrows():
            out[f"vs SD L={int(s['L'])}"] = "" if r["method"] == "SD" else f"{r['tok_per_s'] / s['tok_per_s']:.2f}×"
        return out

    for _, s in sd.iterrows():
        rows.append(row(s))
    for thr in sorted(set(aj["threshold"]) | set(dm["threshold"])):
        a = aj[(aj["threshold"] == thr) & (aj["L"] == L_aj)]
        d = dm[(dm["threshold"] == thr) & (dm["L"] == L_aj)]
        if not a.empty:
            rows.append(row(a.iloc[0]))
        if not d.empty:
            rows.append(row(d.iloc[0], vs_aj=float(a.iloc[0]["tok_per_s"]) if not a.empty else None))
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default", help="profile whose runs to tabulate ('any' for all)")
    ap.add_argument("--dataset", default="gsm8k")
    ap.add_argument("--p-drop", type=float, default=0.3)
    ap.add_argument("--stem", default="table8")
    a = ap.parse_args(argv)
    runs = select(load_runs(), a.dataset, None if a.profile == "any" else a.profile)
    pts = points(runs) if not runs.empty else pd.DataFrame()
    table = build_table(pts, a.p_drop) if not pts.empty else pd.DataFrame()
    if table.empty:
        print(f"[{a.stem}] no complete SD / Auto-Judge runs on {a.dataset} for profile={a.profile}; run ./reproduce.sh {a.stem}")
        return table
    used = runs[runs["run_id"].isin(pts["run_id"])]
    thresholds = sorted(t for t in pts["threshold"].dropna().unique())
    footer = [
        f"{a.dataset}, greedy, batch size 1; AJ = Auto-Judge (exact match, or the judge's p_important < threshold); "
        f"AJ+DM = AJ OR DropMatch JS rule (Algorithm 1), p_drop={a.p_drop}, K={int(runs['K'].dropna().max()) if runs['K'].notna().any() else 5}; "
        "τ = 1 + accepted/rounds.",
        "speedups: ratio of mean per-sample tokens/s (prefill excluded) of runs on the same items, same machine",
        f"samples: n={int(pts['n'].max())}; max_new_tokens {int(runs['max_new_tokens'].max())}; thresholds: "
        + ", ".join(f"{t:g}" for t in thresholds),
        *judge_footer(used, thresholds),
        *provenance_lines(used),
    ]
    if int(pts["n"].max()) < 30:
        footer.append("NOTE: n < 30 (CPU budget): accuracy differences are not significant; paper: whole test set, AJ at L=32")
    write_table(table, a.stem, title=f"Table 8: Auto-Judge vs Auto-Judge + DropMatch ({a.dataset})", footer=footer, stem=a.stem)
    return table


if __name__ == "__main__":
    main()
