"""DropMatch against the field: accuracy, τ and speed of every training-free lossy rule on one frontier.

For each benchmark (GSM8K and HumanEval, the benchmarks the lossy rules report; IFEval out of domain) every
rule at each of its knob settings is one run on the same items, caps, seed and batch size as AR and SD; each
is compared with SD on the items both hold (paired):

- ``frontier_<benchmark>``: one row per rule and setting: τ [95% CI], tok/s ratio vs SD [paired CI], Δ acc vs
  SD in points [Newcombe paired CI] with the items whose output differs from SD's, the items whose output
  differs from AR's, and the share of accepted draft tokens that differ from the target's argmax (greedy SD
  accepts none such);
- ``frontier``: per rule and benchmark, the highest τ among its settings whose Δ acc lower bound stays at or
  above :data:`TOLERANCE` points (the rule's best τ at a quality cost the data cannot tell from none);
- ``frontier_<benchmark>`` figure: Δ acc vs SD (with its interval) against τ and against the tok/s ratio,
  one line per rule through its settings.

    python -m analysis.render frontier --profile default
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import style
from analysis.artefact import Artefact, Figure, Profile, Table, of_profile, pick_backend
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
)
from analysis.footer import provenance_lines, quality_lines
from analysis.load import one_setting
from analysis.stats import NAN, NAN_DIFF, fmt, fmt_diff, newcombe_paired_ci

NAME = "frontier"
BENCHMARKS = ("gsm8k", "humaneval", "ifeval")
BENCH_LABEL = {"gsm8k": "GSM8K", "humaneval": "HumanEval", "ifeval": "IFEval (out of domain)"}
RULE_LABEL = {
    "sd": "SD (exact)",
    "dropmatch": "DropMatch (JS)",
    "dropmatch_naive": "DropMatch (naive)",
    "autojudge": "Auto-Judge",
    "autojudge_dropmatch": "Auto-Judge + DM",
    "fly": "FLy",
    "fsd": "Fuzzy SD",
    "typical": "Typical acceptance",
    "relaxed_topk": "Relaxed top-k/δ",
    "prob_threshold": "SGLang thresholds",
    "static_ensemble": "Static ensemble",
    "bild": "BiLD",
    "block_verify": "Block verification",
}
TOLERANCE = (
    -2.0
)  # points: the Δ acc lower bound a setting must keep to count as "no measurable loss"
CELL = ("method", "knobs", "L")
# no star (SD's) and a cycle longer than the colours', so no two rules share a colour and a marker
RULE_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "h", "<", ">", "p", "d"]


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Greedy, complete runs of AR and every rule of :data:`RULE_LABEL` on the frontier's benchmarks, no trace
    runs, one backend (the profile's, else ``hf``, else the one with most runs); only the runs made for the
    frontier (config ``artefact``) when there are any."""
    r = of_profile(runs, profile)
    if r.empty:
        return r
    r = r[
        (r["temperature"] == 0.0)
        & r["method"].isin(["ar", *RULE_LABEL])
        & r["dataset"].isin(list(BENCHMARKS))
        & r["complete"].astype(bool)
        & ~r["trace"].astype(bool)
    ]
    r = pick_backend(r, profile, default="hf", artefact="frontier")
    # a frontier is its own sweep: other artefacts' runs of AR / SD / DropMatch (Table 6's, at other n and caps)
    # would fill benchmarks the sweep has not run with points no rule is compared against
    own = r["artefact"] == NAME if "artefact" in r else None
    return r[own] if own is not None and own.any() else r


def frontier_runs(selected: pd.DataFrame) -> pd.DataFrame:
    """Per (pair, benchmark) the runs of one setting (items, cap, batch size, weights), the one with the most
    rule cells; within it the draft length L with the most rule runs (AR has none)."""
    runs = one_setting(selected, cell=CELL, extra=("batch_size", "model_identity"), artefact=NAME)
    keep = []
    for _, g in runs.groupby(["pair", "dataset"]):
        spec = g[g["method"] != "ar"]
        if spec.empty:
            continue
        L = spec["L"].value_counts().sort_index().idxmax()
        keep.append(g[(g["method"] == "ar") | (g["L"] == L)])
    return pd.concat(keep) if keep else runs.iloc[0:0]


def _knob_order(method: str, knobs: str) -> tuple:
    """Settings in the order a user reads them: by their knob values."""
    vals = []
    for part in knobs.split(", "):
        _, _, v = part.partition("=")
        try:
            vals.append(float(v))
        except ValueError:
            vals.append(math.inf)
    return (list(RULE_LABEL).index(method) if method in RULE_LABEL else 99, vals, knobs)


