"""Table 6: accuracy, mean acceptance length tau and throughput of SD vs SD + DropMatch (JS rule).

Paper: DropMatch Table 6 (p_drop = 0.3, K = 5, L in {5, 10}, batch size 1, greedy). Rows per pair:
AR (the autoregressive baseline, for speedups), then SD and DM for each L. Columns per benchmark:
accuracy (%), tau, tokens/s, each with its 95 % bootstrap interval over items, and the speedup (SD vs
AR; DM vs SD at the same L, paired over items, plus DM vs AR), and the paired accuracy difference ``Δ acc``
(SD vs AR; DM vs SD at the same L and vs AR) with its interval and the items whose output differs from the
reference run (:func:`analysis.cells.delta_acc`). One table per (p_drop, K) found in the
records: ``table6`` for the paper's (0.3, 5), ``table6_p<p>_K<K>`` for others; each with a per-position
acceptance figure ``<stem>_per_position``. The numeric CSV is long: one row per (pair, method, L, benchmark).
Accuracy is each scorer's primary metric (the footer names it); where that is not lm-eval's own number (GSM8K:
the numerically normalised ``math_verify,strict-match``), the CSV also carries lm-eval's (``comparable_metric``,
``comparable_pct``: ``exact_match,strict-match``), the number to compare with published lm-eval results.

    python -m analysis.render table6 --profile default
"""

from __future__ import annotations

import pandas as pd

from analysis.artefact import (
    PAPER_SETTING,
    Artefact,
    Profile,
    Table,
    dm_settings,
    of_profile,
    pick_backend,
    profile_arg,
    setting_stem,
)
from analysis.cells import (
    CI_NOTE,
    DELTA_ACC_NOTE,
    SPEEDUP_NOTE,
    Cell,
    ItemCache,
    cap_note,
    delta_acc,
    diff_columns,
    est_columns,
    speedup,
    timing_note,
)
from analysis.drift import drift_line
from analysis.figures import per_position
from analysis.footer import provenance_lines, quality_lines
from analysis.load import SETTING, one_setting
from analysis.physics import regime_line, verify_step_ratio
from analysis.render import NoRuns, render
from analysis.stats import NAN, NAN_DIFF, PairedDiff, fmt, fmt_diff

NAME = "table6"
BENCHMARKS = ("gsm8k", "mmlu", "ifeval", "humaneval")
BENCH_LABEL = {"gsm8k": "GSM8K", "mmlu": "MMLU", "ifeval": "IFEval", "humaneval": "HumanEval"}
METHOD_LABEL = {"ar": "AR", "sd": "SD", "dropmatch": "SD+DM"}
SMALL_N = 30


