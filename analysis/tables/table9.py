"""Table 9: pass@1 and mean acceptance length of Auto-Judge vs Auto-Judge + DropMatch across judge thresholds.

Paper: DropMatch Table 9 (LiveCodeBench, Llama-3.1-70B-Instruct, p_drop=0.3, K=5). Rows: SD, then one per
threshold; columns: pass@1 (%) and tau of AJ and AJ+DM with 95% bootstrap intervals over items, and the tau gain
of AJ+DM over AJ (ratio of the pooled taus), and the paired pass@1 differences ``Δ`` of AJ vs SD, AJ+DM vs AJ
and AJ+DM vs SD (:func:`analysis.cells.delta_acc`: Newcombe's paired interval, items whose output differs; SD
at the AJ rows' L). Offline there is no LiveCodeBench data, so the CPU profile runs
HumanEval as a stand-in with the GSM8K-mined judge: the footer says so. LiveCodeBench runs win when both exist.

    python -m analysis.render table9 --profile default
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis.artefact import Artefact, Profile, Table
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
    ItemCache,
    delta_acc,
    diff_columns,
    est_columns,
)
from analysis.footer import provenance_lines
from analysis.stats import NAN_DIFF, fmt, fmt_diff
from analysis.tables.table8 import aj_length, sd_reference

NAME = "table9"
DATASETS = ("livecodebench", "humaneval")  # the paper's, then the offline stand-in
LABEL = {"livecodebench": "LiveCodeBench", "humaneval": "HumanEval"}
STAND_IN = (
    "STAND-IN: no LiveCodeBench data offline (hub livecodebench/code_generation_lite); HumanEval is run in "
    "its place with the judge mined on GSM8K (paper: LiveCodeBench with a judge mined on LiveCodeBench)"
)


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete greedy SD / AJ / AJ+DM runs on LiveCodeBench or HumanEval (one backend, one batch size)."""
    return select_aj(runs, profile, DATASETS)


def _tau_gain(a, d) -> float:
    return (
        float(d.tau.value / a.tau.value)
        if (a is not None and d is not None and a.tau.value)
        else math.nan
    )


def build(selected: pd.DataFrame) -> Artefact:
    """The table of the first dataset of :data:`DATASETS` with Auto-Judge runs, at AJ+DM's first (p_drop, K)."""
    art, cache = Artefact(NAME), ItemCache()
    for dataset in DATASETS:
        runs = one_dataset(selected, dataset)
        if not runs.empty and runs["method"].isin(["autojudge", "autojudge_dropmatch"]).any():
            break
    else:
        art.notes.append("no Auto-Judge runs on LiveCodeBench or HumanEval")
        return art
    pts = cells(runs, cache)
    settings = dm_settings(runs) or [(0.3, 5)]
    p, K = settings[0]
    if len(settings) > 1:
        art.notes.append(
            f"AJ+DM at (p_drop, K) = {settings[1:]} not shown (Table 9 shows {p:g}, {K})"
        )
    aj = pts[pts["method"] == "AJ"]
    dm = pts[(pts["method"] == "AJ+DM") & (pts["p_drop"] == p) & (pts["K"] == K)]
    ref = sd_reference(pts[pts["method"] == "SD"], aj_length(pts))
    sd_cell = ref["cell"] if ref is not None else None
    vs_sd = f"vs SD L={int(ref['L'])}" if ref is not None else "vs SD"
    data, display = _sd_rows(pts[pts["method"] == "SD"], vs_sd)
    for thr in sorted(set(aj["threshold"]) | set(dm["threshold"])):
        shown, rows = _threshold_rows(thr, aj, dm, sd_cell, vs_sd)
        display.append(shown)
        data.extend(rows)
    data = pd.DataFrame(data)
    rr = runs[runs["run_id"].isin(set(data["run_id"]))]
    footer = _footer(dataset, p, K, data, rr, pts)
    art.tables.append(
        Table(
            stem=NAME,
            title=f"Table 9: Auto-Judge vs Auto-Judge + DropMatch ({LABEL[dataset]})",
            data=data,
            display=pd.DataFrame(display),
            footer=footer,
        )
    )
    art.runs = rr
    return art


