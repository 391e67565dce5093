"""Per-position acceptance of the Table 6 runs: rate at draft position i vs i, SD vs SD + DropMatch, per L.

One panel per benchmark ((a), (b), ... in the table's benchmark order); colour = method, line style = L.
The rate at position i is ``spec/per_position_rate[i-1]`` of the run's summary: rounds whose accepted prefix
reached position i / rounds (vLLM's ``num_accepted_tokens_per_pos / num_drafts``), so it falls with i and
sums over i to tau - 1. Built by Table 6 (:mod:`analysis.tables.table6`) for each setting it tabulates.
"""

from __future__ import annotations

import pandas as pd

from analysis import style
from analysis.artefact import Figure

METHOD_STYLE = {"sd": ("SD", 0, "o"), "dropmatch": ("SD+DM", 1, "s")}


def frame(runs: pd.DataFrame) -> pd.DataFrame:
    """Long form: one row per (pair, dataset, method, L, position) with its rate and the run's n."""
    rows = []
    for _, r in runs[runs["method"].isin(list(METHOD_STYLE))].iterrows():
        for i, rate in enumerate(r["per_position_rate"] or [], start=1):
            rows.append(
                {
                    "pair": r["pair"],
                    "dataset": r["dataset"],
                    "method": r["method"],
                    "L": int(r["L"]),
                    "position": i,
                    "rate": float(rate),
                    "n": int(r["n"]),
                }
            )
    cols = ["pair", "dataset", "method", "L", "position", "rate", "n"]
    return pd.DataFrame(rows, columns=cols).sort_values(cols[:5]).reset_index(drop=True)


def figure(
    runs: pd.DataFrame,
    stem: str,
    benchmarks: tuple[str, ...],
    labels: dict[str, str],
    footer: list[str],
) -> Figure | None:
    """The figure for the runs of one Table 6 setting (None when no SD/DM run has per-position rates).

    Args:
        runs: the table's runs (one pair is plotted per figure; several pairs: one line set per pair).
        stem: file stem; benchmarks: panel order; labels: benchmark display names.
    """
    data = frame(runs)
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
        for (pair, method, L), g in sorted(
            data[data["dataset"] == b].groupby(["pair", "method", "L"]),
            key=lambda kv: (kv[0][0], kv[0][1] != "sd", kv[0][2]),
        ):
            name, color, marker = METHOD_STYLE[method]
            label = f"{name} L={L}" + (f" {pair}" if len(pairs) > 1 else "")
            ax.plot(
                g["position"],
                g["rate"],
                color=style.COLORS[color],
                marker=marker,
                linestyle=style.LINESTYLES[Ls.index(L) % len(style.LINESTYLES)],
                label=label,
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
        "SD vs SD+DM; " + ", ".join(f"{p} {labels.get(b, b)}" for p, b in zip(panels, present))
    )
    return Figure(stem=stem, caption=caption, fig=fig, data=data, footer=footer)
