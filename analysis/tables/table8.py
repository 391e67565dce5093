"""Table 8: Auto-Judge vs Auto-Judge + DropMatch on GSM8K 8-shot across judge thresholds, with SD rows.

Paper: DropMatch Table 8 (Llama-3.1-8B/70B, batch size 1; AJ at L=32; DM p_drop=0.3, K=5; SD at L=8 and 32
as reference; AJ+DM 1.06-1.29x AJ and 1.44-2.11x SD). Rows: SD at each L run, then per threshold AJ and AJ+DM
(at the L with the most AJ runs). Columns: accuracy (%), tau, tokens/s, each with its 95% bootstrap interval
over items, and the paired speedups the paper reports: AJ+DM vs AJ at the same threshold, AJ / AJ+DM vs SD at
each L; and the paired accuracy difference ``Δ acc`` of AJ+DM vs AJ at the same threshold and of AJ / AJ+DM vs
SD at the AJ rows' L (:func:`analysis.cells.delta_acc`: Newcombe's paired interval, items whose output differs).
One table per AJ+DM (p_drop, K) found (``table8`` for the paper's 0.3 / 5, else ``table8_p<p>_K<K>``).
The footer gives n, the judge's mining size, metrics (recall of important mismatches at each threshold) and
the thresholds.

    python -m analysis.render table8 --profile default
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.artefact import Artefact, Profile, Table, setting_stem
from analysis.autojudge import (
    cells,
    dm_settings,
    first_cell,
    judge_footer,
    one_dataset,
    select_aj,
    setting_lines,
)
from analysis.cells import (
    CI_NOTE,
    DELTA_ACC_NOTE,
    SPEEDUP_NOTE,
    ItemCache,
    delta_acc,
    diff_columns,
    est_columns,
    speedup,
    timing_note,
)
from analysis.footer import provenance_lines
from analysis.stats import NAN, NAN_DIFF, fmt, fmt_diff

NAME = "table8"
DATASET = "gsm8k"
SMALL_N = 30


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete greedy SD / AJ / AJ+DM runs on GSM8K of the profile (one backend, one batch size)."""
    return select_aj(runs, profile, (DATASET,))


def aj_length(pts: pd.DataFrame) -> int:
    """The L of the AJ / AJ+DM rows: the one with the most such runs (ties: the largest; paper: 32)."""
    counts = pts[pts["method"] != "SD"]["L"].value_counts()
    return int(max(counts.index, key=lambda L: (counts[L], L))) if len(counts) else 0


def sd_reference(sd: pd.DataFrame, L: int) -> pd.Series | None:
    """The SD row the Δ acc columns compare with: SD at the AJ rows' ``L`` when run, else the longest SD."""
    if sd.empty:
        return None
    same = sd[sd["L"] == L]
    return (same if not same.empty else sd.sort_values("L")).iloc[-1]


