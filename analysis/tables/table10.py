"""Table 10: EAGLE-3 vs standard SD + DropMatch on KoMT-Bench (out of distribution), L = 7.

Paper: DropMatch Table 10 (Sec. 4.5; target Llama-3.3-70B-Instruct, EAGLE-3 head vs the Llama-3.1-8B draft).
Rows: EAGLE3 (eagle3 pair, exact match), EAGLE3+DM (naive), SD (draft-model pair, exact match), SD+DM (the
DropMatch rule(s) that were run). Columns: tau, tok/s, speedup vs EAGLE3 (1.0x) and vs SD, each with a 95 %
bootstrap interval over questions (speedups paired). Quality is GPT-4-judged in the paper: when judging runs
exist (``python -m runners.judging``, :mod:`analysis.judged`) a column Q holds each row's judged quality and the
footer names the judge; without them the table has no quality column. One table per (L, p_drop, K) found
among the draft lengths that have a DropMatch run (the table's comparison; an EAGLE3 run alone at another L,
e.g. Table 7's at L = 5, is not a Table 10):
``table10`` for L = 7 at the paper's (0.3, 5).

    python -m analysis.render table10 --profile default
"""

from __future__ import annotations

import pandas as pd

from analysis.artefact import PAPER_SETTING, Artefact, Profile, Table, dm_settings, setting_stem
from analysis.cells import CI_NOTE, SPEEDUP_NOTE, ItemCache, est_columns, speedup
from analysis.footer import provenance_lines
from analysis.judged import Judgments, split, with_judgments
from analysis.stats import NAN, fmt
from analysis.tables.table7 import (
    at_setting,
    comparable,
    eagle_footer,
    judged_columns,
    select_eagle,
    shown_markers,
    with_references,
)

NAME = "table10"
DATASET = "komt_bench"
PAPER_L = 7
METHOD_LABEL = {"sd": "", "dropmatch_naive": "+DM (naive)", "dropmatch": "+DM (JS)"}
ORDER = {
    "EAGLE3": 0,
    "EAGLE3+DM (naive)": 1,
    "EAGLE3+DM (JS)": 2,
    "SD": 3,
    "SD+DM (naive)": 4,
    "SD+DM (JS)": 5,
}


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """KoMT-Bench runs of both draftings (eagle3, draft model), SD / DM (naive, JS) / AR, and their judging runs."""
    return with_judgments(
        select_eagle(runs, profile, (DATASET,), METHOD_LABEL, spec_method=None), runs
    )


def arm(row: pd.Series) -> str:
    return ("EAGLE3" if row["spec_method"] == "eagle3" else "SD") + METHOD_LABEL[row["method"]]


def table(
    runs: pd.DataFrame, cache: ItemCache, judged: Judgments | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(numbers, display): one row per (spec_method, method): tau, tok/s, speedup vs EAGLE3 and vs SD, and the
    judged quality (column Q) when ``judged`` holds judgments of these runs."""
    protocol = judged.protocol_of(runs["run_id"]) if judged else None
    runs = runs.assign(_arm=[arm(r) for _, r in runs.iterrows()]).sort_values(
        "_arm", key=lambda s: s.map(ORDER)
    )
    cells = {r["_arm"]: cache.cell(r) for _, r in runs.iterrows()}
    row = {r["_arm"]: r for _, r in runs.iterrows()}
    data, display = [], []
    for _, r in runs.iterrows():
        c = cells[r["_arm"]]
        ve, vs = (
            speedup(c, cells[ref]) if ref in row and comparable(r, row[ref]) else NAN
            for ref in ("EAGLE3", "SD")
        )
        exact = "EAGLE3" if r["_arm"].startswith("EAGLE3") else "SD"
        qcols, qshown = (
            judged_columns(
                "quality",
                judged.cell(str(r["run_id"])),
                protocol,
                judged.cell(str(row[exact]["run_id"])) if exact in row else None,
                judged.is_baseline(str(r["run_id"])),
            )
            if protocol is not None
            else ({}, None)
        )
        data.append(
            {
                "method": r["_arm"],
                "pair": r["pair"],
                "L": int(r["L"]),
                "n": c.n,
                **qcols,
                **est_columns("tau", c.tau),
                **est_columns("tok_per_s", c.tps),
                **est_columns("speedup_vs_eagle3", ve),
                **est_columns("speedup_vs_sd", vs),
            }
        )
        display.append(
            {
                "Method": r["_arm"],
                "Pair": r["pair"],
                "L": int(r["L"]),
                "n": c.n,
                **({"Q": qshown} if protocol is not None else {}),
                "τ": fmt(c.tau),
                "tok/s": fmt(c.tps),
                "vs EAGLE3": f"{fmt(ve)}×" if ve.n else "",
                "vs SD": f"{fmt(vs)}×" if vs.n else "",
            }
        )
    return pd.DataFrame(data), pd.DataFrame(display)


def build(selected: pd.DataFrame) -> Artefact:
    selected, judges = split(selected)
    judged = Judgments(judges)
    art, cache, used = Artefact(NAME), ItemCache(), []
    spec = selected[selected["method"] != "ar"]
    dm_lengths = {int(x) for x in spec.loc[spec["method"].str.startswith("dropmatch"), "L"]}
    for L in sorted(dm_lengths, key=lambda L: (L != PAPER_L, L)):
        atL = spec[spec["L"] == L]
        for p, K in dm_settings(atL) or [PAPER_SETTING]:
            runs = at_setting(atL, p, K, keys=("pair", "dataset", "method", "L", "spec_method"))
            if runs.empty:
                continue
            data, display = table(runs, cache, judged)
            footer = [
                f"KoMT-Bench (Korean MT-Bench, first turn), L={L}, greedy; EAGLE3 = eagle3 drafting (vLLM), SD = "
                f"draft-model drafting; +DM = DropMatch, p_drop={p:g}, K={K}; a speedup only between rows on the "
                "same engine and batch size (else blank).",
                f"cells: {CI_NOTE}",
                SPEEDUP_NOTE,
                *eagle_footer(
                    runs,
                    selected,
                    {DATASET: "KoMT-Bench"},
                    judged,
                    shown_markers(display.to_dict("records"), ["Q"]) if "Q" in display else set(),
                ),
                *provenance_lines(runs),
            ]
            stem = setting_stem(NAME, p, K) + ("" if L == PAPER_L else f"_L{L}")
            art.tables.append(
                Table(
                    stem,
                    f"Table 10: EAGLE3 vs SD + DropMatch on KoMT-Bench (L={L})",
                    data,
                    display,
                    footer,
                )
            )
            used.append(with_references(runs, selected))
            used.append(judged.used(runs["run_id"])[selected.columns])
    art.runs = pd.concat(used).drop_duplicates("run_id") if used else selected.iloc[0:0]
    return art


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
