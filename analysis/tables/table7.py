"""Table 7: EAGLE-3 vs EAGLE-3 + DropMatch (naive token matching) on GSM8K, MT-Bench, Alpaca across L.

Paper: DropMatch Table 7 (Llama-3.3-70B-Instruct + yuhuili/EAGLE3-LLaMA3.3-Instruct-70B, 80 questions per
set, p_drop = 0.3, K = 5; Sec. 4.4). Rows: (pair, L, method) with EAGLE3 = exact match (method ``sd`` with an
eagle3 pair) and EAGLE3+DM = ``dropmatch_naive`` (Eq. 4); a draft-model pair's rows read SD / SD+DM (the CPU
profile's judged rows: no trained EAGLE-3 head exists for the embedded target). Only (pair, L) groups with a
DropMatch run (or EAGLE-3 drafting) are rows. Columns per set: quality, tau, tok/s and speedup vs the exact row of the same pair and L
(1.0x), each with a 95 % bootstrap interval over questions (speedup paired). Quality:
GSM8K exact match on the final number (%); MT-Bench and Alpaca are judged (GPT-4 in the paper): their cells read
the judging runs' records (:mod:`analysis.judged`, made by ``python -m runners.judging``) and name the judge in
the footer, else "n.j." (not judged). One table per (p_drop, K) found (``table7`` for the paper's).

    python -m analysis.render table7 --profile default
"""

from __future__ import annotations

import json

import pandas as pd

from analysis.artefact import (
    PAPER_SETTING,
    Artefact,
    Profile,
    Table,
    dm_settings,
    of_profile,
    setting_stem,
)
from analysis.cells import CI_NOTE, SPEEDUP_NOTE, Cell, ItemCache, cap_note, est_columns, speedup
from analysis.equality import check_runs, equality_footer
from analysis.footer import provenance_lines
from analysis.judged import DIGITS, Judged, Judgments, paired_delta, split, with_judgments
from analysis.stats import NAN, fmt

NAME = "table7"
BENCHMARKS = ("eagle_gsm8k", "mt_bench", "alpaca")
BENCH_LABEL = {"eagle_gsm8k": "GSM8K", "mt_bench": "MT-Bench", "alpaca": "Alpaca"}
METHOD_LABEL = {"sd": "EAGLE3", "dropmatch_naive": "EAGLE3+DM"}
DRAFTING = {"eagle3": "EAGLE3", "draft_model": "SD"}  # a row's name by the pair's drafting
GRADED = ("eagle_gsm8k",)
RANDOM_HEAD_NOTE = "EAGLE3 head: random init (mechanism check, not a speed claim)"
SMALL_N = 30
BASELINE = "baseline"  # a pairwise / AlpacaEval cell of the run the set's win rates compare with
NOT_JUDGED = "n.j."  # no answer of the run scored by the chosen judge


def select_eagle(
    runs: pd.DataFrame, profile: Profile, datasets, methods, spec_method: str | None
) -> pd.DataFrame:
    """Complete greedy runs on ``datasets`` of ``methods`` plus AR (the equality reference), on any engine and
    batch size (a table compares rows of one pair, L and engine); ``spec_method`` (``eagle3``: vLLM's eagle3
    drafting) keeps only runs with that drafting, None both kinds."""
    r = of_profile(runs, profile)
    r = r[
        (r["temperature"] == 0.0)
        & r["dataset"].isin(list(datasets))
        & r["method"].isin(["ar", *methods])
        & r["complete"].astype(bool)
    ]
    return r[r["spec_method"] == spec_method] if spec_method is not None else r


def at_setting(
    runs: pd.DataFrame, p_drop: float, K: int, keys=("pair", "dataset", "method", "L")
) -> pd.DataFrame:
    """Speculative runs (no AR) with DropMatch at (p_drop, K); the largest, then latest run per cell."""
    r = runs[(runs["method"] != "ar") & (runs["L"] > 0)]
    dm = r["method"].str.startswith("dropmatch")
    r = r[~dm | ((r["p_drop"].astype(float) == p_drop) & (r["K"].astype(float) == K))]
    return r.sort_values(["n", "date_utc"], ascending=[False, False]).drop_duplicates(list(keys))