def build_setting(
    pts: pd.DataFrame, p_drop: float, K: int
) -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """(numeric frame, display frame, cells used) of the table at AJ+DM's (p_drop, K)."""
    sd = pts[pts["method"] == "SD"].sort_values("L")
    L = aj_length(pts)
    aj = pts[(pts["method"] == "AJ") & (pts["L"] == L)]
    dm = pts[
        (pts["method"] == "AJ+DM") & (pts["L"] == L) & (pts["p_drop"] == p_drop) & (pts["K"] == K)
    ]
    data, display, used = [], [], []
    ref = sd_reference(sd, L)
    ref_label = f"SD L={int(ref['L'])}" if ref is not None else "SD"

    def add(r: pd.Series, vs_aj, aj_cell=None) -> None:
        c = r["cell"]
        used.append(c)
        d_aj = delta_acc(c, aj_cell) if aj_cell is not None else NAN_DIFF
        d_sd = delta_acc(c, ref["cell"]) if (ref is not None and r["method"] != "SD") else NAN_DIFF
        row = {
            "Method": r["method"],
            "L": int(r["L"]),
            "Threshold": "–" if math.isnan(r["threshold"]) else f"{r['threshold']:g}",
            "Acc (%)": fmt(c.acc, 1),
            "Δ acc vs AJ": fmt_diff(d_aj),
            f"Δ acc vs {ref_label}": fmt_diff(d_sd),
            "τ": fmt(c.tau, 2),
            "tok/s": fmt(c.tps, 2),
            "vs AJ": fmt(vs_aj) if vs_aj.n else "",
        }
        rec = {
            "method": r["method"],
            "L": int(r["L"]),
            "threshold": r["threshold"],
            "p_drop": r["p_drop"],
            "K": r["K"],
            "n": c.n,
            **est_columns("accuracy_pct", c.acc),
            **est_columns("tau", c.tau),
            **est_columns("tok_per_s", c.tps),
            **est_columns("speedup_vs_aj", vs_aj),
            **diff_columns("delta_acc_pp_vs_aj", d_aj),
            **diff_columns("delta_acc_pp_vs_sd", d_sd),
            "delta_acc_sd_L": int(ref["L"]) if ref is not None else math.nan,
        }
        for _, s in sd.iterrows():
            vs = speedup(c, s["cell"]) if r["method"] != "SD" else NAN
            row[f"vs SD L={int(s['L'])}"] = fmt(vs) if vs.n else ""
            rec.update(est_columns(f"speedup_vs_sd_L{int(s['L'])}", vs))
        display.append(row)
        data.append({**rec, "run_id": c.run_id})

    for _, s in sd.iterrows():
        add(s, NAN)
    for thr in sorted(set(aj["threshold"]) | set(dm["threshold"])):
        a, d = aj[aj["threshold"] == thr], dm[dm["threshold"] == thr]
        if not a.empty:
            add(a.iloc[0], NAN)
        if not d.empty:
            aj_cell = first_cell(aj, threshold=thr)
            add(d.iloc[0], speedup(d.iloc[0]["cell"], aj_cell), aj_cell)
    return pd.DataFrame(data), pd.DataFrame(display), used


def build(selected: pd.DataFrame) -> Artefact:
    """One table per AJ+DM (p_drop, K) (SD and AJ rows in each); nothing when there are no AJ runs."""
    art, cache = Artefact(NAME), ItemCache()
    runs = one_dataset(selected, DATASET)
    if runs.empty or not runs["method"].isin(["autojudge", "autojudge_dropmatch"]).any():
        art.notes.append(f"no Auto-Judge runs on {DATASET}")
        return art
    pts = cells(runs, cache)
    for p, K in dm_settings(runs) or [(0.3, 5)]:
        data, display, used = build_setting(pts, p, K)
        if data.empty:
            continue
        ids = set(data["run_id"])
        rr = runs[runs["run_id"].isin(ids)]
        thresholds = sorted(t for t in data["threshold"].dropna().unique())
        footer = [
            *setting_lines(rr, pts[pts["run_id"].isin(ids)]),
            f"AJ+DM: p_drop={p:g}, K={K}; AJ rows at L={aj_length(pts)}",
            f"cells: {CI_NOTE}; accuracy in %; throughput: mean of per-item output tokens/s (prefill excluded)",
            timing_note(used),
            f"{SPEEDUP_NOTE}: AJ+DM vs AJ at the same threshold; every AJ / AJ+DM row vs SD at each L",
            f"{DELTA_ACC_NOTE}: AJ+DM vs AJ at the same threshold; every AJ / AJ+DM row vs SD at the AJ "
            "rows' L (the longest SD run when SD was not run there)",
            *judge_footer(rr, thresholds),
            *provenance_lines(rr),
        ]
        if int(data["n"].min()) < SMALL_N:
            footer.append(
                f"NOTE: n < {SMALL_N} items (CPU budget): intervals are wide; read an accuracy difference from "
                "its paired Δ acc interval; paper: the whole GSM8K test set, AJ at L=32"
            )
        art.tables.append(
            Table(
                stem=setting_stem(NAME, p, K),
                title=f"Table 8: Auto-Judge vs Auto-Judge + DropMatch on GSM8K (p_drop={p:g}, K={K})",
                data=data,
                display=display,
                footer=footer,
            )
        )
    used_ids = set().union(*(set(t.data["run_id"]) for t in art.tables)) if art.tables else set()
    art.runs = runs[runs["run_id"].isin(used_ids)]
    return art


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