# What select() leaves out that a user's own sweep often makes (runners.sweep.shown prints it).
SELECTION_NOTE = (
    "Table 6 shows SD only at a draft length L with DropMatch runs (its rows compare SD with SD + DM at each L): "
    "add method=dropmatch to the sweep at that L"
)


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Greedy, complete AR / SD / DM runs of the profile, no trace runs, one backend
    (:func:`analysis.artefact.pick_backend`, default ``hf``). Any batch size: the cells of a row share one
    (:func:`setting_runs`), and the footer names it. SD only at the draft lengths that have DropMatch runs:
    Table 6 compares SD with SD + DM at each L (the Auto-Judge artefacts' SD references at L=8 are theirs).
    Only Table 6's benchmarks: another artefact's runs on other datasets (Table 7's SD on MT-Bench) have no cell
    and would only swell the footer's counts. With no DropMatch run at all every SD run stays, so a sweep's first
    cells (``method=sd``) render with SD+DM pending."""
    r = of_profile(runs, profile)
    r = r[
        (r["temperature"] == 0.0)
        & r["dataset"].isin(BENCHMARKS)
        & r["method"].isin(list(METHOD_LABEL))
        & r["complete"].astype(bool)
        & ~r["trace"].astype(bool)
    ]
    r = pick_backend(r, profile, default="hf", artefact="table6")
    dm_lengths = set(r.loc[r["method"] == "dropmatch", "L"])
    if not dm_lengths:  # no DropMatch run yet: SD shows beside its pending SD+DM row
        return r
    return r[(r["method"] != "sd") | r["L"].isin(dm_lengths)]


def setting_runs(selected: pd.DataFrame, p_drop: float, K: int) -> pd.DataFrame:
    """AR, SD and DM at (p_drop, K) under the paper's rule (``include_target`` false); the cells of one
    (pair, benchmark) from one setting (same items and cap: :func:`analysis.load.one_setting`)."""
    dm = selected["method"] == "dropmatch"
    keep = ~dm | (
        (selected["p_drop"].astype(float) == p_drop)
        & (selected["K"].astype(float) == K)
        & ~selected["include_target"].astype(bool)
    )  # the paper's rule (sensitivity also runs true)
    return one_setting(
        selected[keep], cell=("method", "L"), extra=("batch_size",), artefact="table6"
    )


def _setting_keys(runs: pd.DataFrame) -> list[tuple]:
    cols = [c for c in (*SETTING, "batch_size") if c in runs]
    return [tuple(r) for r in runs[cols].astype(str).itertuples(index=False)]


def same_setting_dm(selected: pd.DataFrame, base: set) -> pd.DataFrame:
    """``selected`` without the DropMatch runs made at another (items, cap, batch size) than the first table's:
    a further (p_drop, K) table is Table 6 at that (p_drop, K), not another artefact's runs (seen: the sensitivity
    sweep's GSM8K runs at n=5, 128 tokens, batch 5 rendered as Table 6 at p_drop 0.1 / 0.5 and K=1)."""
    keys = _setting_keys(selected)
    keep = [(m != "dropmatch") or (k in base) for m, k in zip(selected["method"], keys)]
    return selected[keep]


def _speed_text(method: str, vs_sd, vs_ar) -> str:
    if method == "ar":
        return "1 (ref)"
    if method == "sd":
        return f"{fmt(vs_ar)} vs AR" if vs_ar.n else ""
    if not vs_sd.n:
        return f"{fmt(vs_ar)} vs AR" if vs_ar.n else ""
    return f"{fmt(vs_sd)} vs SD" + (f"; {fmt(vs_ar, interval=False)} vs AR" if vs_ar.n else "")


def _delta_text(method: str, vs_sd: PairedDiff, vs_ar: PairedDiff) -> str:
    if method == "ar":
        return "ref"
    parts = [f"{fmt_diff(d)} vs {ref}" for d, ref in ((vs_sd, "SD"), (vs_ar, "AR")) if d.n]
    return "; ".join(parts)


def build_setting(
    runs: pd.DataFrame, cache: ItemCache
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, list[Cell]], dict]:
    """(numeric long frame, display frame, cells per benchmark label, n per benchmark) of one (p_drop, K) table."""
    data, display, ns = [], [], {}
    by_bench: dict[str, list[Cell]] = {}
    for pair in sorted(runs["pair"].unique()):
        pr = runs[runs["pair"] == pair]
        cell = {k: cache.cell(g.iloc[0]) for k, g in pr.groupby(["dataset", "method", "L"])}
        Ls = sorted({int(L) for (_, m, L) in cell if m != "ar"})
        order = [("ar", 0)] + [(m, L) for L in Ls for m in ("sd", "dropmatch")]
        for method, L in order:
            if not any(k[1:] == (method, L) for k in cell) and method != "dropmatch":
                continue  # an SD+DM row stays, pending, beside its SD row
            row = {
                "Pair": pair,
                "Method": METHOD_LABEL[method],
                "L": "-" if method == "ar" else str(L),
            }
            for b in BENCHMARKS:
                lab, c = BENCH_LABEL[b], cell.get((b, method, L))
                if c is None:
                    row.update(
                        {
                            f"{lab} Acc": "pending",
                            f"{lab} Δ acc": "",
                            f"{lab} τ": "",
                            f"{lab} tok/s": "",
                            f"{lab} speedup": "",
                        }
                    )
                    continue
                ns.setdefault(b, set()).add(c.n)
                by_bench.setdefault(lab, []).append(c)
                ar, sd = cell.get((b, "ar", 0)), cell.get((b, "sd", L))
                vs_ar = speedup(c, ar) if method != "ar" else NAN
                vs_sd = speedup(c, sd) if method == "dropmatch" else NAN
                dacc_ar = delta_acc(c, ar) if method != "ar" else NAN_DIFF
                dacc_sd = delta_acc(c, sd) if method == "dropmatch" else NAN_DIFF
                row.update(
                    {
                        f"{lab} Acc": fmt(c.acc, 1),
                        f"{lab} Δ acc": _delta_text(method, dacc_sd, dacc_ar),
                        f"{lab} τ": fmt(c.tau, 2, interval=method != "ar"),
                        f"{lab} tok/s": fmt(c.tps, 2),
                        f"{lab} speedup": _speed_text(method, vs_sd, vs_ar),
                    }
                )
                data.append(
                    {
                        "pair": pair,
                        "method": method,
                        "L": L,
                        "benchmark": b,
                        "n": c.n,
                        "max_new_tokens": int(pr[pr["dataset"] == b]["max_new_tokens"].max()),
                        **est_columns("accuracy_pct", c.acc),
                        **comparable_columns(c),
                        **est_columns("tau", c.tau),
                        **est_columns("tok_per_s", c.tps),
                        "timing_repeats": c.repeats,
                        **est_columns("speedup_vs_sd", vs_sd),
                        **est_columns("speedup_vs_ar", vs_ar),
                        **diff_columns("delta_acc_pp_vs_sd", dacc_sd),
                        **diff_columns("delta_acc_pp_vs_ar", dacc_ar),
                        "run_id": c.run_id,
                    }
                )
            display.append(row)
    frame = pd.DataFrame(data)
    if "comparable_metric" in frame and frame["comparable_metric"].isna().all():
        frame = frame.drop(
            columns=[c for c in frame if c.startswith("comparable")]
        )  # every primary is lm-eval's own number: no second column
    return frame, pd.DataFrame(display), by_bench, ns


def comparable_columns(c: Cell) -> dict:
    """CSV columns ``comparable_metric`` and ``comparable_pct`` (+ ``_lo`` / ``_hi``): lm-eval's own number of a
    cell whose primary accuracy is another metric (GSM8K: ``exact_match,strict-match`` beside the primary
    ``math_verify,strict-match``); None / NaN for a cell whose primary is lm-eval's own."""
    return {"comparable_metric": c.comparable_metric, **est_columns("comparable_pct", c.comparable)}


def batch_text(runs: pd.DataFrame) -> str:
    """``batch size 1`` or ``batch size B (...)``: the batch size(s) of the table's runs."""
    sizes = sorted({int(b) for b in runs["batch_size"]})
    if sizes == [1]:
        return "batch size 1"
    return f"batch size {'/'.join(map(str, sizes))} (that many items decoded together, one verify forward per round)"


def _dm_sd_pairs(runs: pd.DataFrame) -> list[tuple[str, pd.Series, pd.Series]]:
    """``(benchmark [L], DropMatch run, SD run)`` at each benchmark and L with both (the speedup's pairs)."""
    pairs = []
    several = runs[runs["method"] == "dropmatch"]["L"].nunique() > 1
    for (bench, L), g in runs.groupby(["dataset", "L"], sort=False):
        dm, sd = g[g["method"] == "dropmatch"], g[g["method"] == "sd"]
        if not dm.empty and not sd.empty:
            label = BENCH_LABEL.get(bench, bench) + (f" L={L}" if several else "")
            pairs.append((label, dm.iloc[0], sd.iloc[0]))
    order = {b: i for i, b in enumerate(BENCH_LABEL.values())}
    return sorted(pairs, key=lambda p: order.get(p[0].split(" ")[0], len(order)))


def regime_lines(runs: pd.DataFrame, cache: ItemCache) -> list[str]:
    """The cost-regime line (:mod:`analysis.physics`) per draft length: verify(L+1) / decode of each benchmark's SD
    run over its AR run (same pair, batch size and items)."""
    lines, pairs = [], sorted(runs["pair"].unique())
    sizes = "/".join(map(str, sorted({int(v) for v in runs["batch_size"]})))
    for L in sorted({int(v) for v in runs[runs["method"] == "sd"]["L"]}):
        ratios = []
        for pair in pairs:
            for b in BENCHMARKS:
                g = runs[(runs["pair"] == pair) & (runs["dataset"] == b)]
                sd, ar = g[(g["method"] == "sd") & (g["L"] == L)], g[g["method"] == "ar"]
                if sd.empty or ar.empty:
                    continue
                label = BENCH_LABEL[b] + (f" ({pair})" if len(pairs) > 1 else "")
                ratios.append(
                    (label, verify_step_ratio(cache.items(sd.iloc[0]), cache.items(ar.iloc[0])))
                )
        lines += regime_line(ratios, L, sizes)
    return lines


def footer(
    runs: pd.DataFrame,
    p_drop: float,
    K: int,
    by_bench: dict[str, list[Cell]],
    ns: dict,
    regime: list[str] | None = None,
) -> list[str]:
    cells = [c for cs in by_bench.values() for c in cs]
    caps = runs.groupby("dataset")["max_new_tokens"].max()
    n_text = ", ".join(
        f"{BENCH_LABEL[b]} {'/'.join(map(str, sorted(ns[b])))}" for b in BENCHMARKS if b in ns
    )
    lines = [
        f"SD = speculative decoding (greedy; exact match), SD+DM = DropMatch JS rule (Eq. 5-7), p_drop={p_drop:g}, "
        f"K={K}; {batch_text(runs)}; τ = 1 + accepted/rounds (bonus/correction token included).",
        f"n (items per cell): {n_text}; max_new_tokens: "
        + ", ".join(f"{BENCH_LABEL.get(d, d)} {int(m)}" for d, m in caps.items()),
        f"cells: {CI_NOTE}; accuracy in %",
        cap_note(by_bench),
        "throughput: mean of per-item output tokens/s (prefill excluded; batched runs: tokens / the item's share "
        "of its batch's wall time, so the speedups compare throughput at that batch size, not batch-1 latency: "
        "./reproduce.sh bench gives batch-1 ratios)"
        if runs["batch_size"].max() > 1
        else "throughput: mean of per-item output tokens/s (prefill excluded)",
        timing_note(cells),
        f"{SPEEDUP_NOTE}: SD vs AR, SD+DM vs SD at the same L (SD+DM vs AR: point value; its CI is in the CSV)",
        f"{DELTA_ACC_NOTE}: SD vs AR, SD+DM vs SD at the same L and vs AR",
        *drift_line(_dm_sd_pairs(runs), "SD+DM vs SD"),
        *(regime or []),
        *quality_lines(runs),
        *provenance_lines(runs),
    ]
    if ns and min(min(v) for v in ns.values()) < SMALL_N:
        lines.append(
            f"NOTE: n < {SMALL_N} items per benchmark: intervals are wide; read an accuracy difference from "
            "its paired Δ acc interval and the items whose output differs; profile=full runs the whole test sets."
        )
    pending = [BENCH_LABEL[b] for b in BENCHMARKS if b not in ns]
    if pending:
        lines.append(f"pending (no runs yet): {', '.join(pending)}")
    return lines


def build(selected: pd.DataFrame) -> Artefact:
    """One table (and per-position figure) per (p_drop, K) of the DropMatch runs; the paper's first."""
    art, cache, used = Artefact(NAME), ItemCache(), []
    base: set | None = None  # the first table's (items, cap, batch) per pair and benchmark
    for p, K in dm_settings(selected, ("dropmatch",)) or [PAPER_SETTING]:
        pool = selected if base is None else same_setting_dm(selected, base)
        runs = setting_runs(pool, p, K)
        if runs.empty or (base is not None and not (runs["method"] == "dropmatch").any()):
            continue
        if base is None:
            base = set(_setting_keys(runs))
        data, display, by_bench, ns = build_setting(runs, cache)
        stem = setting_stem(NAME, p, K)
        lines = footer(runs, p, K, by_bench, ns, regime_lines(runs, cache))
        art.tables.append(
            Table(
                stem=stem,
                title=f"Table 6: SD vs SD + DropMatch (p_drop={p:g}, K={K})",
                data=data,
                display=display,
                footer=lines,
            )
        )
        fig = per_position.figure(
            runs,
            f"{stem}_per_position",
            BENCHMARKS,
            BENCH_LABEL,
            [f"runs of {stem}; p_drop={p:g}, K={K}", *provenance_lines(runs)],
            cache,
        )
        if fig is not None:
            art.figures.append(fig)
        used.append(runs)
    art.runs = pd.concat(used).drop_duplicates("run_id") if used else selected.iloc[0:0]
    return art


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Render Table 6 through :mod:`analysis.render` (``argv``: its ``--profile``/``--runs``/``--out``); return
    the paper setting's table as shown (the first table found; empty when there are no runs)."""
    import argparse
    import logging

    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="default", type=profile_arg)
    for flag in ("--runs", "--out"):
        ap.add_argument(flag, default=None)
    a = ap.parse_args(argv or [])
    try:
        art = render(NAME, a.profile, runs_root=a.runs, out_root=a.out)
    except NoRuns as e:
        logging.getLogger(__name__).warning("%s", e)
        return pd.DataFrame()
    return art.tables[0].display


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
