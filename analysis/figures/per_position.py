"""Per-position acceptance of the Table 6 runs: rate at draft position i vs i, SD vs SD + DropMatch, per L.

One panel per benchmark ((a), (b), ... in the table's benchmark order); colour = method, line style = L.
The rate at position i is ``spec/per_position_rate[i-1]`` of the run's summary: rounds whose accepted prefix
reached position i / rounds (vLLM's ``num_accepted_tokens_per_pos / num_drafts``), so it falls with i and
sums over i to tau - 1. Built by Table 6 (:mod:`analysis.tables.table6`) for each setting it tabulates.

Position i is *verified* in a round only when the round's accepted prefix reached i - 1 (position 1 in every
round). Where no round of a run reached i - 1 (rate at i - 1 is 0, or the run has no rounds), the rate at i is
0 by construction, not a measurement: the panel shows those positions as n/a (not plotted, named in the
panel) and the CSV marks them ``verified = False``. Example: MMLU answers are one letter then a stop, one
round per item, rejected at position 1: only position 1 is measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis import style
from analysis.artefact import Figure
from analysis.cells import ItemCache
from analysis.stats import B_DEFAULT, NAN, SEED, Estimate, ratio_ci

METHOD_STYLE = {"sd": ("SD", 0, "o"), "dropmatch": ("SD+DM", 1, "s")}


COLUMNS = (
    "pair",
    "dataset",
    "method",
    "L",
    "position",
    "rate",
    "rate_lo",
    "rate_hi",
    "verified",
    "n",
    "rounds",
)


def frame(runs: pd.DataFrame, cache: ItemCache | None = None) -> pd.DataFrame:
    """Long form: one row per (pair, dataset, method, L, position) with its rate (the run's summary), the rate's
    95% interval (``rate_lo`` / ``rate_hi``: :func:`position_intervals`, NaN without per-item counts), whether
    any round verified that position (``verified``; see the module docstring), the run's n (items) and its
    rounds (the rate's denominator; NaN without per-item counts)."""
    cache = cache if cache is not None else ItemCache()
    rows = []
    for _, r in runs[runs["method"].isin(list(METHOD_STYLE))].iterrows():
        rates = [float(x) for x in (r["per_position_rate"] or [])]
        if not rates and int(r["L"]) > 0:  # no rounds at all: every position n/a
            rates = [float("nan")] * int(r["L"])
        items = cache.items(r)
        intervals, rounds = position_intervals(items, len(rates))
        for i, rate in enumerate(rates, start=1):
            rows.append(
                {
                    "pair": r["pair"],
                    "dataset": r["dataset"],
                    "method": r["method"],
                    "L": int(r["L"]),
                    "position": i,
                    "rate": rate,
                    "rate_lo": intervals[i - 1].lo,
                    "rate_hi": intervals[i - 1].hi,
                    "verified": bool(rate == rate and (i == 1 or rates[i - 2] > 0)),
                    "n": int(r["n"]),
                    "rounds": rounds,
                }
            )
    cols = list(COLUMNS)
    return pd.DataFrame(rows, columns=cols).sort_values(cols[:5]).reset_index(drop=True)


def position_intervals(items: pd.DataFrame, L: int) -> tuple[list[Estimate], float]:
    """Each draft position's rate, Σ rounds reaching i / Σ rounds over a run's items, with its percentile
    bootstrap interval over items (:func:`analysis.stats.ratio_ci`: the items, not the rounds, are the
    independent units); and the run's rounds. Items without per-position counts (``accepted_per_pos`` empty
    where the item had rounds: records older than the counter) give NaN intervals and NaN rounds."""
    have = items["accepted_per_pos"].map(len) > 0
    if items.empty or bool((~have & (items["rounds"] > 0)).any()):
        return [NAN] * L, float("nan")
    counts = np.array(
        [list(c)[:L] + [0] * (L - len(c[:L])) for c in items["accepted_per_pos"]], dtype=float
    ).reshape(len(items), L)  # [n, L]
    rounds = items["rounds"].to_numpy(dtype=float)
    return [ratio_ci(counts[:, i], rounds) for i in range(L)], float(rounds.sum())


def figure(
    runs: pd.DataFrame,
    stem: str,
    benchmarks: tuple[str, ...],
    labels: dict[str, str],
    footer: list[str],
    cache: ItemCache | None = None,
) -> Figure | None:
    """The figure for the runs of one Table 6 setting (None when no SD/DM run has per-position rates): each
    line with its 95% band over items; the footer gains n and rounds per line and the band's definition.

    Args:
        runs: the table's runs (one pair is plotted per figure; several pairs: one line set per pair).
        stem: file stem; benchmarks: panel order; labels: benchmark display names; footer: the table's
            provenance lines; cache: the table's item cache (each samples.jsonl read once).
    """
    data = frame(runs, cache)
    if data.empty:
        return None
    present = [b for b in benchmarks if b in set(data["dataset"])] + sorted(
        set(data["dataset"]) - set(benchmarks)
    )
    ncols = len(present) if len(present) <= 3 else 2
    nrows = -(-len(present) // ncols)
    fig, axes = style.subplots(
        nrows, ncols, width="double" if len(present) > 1 else "single", aspect=0.55
    )
    for ax in axes[len(present) :]:
        ax.set_visible(False)
    Ls = sorted(set(data["L"]))
    pairs = sorted(set(data["pair"]))
    for ax, b in zip(axes, present):
        na: list[str] = []
        for (pair, method, L), g in sorted(
            data[data["dataset"] == b].groupby(["pair", "method", "L"]),
            key=lambda kv: (kv[0][0], kv[0][1] != "sd", kv[0][2]),
        ):
            label = f"{METHOD_STYLE[method][0]} L={L}" + (f" {pair}" if len(pairs) > 1 else "")
            missing = _draw_line(ax, g, label, method, Ls.index(L))
            if missing:
                na.append(missing)
        if na:
            ax.text(
                0.98,
                0.95,
                "\n".join(na) + "\n(no round's accepted prefix reached i - 1)",
                transform=ax.transAxes,
                ha="right",
                va="top",
                fontsize=style.RC["legend.fontsize"],
                bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "0.6", "alpha": 0.9},
            )
        ax.set(xlabel="draft position $i$", title=labels.get(b, b), ylim=(-0.03, 1.03))
        ax.set_xticks(range(1, max(Ls) + 1, 1 if max(Ls) <= 6 else 2))
    for ax in axes[::ncols]:
        ax.set_ylabel("acceptance rate at $i$")
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=min(len(names), 4))
    axes = axes[: len(present)]
    panels = style.panel_labels(axes)
    caption = (
        "Per-position acceptance rate (rounds whose accepted prefix reaches draft position i / rounds), "
        "SD vs SD+DM; "
        + ", ".join(f"{p} {labels.get(b, b)}" for p, b in zip(panels, present))
        + "; n/a = a position no round reached (its rate is 0 by construction, not measured)"
    )
    return Figure(
        stem=stem,
        caption=caption,
        fig=fig,
        data=data,
        footer=[*footer_counts(data, labels), *footer],
    )


def _draw_line(ax: Any, g: pd.DataFrame, label: str, method: str, style_index: int) -> str | None:
    """One run's rates at its verified positions with their 95% band; returns the panel's n/a note for the
    positions no round reached (None when every position was reached)."""
    _, color, marker = METHOD_STYLE[method]
    shown = g[g["verified"]]
    ax.plot(
        shown["position"],
        shown["rate"],
        color=style.COLORS[color],
        marker=marker,
        linestyle=style.LINESTYLES[style_index % len(style.LINESTYLES)],
        label=label,
    )
    ax.fill_between(
        shown["position"],
        shown["rate_lo"],
        shown["rate_hi"],
        color=style.COLORS[color],
        alpha=0.15,
        linewidth=0,
    )
    if len(shown) == len(g):
        return None
    first = int(g.loc[~g["verified"], "position"].min())
    return f"{label}: i ≥ {first} n/a" if first > 1 else f"{label}: no rounds, n/a"


def footer_counts(data: pd.DataFrame, labels: dict[str, str]) -> list[str]:
    """The figure's n and rounds per plotted line (in ``labels``' benchmark order, SD first), and what its
    bands are."""
    order = {b: i for i, b in enumerate(labels)}
    groups = sorted(
        data.groupby(["dataset", "method", "L"]),
        key=lambda kv: (order.get(kv[0][0], len(order)), kv[0][0], kv[0][1] != "sd", kv[0][2]),
    )
    parts = []
    for (dataset, method, L), g in groups:
        rounds = g["rounds"].iloc[0]
        text = f"{int(rounds)} rounds" if rounds == rounds else "rounds not recorded per item"
        parts.append(
            f"{labels.get(dataset, dataset)} {METHOD_STYLE[method][0]} L={L}: n {int(g['n'].iloc[0])}, {text}"
        )
    return [
        "n (items) and rounds per line: " + "; ".join(parts),
        "bands: 95% CI of each position's rate (Σ rounds reaching i / Σ rounds), percentile bootstrap over "
        f"items (B={B_DEFAULT}, seed {SEED})",
    ]