def eagle_footer(
    runs: pd.DataFrame,
    all_runs: pd.DataFrame,
    labels: dict,
    judged: Judgments | None = None,
    markers: set[str] | frozenset[str] = frozenset(),
) -> list[str]:
    """Footer lines shared by Tables 7 and 10: n, quality (judged or not), random-head note, equality check.
    ``markers``: the judged quality columns' markers shown (``baseline``, ``n.j.``), each then explained."""
    if runs.empty:
        return []
    ns = runs.groupby("dataset")["n"].max()
    lines = [
        "n (questions per run): "
        + n_text(runs, labels)
        + "; first turn only (EAGLE answers turn 2 too)",
        engine_text(runs),
    ]
    open_ended = [d for d in ns.index if d not in GRADED]
    protocols = {}
    if judged:
        for d in open_ended:
            p = judged.protocol_of(runs[runs["dataset"] == d]["run_id"])
            if p is not None:
                protocols[labels.get(d, d)] = p
    unjudged = [labels.get(d, d) for d in open_ended if labels.get(d, d) not in protocols]
    if protocols:
        lines.extend(judged.footer(protocols, baseline_note(judged)))
        lines.extend(marker_lines(markers))
    if unjudged:
        lines.append(
            f"quality: not judged offline ({', '.join(unjudged)}: the paper uses GPT-4 as judge); n.j. = not judged"
            if not protocols
            else f"not judged: {', '.join(unjudged)} (n.j.)"
        )
    if "eagle_gsm8k" in ns.index:
        lines.append(
            "GSM8K quality: exact match of the last number vs the reference's #### N "
            "(lm-eval gsm8k flexible-extract), %"
        )
    if "eagle3_random_head" in runs and runs["eagle3_random_head"].astype(bool).any():
        lines.append(RANDOM_HEAD_NOTE)
    if int(ns.max()) < SMALL_N:
        lines.append(
            f"NOTE: n < {SMALL_N} and short outputs (CPU budget): numbers are not significant"
        )
    lines.extend(equality_footer(runs, all_runs))
    return lines


def marker_lines(markers) -> list[str]:
    """Footer lines explaining the markers of judged quality cells."""
    lines = []
    if BASELINE in markers:
        lines.append(
            f"{BASELINE} (judged quality): the run the win rates compare with (the baseline of its pair and L); "
            "compared with itself every answer is a draw, 50% by construction with no judge call, so no number "
            "is shown"
        )
    if NOT_JUDGED in markers:
        lines.append(
            f"{NOT_JUDGED} (judged quality): not judged, no answer of the run scored by this judge (python -m "
            "runners.judging <artefact> judges it)"
        )
    return lines


def shown_markers(display: list[dict], columns) -> set[str]:
    """The markers (``baseline``, ``n.j.``) among the display cells of ``columns``."""
    return {
        str(row.get(c)) for row in display for c in columns if row.get(c) in (BASELINE, NOT_JUDGED)
    }


def n_text(runs: pd.DataFrame, labels: dict) -> str:
    """``<set> <n> (max_new_tokens <cap>)`` per set, per pair when the runs hold several pairs."""

    def sets(g: pd.DataFrame) -> str:
        ns, caps = g.groupby("dataset")["n"].max(), g.groupby("dataset")["max_new_tokens"].max()
        return ", ".join(
            f"{labels.get(d, d)} {int(n)} (max_new_tokens {int(caps[d])})" for d, n in ns.items()
        )

    if runs["pair"].nunique() == 1:
        return sets(runs)
    return "; ".join(f"{pair}: {sets(g)}" for pair, g in runs.groupby("pair", sort=True))


def engine_text(runs: pd.DataFrame) -> str:
    """Each pair's engine and batch size (rows are compared only within one pair, L and engine)."""
    parts = [
        f"{pair}: {', '.join(sorted(set(g['backend'])))}, batch size "
        f"{'/'.join(str(int(b)) for b in sorted(set(g['batch_size'])))}"
        for pair, g in runs.groupby("pair", sort=True)
    ]
    return "engine per pair: " + "; ".join(parts)


def comparable(a: pd.Series, b: pd.Series) -> bool:
    """Two runs whose tok/s may be divided: the same engine and batch size (a batch of 10 shares each step)."""
    return a["backend"] == b["backend"] and int(a["batch_size"]) == int(b["batch_size"])