def varying(knobs: list[str]) -> list[str]:
    """Each label reduced to the knobs whose values differ between the labels (all of it for one label)."""
    parsed = [dict(p.partition("=")[::2] for p in k.split(", ") if p) for k in knobs]
    keys = [
        k
        for k in dict.fromkeys(x for d in parsed for x in d)
        if len({d.get(k) for d in parsed}) > 1
    ]
    if len(knobs) < 2 or not keys:
        return knobs
    return [", ".join(f"{k}={d[k]}" for k in keys if k in d) for d in parsed]


def mismatch_share(cell: Cell) -> float:
    """Accepted draft tokens that differ from the target's argmax, per accepted draft token (NaN when the
    records do not count them or nothing was accepted)."""
    it = cell.items
    if "mismatched" not in it or it["mismatched"].isna().any():
        return math.nan
    acc = float(it["accepted"].sum())
    return float(it["mismatched"].sum()) / acc if acc else math.nan


def benchmark_rows(
    runs: pd.DataFrame, cache: ItemCache
) -> tuple[pd.DataFrame, pd.DataFrame, list[Cell]]:
    """(numeric frame, display frame, cells) of one pair and benchmark."""
    by_key = {(m, k): row for (m, k), row in ((tuple(x[:2]), x[2]) for x in _rows(runs))}
    ar_run, sd_run = by_key.get(("ar", "")), by_key.get(("sd", ""))
    ar = cache.cell(ar_run) if ar_run is not None else None
    sd = cache.cell(sd_run) if sd_run is not None else None
    data, display, cells = [], [], []
    shown: dict[tuple[str, str], str] = {}
    for method in {m for m, _ in by_key}:
        labels = [k for m, k in by_key if m == method]
        shown.update({(method, k): v for k, v in zip(labels, varying(labels))})
    for (method, knobs), run in sorted(by_key.items(), key=lambda kv: _knob_order(*kv[0])):
        if method == "ar":
            continue
        c = cache.cell(run)
        cells.append(c)
        is_sd = method == "sd"
        vs_sd = NAN if is_sd else speedup(c, sd)
        d_sd = NAN_DIFF if is_sd else delta_acc(c, sd)
        d_ar = delta_acc(c, ar)
        share = mismatch_share(c)
        display.append(
            {
                "Rule": RULE_LABEL.get(method, method),
                "Setting": shown[(method, knobs)] or "-",
                "Acc %": fmt(c.acc, 1),
                "τ": fmt(c.tau, 2),
                "tok/s × SD": "1 (ref)" if is_sd else fmt(vs_sd, 2),
                "Δ acc vs SD (pp)": "ref" if is_sd else fmt_diff(d_sd),
                "differ from AR": f"{d_ar.n_diverged}/{d_ar.n}"
                if d_ar.n and d_ar.n_diverged is not None
                else "",
                "accepted ≠ argmax": "" if math.isnan(share) else f"{100 * share:.1f}%",
            }
        )
        data.append(
            {
                "pair": run["pair"],
                "benchmark": run["dataset"],
                "method": method,
                "knobs": knobs,
                "L": int(run["L"]),
                "n": c.n,
                **est_columns("accuracy_pct", c.acc),
                **est_columns("tau", c.tau),
                **est_columns("tok_per_s", c.tps),
                **est_columns("speedup_vs_sd", vs_sd),
                **diff_columns("delta_acc_pp_vs_sd", d_sd),
                "delta_acc_pp_vs_sd_lost": d_sd.n01 if d_sd.n else math.nan,
                **diff_columns("delta_acc_pp_vs_ar", d_ar),
                "accepted_mismatch_share": share,
                "run_id": c.run_id,
            }
        )
    return pd.DataFrame(data), pd.DataFrame(display), cells


def _rows(runs: pd.DataFrame):
    for _, run in runs.iterrows():
        yield (str(run["method"]), str(run["knobs"] or ""), run)


