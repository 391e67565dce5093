"""Table 2: agreement patterns of the K = 5 MC-dropout heads on HumanEval, and the mean target
probability of the majority token per pattern, from the per-position traces of DropMatch runs.

Paper: DropMatch (arXiv 2603.03333) Table 2 (Llama-3.1-70B-Instruct, HumanEval, K = 5): all five heads
agree in 98.4% of cases (the only number the text states; the paper's Table 2 body is beside it).

    python -m runners.main -m experiment=table2      # DM runs with trace=true (conf/experiment/table2.yaml)
    python -m analysis.render table2 --profile default
Writes results/table2/table2.* (one block of rows per (p_drop, L) found; frequency with its 95 % bootstrap
interval over samples).
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.artefact import Artefact, Profile, Table, of_profile, pick_backend
from analysis.footer import provenance_lines
from analysis.head_stats import pattern_table, share_ci
from analysis.stats import B_DEFAULT, SEED, Estimate, fmt
from analysis.traces import n_line, select_runs, trace_positions
from criteria.divergence import agreement_pattern_names

NAME = "table2"
DATASET = "humaneval"
K = 5
PAPER_FREQUENCY_PCT = {"5": 98.4}  # Sec. 3.2 text; other cells of the paper's table not transcribed
METHODS = ("dropmatch",)
COLUMNS = [
    "p_drop",
    "L",
    "pattern",
    "count",
    "frequency_pct",
    "frequency_pct_lo",
    "frequency_pct_hi",
    "mean_majority_target_prob",
    "paper_frequency_pct",
]


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """DropMatch runs on HumanEval with traces (``trace=true``) and K = 5, of the profile; one pair."""
    r = pick_backend(of_profile(runs, profile), profile, default="hf")
    return select_runs(
        r, dataset=DATASET, profile=None, pair=None, methods=METHODS, trace=True, K=K
    )


def table(runs: pd.DataFrame, K: int = K) -> pd.DataFrame:
    """Table 2 rows for each (p_drop, L) group of ``runs``, with the frequency's interval over samples."""
    pos = trace_positions(runs)
    blocks = []
    for (p, L), grp in pos.groupby(["p_drop", "L"]) if not pos.empty else []:
        t = pattern_table(grp, K)
        g = grp[grp["K"] == K]
        cis = [
            share_ci(g, g["agreement_pattern"] == code).scaled(100.0)
            for code in range(len(agreement_pattern_names(K)))
        ]
        t.insert(3, "frequency_pct_lo", [e.lo for e in cis])
        t.insert(4, "frequency_pct_hi", [e.hi for e in cis])
        t.insert(0, "L", int(L))
        t.insert(0, "p_drop", float(p))
        blocks.append(t)
    if not blocks:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(blocks, ignore_index=True)
    out["paper_frequency_pct"] = [PAPER_FREQUENCY_PCT.get(p, math.nan) for p in out["pattern"]]
    return out[COLUMNS]


def display(t: pd.DataFrame) -> pd.DataFrame:
    f = t[["p_drop", "L", "pattern", "count"]].copy()
    f["frequency (%)"] = [
        fmt(Estimate(v, lo, hi, 1), 1)
        for v, lo, hi in zip(t["frequency_pct"], t["frequency_pct_lo"], t["frequency_pct_hi"])
    ]
    f["mean p_target(majority)"] = t["mean_majority_target_prob"].map(
        lambda v: "-" if pd.isna(v) else f"{v:.3f}"
    )
    f["paper (%)"] = t["paper_frequency_pct"].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    f["p_drop"] = f["p_drop"].map(lambda v: f"{v:g}")
    return f


def build(selected: pd.DataFrame) -> Artefact:
    t = table(selected)
    npos = int(t["count"].sum()) if not t.empty else 0
    footer = [
        n_line(selected),
        f"positions: {npos} draft positions up to the first rejection of each round (method=dropmatch, "
        f"K={K}); p_target = softmax of the target logits at T=1",
        f"frequency: value [95% CI], percentile bootstrap over samples (B={B_DEFAULT}, seed {SEED}) of "
        "Σ positions with the pattern / Σ positions",
        "paper: Llama-3.1-8B -> 70B on HumanEval, all heads agree in 98.4% of cases",
        *provenance_lines(selected),
    ]
    if t.empty:
        return Artefact(NAME)
    return Artefact(
        NAME,
        tables=[
            Table(
                NAME,
                "Table 2: agreement of the K=5 MC-dropout heads (HumanEval)",
                t,
                display(t),
                footer,
            )
        ],
        runs=selected,
    )


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