def cap_lines(runs: pd.DataFrame, cells: list[Cell]) -> list[str]:
    """:func:`analysis.cells.cap_note` per pair (their caps differ: the CPU profile's EAGLE-3 rows stop at 8 tokens)."""
    pairs = runs.groupby("pair", sort=True)
    lines = []
    for pair, g in pairs:
        by_set = {
            BENCH_LABEL[b]: [
                c for c in cells if c.run_id in set(g.loc[g["dataset"] == b, "run_id"])
            ]
            for b in BENCHMARKS
        }
        line = cap_note({k: v for k, v in by_set.items() if v})
        lines.append(f"{pair}: {line}" if len(pairs) > 1 else line)
    return lines


def with_references(runs: pd.DataFrame, all_runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` plus the AR runs the equality check compared them with (for the manifest)."""
    refs = {x["ar_run_id"] for x in check_runs(runs, all_runs)}
    return pd.concat([runs, all_runs[all_runs["run_id"].isin(refs)]]).drop_duplicates("run_id")


def baseline_note(judged: Judgments) -> str:
    """The pairwise protocols' baseline as footer text (the judging runs' ``method.baseline``)."""
    notes = set()
    for b in judged.chosen["baseline"]:
        b = json.loads(b) if isinstance(b, str) else b
        if b:
            notes.add(
                "the dataset's reference answers"
                if b.get("method") == "reference"
                else f"the answers of method {b.get('method')} in the same setting (the paper's standard decoding)"
            )
    return "; ".join(sorted(notes))


def judged_columns(
    key: str,
    j: Judged | None,
    protocol: str,
    base: Judged | None = None,
    is_baseline: bool = False,
) -> tuple[dict, str]:
    """CSV columns and the display text of a judged quality cell (protocol ``protocol``'s units).

    ``base``: the judged exact row of the same pair and L; a single-answer cell of another row then also shows
    its paired difference from it (:func:`analysis.judged.paired_delta`, ``Δ``, over the questions both scored).
    ``is_baseline``: the run is the baseline of the set's pairwise / AlpacaEval judgings (or ``j`` judged it
    against itself): its win rate would be 50 % by construction, so the cell reads "baseline" (no number) and
    the CSV's ``<key>_is_baseline`` is true. A run with no answer scored reads "n.j." (not judged).
    """
    name = f"{key}_score" if protocol == "single" else f"{key}_win_rate_pct"
    flag = {} if protocol == "single" else {f"{key}_is_baseline": False}
    empty = {**est_columns(name, NAN), f"{name}_se": NAN.value, f"{key}_judged_n": 0}
    if protocol != "single" and (is_baseline or (j is not None and j.self_baseline)):
        return {**empty, f"{key}_is_baseline": True}, BASELINE
    if j is None or not j.scored:
        return {**empty, **flag}, NOT_JUDGED
    shown = fmt(j.value, DIGITS.get(protocol, 2))
    cols = {**est_columns(name, j.value), f"{name}_se": j.se, f"{key}_judged_n": j.value.n, **flag}
    if protocol == "single" and base is not None and base.run_id != j.run_id:
        delta = paired_delta(j, base)
        cols.update(est_columns(f"{name}_delta_vs_exact", delta))
        if delta.n:
            shown += f"; Δ {fmt(delta, DIGITS['single'])} (n={delta.n})"
    return cols, shown


def cell_columns(
    prefix: str,
    c: Cell | None,
    base: Cell | None,
    graded: bool,
    judged: tuple[Judged | None, str, Judged | None, bool] | None = None,
) -> tuple[dict, dict]:
    """(numbers, display) of one set's columns: quality, tau, tok/s, speedup vs ``base``.

    ``judged``: (the run's judged quality or None, the set's protocol, the exact row's judged quality or None,
    whether the run is the set's pairwise baseline) when the set has judgments in this table.
    """
    if c is None:
        return {}, {
            f"{prefix} Q": "pending",
            f"{prefix} τ": "",
            f"{prefix} tok/s": "",
            f"{prefix} speedup": "",
        }
    acc = c.acc if graded else NAN
    sp = speedup(c, base)
    key = prefix.lower().replace("-", "_")
    if judged is not None:
        qcols, qshown = judged_columns(key, *judged)
    else:
        qcols, qshown = est_columns(f"{key}_quality_pct", acc), fmt(acc, 1) if graded else "n.j."
    data = {
        **qcols,
        **est_columns(f"{key}_tau", c.tau),
        **est_columns(f"{key}_tok_per_s", c.tps),
        **est_columns(f"{key}_speedup", sp),
        f"{key}_n": c.n,
    }
    shown = {
        f"{prefix} Q": qshown,
        f"{prefix} τ": fmt(c.tau),
        f"{prefix} tok/s": fmt(c.tps),
        f"{prefix} speedup": f"{fmt(sp)}×" if sp.n else "",
    }
    return data, shown


def build(selected: pd.DataFrame) -> Artefact:
    selected, judges = split(selected)
    judged = Judgments(judges)
    art, cache, used = Artefact(NAME), ItemCache(), []
    for p, K in dm_settings(selected, ("dropmatch_naive",)) or [PAPER_SETTING]:
        runs = at_setting(selected, p, K)
        if runs.empty:
            continue
        protocols = {
            b: judged.protocol_of(runs[runs["dataset"] == b]["run_id"]) for b in BENCHMARKS
        }
        judged_q = [f"{BENCH_LABEL[b]} Q" for b in BENCHMARKS if protocols[b] and b not in GRADED]
        data, display, row_cells = [], [], []
        for (pair, L), g in runs.groupby(["pair", "L"], sort=True):
            drafting = DRAFTING.get(str(g["spec_method"].iloc[0]), "SD")
            if drafting == "SD" and not (g["method"] == "dropmatch_naive").any():
                continue  # a draft-model pair's runs of another artefact on these sets (Table 5's SD at L = 10)
            cells = {(r["dataset"], r["method"]): cache.cell(r) for _, r in g.iterrows()}
            row_cells.extend(c for (_, m), c in cells.items() if m in METHOD_LABEL)
            for method, label in METHOD_LABEL.items():
                if not (g["method"] == method).any():
                    continue
                label = label.replace("EAGLE3", drafting)
                d, s = (
                    {"pair": pair, "L": int(L), "method": method, "row": label},
                    {"Pair": pair, "L": int(L), "Method": label},
                )
                for b in BENCHMARKS:
                    c = cells.get((b, method))
                    j = None
                    if protocols[b] is not None and b not in GRADED:
                        ref = cells.get((b, "sd"))
                        j = (
                            judged.cell(c.run_id) if c is not None else None,
                            protocols[b],
                            judged.cell(ref.run_id) if ref is not None else None,
                            c is not None and judged.is_baseline(c.run_id),
                        )
                    nums, shown = cell_columns(
                        BENCH_LABEL[b], c, cells.get((b, "sd")), b in GRADED, j
                    )
                    d.update(nums)
                    s.update(shown)
                data.append(d)
                display.append(s)
        if not data:
            continue
        ids = {c.run_id for c in row_cells}
        runs = runs[runs["run_id"].isin(ids) | (runs["method"] == "ar")]
        footer = [
            f"EAGLE3 = vLLM eagle3 drafting, SD = draft-model drafting, each exact match (greedy); +DM = DropMatch "
            f"naive token matching (Eq. 4), p_drop={p:g}, K={K}; speedup vs the exact row of the same pair and L "
            "(1.0×).",
            f"cells: {CI_NOTE}",
            SPEEDUP_NOTE,
            *cap_lines(runs, row_cells),
            *eagle_footer(runs, selected, BENCH_LABEL, judged, shown_markers(display, judged_q)),
            *provenance_lines(runs),
        ]
        art.tables.append(
            Table(
                setting_stem(NAME, p, K),
                f"Table 7: EAGLE3 (or SD) vs + DropMatch (p_drop={p:g}, K={K})",
                pd.DataFrame(data),
                pd.DataFrame(display),
                footer,
            )
        )
        used.append(with_references(runs, selected))
        used.append(judged.used(runs["run_id"])[selected.columns])
    art.runs = pd.concat(used).drop_duplicates("run_id") if used else selected.iloc[0:0]
    return art


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """SD / DM naive / AR runs on the three sets (either drafting), and their judging runs."""
    return with_judgments(
        select_eagle(runs, profile, BENCHMARKS, METHOD_LABEL, spec_method=None), runs
    )


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