def best_within_tolerance(data: pd.DataFrame) -> pd.DataFrame:
    """Per (pair, benchmark, method): the setting with the highest τ whose Δ acc vs SD lower bound is at least
    :data:`TOLERANCE` points, and the setting with the highest τ that lost no item SD answered correctly
    (``n01 = 0``: every accuracy difference is a gain); how many settings kept each."""
    out = []
    rules = data[data["method"] != "sd"]
    for (pair, bench, method), g in rules.groupby(["pair", "benchmark", "method"], sort=False):
        ok = g[g["delta_acc_pp_vs_sd_lo"] >= TOLERANCE].sort_values("tau", ascending=False)
        kept = g[g["delta_acc_pp_vs_sd_lost"] == 0].sort_values("tau", ascending=False)
        row = {"pair": pair, "benchmark": bench, "method": method, "settings": len(g)}
        for prefix, sel in (("within", ok), ("no_loss", kept)):
            row[f"{prefix}_settings"] = len(sel)
            row[f"{prefix}_knobs"] = sel["knobs"].iloc[0] if len(sel) else ""
            row[f"{prefix}_tau"] = float(sel["tau"].iloc[0]) if len(sel) else math.nan
            row[f"{prefix}_speedup_vs_sd"] = (
                float(sel["speedup_vs_sd"].iloc[0]) if len(sel) else math.nan
            )
        row["max_tau"] = float(g["tau"].max())
        out.append(row)
    return pd.DataFrame(out)


def identical_bound(n: int, acc: float) -> float:
    """Lower bound (points) of Δ acc for a run whose every item is scored as SD's, at SD's accuracy and n: the
    best a setting can show at this n (Newcombe's interval is not [0, 0] without discordant items)."""
    k = round(acc * n)
    return 100.0 * newcombe_paired_ci(k, 0, 0, n - k)[1]


def _best_text(r: pd.Series, prefix: str) -> str:
    if math.isnan(r[f"{prefix}_tau"]):
        return f"none of {r['settings']}"
    return (
        f"τ {r[f'{prefix}_tau']:.2f} ({r[f'{prefix}_knobs'] or '-'}; ×{r[f'{prefix}_speedup_vs_sd']:.2f} "
        f"tok/s)"
    )


def summary_table(best: pd.DataFrame, sd: dict, runs: pd.DataFrame) -> Table:
    """The per-rule summary; ``sd``: benchmark -> (SD's τ, n, accuracy as a fraction); ``runs``: the rows of
    every run it summarises (its provenance footer, as every table's)."""
    display = []
    for method in dict.fromkeys(best["method"]):
        row = {"Rule": RULE_LABEL.get(method, method)}
        for b in BENCHMARKS:
            g = best[(best["method"] == method) & (best["benchmark"] == b)]
            if g.empty:
                continue
            r, label = g.iloc[0], BENCH_LABEL[b].split(" (")[0]
            row[f"{label}: LB ≥ {TOLERANCE:g} pp"] = _best_text(r, "within")
            row[f"{label}: no item lost"] = _best_text(r, "no_loss")
            row[f"{label}: max τ"] = f"{r['max_tau']:.2f}"
        display.append(row)
    ref = ", ".join(f"{BENCH_LABEL[b].split(' (')[0]} {t:.2f}" for b, (t, _, _) in sd.items())
    bounds = ", ".join(
        f"{BENCH_LABEL[b].split(' (')[0]} {identical_bound(n, acc):+.1f} (n={n})"
        for b, (_, n, acc) in sd.items()
    )
    return Table(
        stem=NAME,
        title="DropMatch vs the field: each rule's highest τ at no measurable accuracy loss vs SD",
        data=best,
        display=pd.DataFrame(display),
        footer=[
            f"LB ≥ {TOLERANCE:g} pp: among a rule's settings, the highest τ whose Δ acc vs SD (Newcombe paired 95% "
            f"CI, points) has its lower bound at or above {TOLERANCE:g}; 'none of k' = no setting of k does",
            "no item lost: the highest τ among settings that answered wrongly no item SD answered correctly "
            "(descriptive; every accuracy difference of such a setting is a gain)",
            f"the best lower bound any setting can reach at this n (every item scored as SD's): {bounds} points; "
            f"a lower bound of {TOLERANCE:g} needs more items, so at this n the first column says how far the data "
            "can go, not that a rule loses accuracy",
            f"SD's τ (the lossless reference): {ref}; the tok/s ratio vs SD of the chosen setting in parentheses; "
            "per-setting numbers in frontier_<benchmark>.md",
            *quality_lines(runs),
            *provenance_lines(runs),
        ],
    )