def _sd_rows(sd: pd.DataFrame, vs_sd: str) -> tuple[list[dict], list[dict]]:
    """The SD reference rows (one per L): ``(data rows, display rows)``."""
    data, display = [], []
    for _, r in sd.sort_values("L").iterrows():
        c = r["cell"]
        display.append(
            {
                "Threshold": f"SD (L={int(r['L'])})",
                "AJ pass@1": fmt(c.acc, 1),
                f"AJ Δ {vs_sd}": "",
                "AJ τ": fmt(c.tau, 2),
                "AJ+DM pass@1": "",
                "AJ+DM Δ vs AJ": "",
                f"AJ+DM Δ {vs_sd}": "",
                "AJ+DM τ": "",
                "τ gain": "",
            }
        )
        data.append(
            {
                "method": "SD",
                "L": int(r["L"]),
                "threshold": math.nan,
                "n": c.n,
                **est_columns("pass1_pct", c.acc),
                **est_columns("tau", c.tau),
                "run_id": c.run_id,
            }
        )
    return data, display


def _threshold_rows(
    thr: float, aj: pd.DataFrame, dm: pd.DataFrame, sd_cell: Any, vs_sd: str
) -> tuple[dict, list[dict]]:
    """One threshold: its display row (AJ beside AJ+DM) and its data rows (one per method present)."""
    a, d = first_cell(aj, threshold=thr), first_cell(dm, threshold=thr)
    show = lambda c, e, k: "" if c is None else fmt(getattr(c, e), k)  # noqa: E731
    gain = _tau_gain(a, d)
    d_a_sd, d_d_aj, d_d_sd = delta_acc(a, sd_cell), delta_acc(d, a), delta_acc(d, sd_cell)
    shown = {
        "Threshold": f"{thr:g}",
        "AJ pass@1": show(a, "acc", 1),
        f"AJ Δ {vs_sd}": fmt_diff(d_a_sd),
        "AJ τ": show(a, "tau", 2),
        "AJ+DM pass@1": show(d, "acc", 1),
        "AJ+DM Δ vs AJ": fmt_diff(d_d_aj),
        f"AJ+DM Δ {vs_sd}": fmt_diff(d_d_sd),
        "AJ+DM τ": show(d, "tau", 2),
        "τ gain": "" if math.isnan(gain) else f"{gain:.2f}×",
    }
    rows = []
    for label, c, src, d_aj, d_sd in (
        ("AJ", a, aj, NAN_DIFF, d_a_sd),
        ("AJ+DM", d, dm, d_d_aj, d_d_sd),
    ):
        if c is not None:
            rows.append(
                {
                    "method": label,
                    "L": int(src[src["threshold"] == thr].iloc[0]["L"]),
                    "threshold": thr,
                    "n": c.n,
                    **est_columns("pass1_pct", c.acc),
                    **est_columns("tau", c.tau),
                    "tau_gain_vs_aj": gain if label == "AJ+DM" else math.nan,
                    **diff_columns("delta_pass1_pp_vs_aj", d_aj),
                    **diff_columns("delta_pass1_pp_vs_sd", d_sd),
                    "run_id": c.run_id,
                }
            )
    return shown, rows


def _footer(
    dataset: str, p: float, K: int, data: pd.DataFrame, rr: pd.DataFrame, pts: pd.DataFrame
) -> list[str]:
    thresholds = sorted(t for t in data["threshold"].dropna().unique())
    footer = [
        *([STAND_IN] if dataset != "livecodebench" else []),
        f"{LABEL[dataset]} pass@1 (greedy, one sample per problem, the benchmark's own tests in the project's "
        f"sandbox); AJ+DM: p_drop={p:g}, K={K}; τ gain = τ(AJ+DM) / τ(AJ) at the same threshold",
        *setting_lines(rr, pts[pts["run_id"].isin(set(data["run_id"]))]),
        f"cells: {CI_NOTE}; pass@1 in %",
        f"{DELTA_ACC_NOTE.replace('Δ acc = accuracy', 'Δ = pass@1')}: AJ vs SD and AJ+DM vs SD at the AJ "
        "rows' L, AJ+DM vs AJ at the same threshold",
        *judge_footer(rr, thresholds),
        *provenance_lines(rr),
    ]
    if int(data["n"].min()) < 30:
        footer.append(
            "NOTE: n < 30 problems (CPU budget): intervals are wide; read a pass@1 difference from its "
            "paired Δ interval"
        )
    return footer


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