def figure(data: pd.DataFrame, bench: str, footer: list[str]) -> Figure:
    """Δ acc vs SD (points, paired 95% CI) against τ (a) and against the tok/s ratio vs SD (b)."""
    fig, axes = style.subplots(1, 2, width="double", aspect=0.8)
    rules = [m for m in dict.fromkeys(data["method"]) if m != "sd"]
    sd = data[data["method"] == "sd"]
    for ax, x, xlabel in (
        (axes[0], "tau", "mean acceptance length τ"),
        (axes[1], "speedup_vs_sd", "tok/s ÷ SD's (paired)"),
    ):
        ax.axhline(0.0, color="0.6", lw=0.8)
        ax.axhline(TOLERANCE, color="0.6", lw=0.8, ls=":")
        for i, m in enumerate(rules):
            g = data[data["method"] == m].sort_values(x)
            yerr = np.vstack(
                [
                    g["delta_acc_pp_vs_sd"] - g["delta_acc_pp_vs_sd_lo"],
                    g["delta_acc_pp_vs_sd_hi"] - g["delta_acc_pp_vs_sd"],
                ]
            )
            ax.errorbar(
                g[x],
                g["delta_acc_pp_vs_sd"],
                yerr=yerr,
                color=style.COLORS[i % len(style.COLORS)],
                marker=RULE_MARKERS[i % len(RULE_MARKERS)],
                ls=style.LINESTYLES[i // len(style.COLORS) % len(style.LINESTYLES)],
                ms=4,
                lw=1.2,
                capsize=2,
                elinewidth=0.7,
                label=RULE_LABEL.get(m, m),
            )
        sd_x = float(sd["tau"].iloc[0]) if x == "tau" and len(sd) else 1.0
        ax.plot([sd_x], [0.0], marker="*", ms=11, color="0.2", ls="none", label="SD (exact)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("Δ acc vs SD (points)")
    axes[0].set_title(BENCH_LABEL[bench], loc="left")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, frameon=False)
    style.panel_labels(axes)
    return Figure(
        stem=f"{NAME}_{bench}_plot",
        caption=(
            f"{BENCH_LABEL[bench]}: (a) paired accuracy difference vs SD (points, Newcombe 95% CI) against τ; "
            f"(b) the same against the tok/s ratio vs SD on the same items. One line per rule through its "
            f"settings; dotted line: {TOLERANCE:g} points."
        ),
        fig=fig,
        data=data,
        footer=footer,
    )


def footer_lines(runs: pd.DataFrame, cells: list[Cell], bench: str) -> list[str]:
    ns = sorted({c.n for c in cells})
    L = sorted({int(x) for x in runs.loc[runs["method"] != "ar", "L"]})
    return [
        f"{BENCH_LABEL[bench]}: n = {'/'.join(map(str, ns))} items per setting (the same items in every row), "
        f"L = {'/'.join(map(str, L))}, greedy, batch size {'/'.join(map(str, sorted(set(runs['batch_size']))))}, "
        f"max_new_tokens {int(runs['max_new_tokens'].max())}; every row is one run, compared with SD (and AR) "
        "on the same items",
        f"cells: {CI_NOTE}",
        f"{SPEEDUP_NOTE}; CPU throughput: a ratio measured on this machine's engine, not a GPU claim",
        f"{DELTA_ACC_NOTE}",
        "differ from AR: items whose output token ids differ from the autoregressive run's; accepted ≠ argmax: "
        "accepted draft tokens that differ from the target's greedy token, per accepted draft token",
        cap_note({BENCH_LABEL[bench]: cells}),
        *quality_lines(runs),
        *provenance_lines(runs),
    ]


def build(selected: pd.DataFrame) -> Artefact:
    """Per benchmark a table and a figure; then the summary table across benchmarks."""
    art, cache = Artefact(NAME), ItemCache()
    runs = frontier_runs(selected) if not selected.empty else selected
    frames, sd_ref, used = [], {}, []
    for bench in BENCHMARKS:
        b = runs[runs["dataset"] == bench]
        if b.empty or not (b["method"] == "sd").any():
            continue
        for pair in sorted(b["pair"].unique()):
            pr = b[b["pair"] == pair]
            data, display, cells = benchmark_rows(pr, cache)
            if data.empty:
                continue
            lines = footer_lines(pr, cells, bench)
            if len(b["pair"].unique()) > 1:
                display.insert(0, "Pair", pair)
            stem = f"{NAME}_{bench}" + (f"_{pair}" if len(b["pair"].unique()) > 1 else "")
            art.tables.append(
                Table(
                    stem=stem,
                    title=f"Frontier, {BENCH_LABEL[bench]}: every rule and setting vs SD (paired)",
                    data=data,
                    display=display,
                    footer=lines,
                )
            )
            art.figures.append(figure(data, bench, lines))
            frames.append(data)
            sd_row = data[data["method"] == "sd"].iloc[0]
            sd_ref.setdefault(
                bench,
                (float(sd_row["tau"]), int(sd_row["n"]), float(sd_row["accuracy_pct"]) / 100.0),
            )
            used.append(pr)
    art.runs = pd.concat(used).drop_duplicates("run_id") if used else selected.iloc[0:0]
    if frames:
        best = best_within_tolerance(pd.concat(frames))
        art.tables.insert(0, summary_table(best, sd_ref, art.runs))
    return art
