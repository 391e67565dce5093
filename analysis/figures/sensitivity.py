"""p_drop x K sensitivity: tau and accuracy of DropMatch vs p_drop, one line per (K, include_target), SD dotted.

Not a paper figure: the paper fixes p_drop = 0.3, K = 5; this shows what moving them does, under both acceptance
rules: ``dropmatch.include_target=false`` (the paper's Algorithm 1: Eq. 6 or Eq. 7 only, so the draft token that
equals the target's own greedy token can be rejected and τ can fall below SD's) and ``true`` (that token is also
accepted: DM accepts a superset of SD). Reads every complete greedy DropMatch run of the profile, one figure and
table per (dataset, L) with at least two (K, p_drop, include_target) points (``sensitivity`` for GSM8K at L = 5,
else ``sensitivity_<dataset>_L<L>``), with 95 % bootstrap intervals over items as error bars; the SD reference
is the SD run of the same items, cap and batch size. Any batch size; the cells of one figure share one.

    python -m analysis.render sensitivity --profile default
"""

from __future__ import annotations

import pandas as pd

from analysis import style
from analysis.artefact import Artefact, Figure, Profile, Table, of_profile, pick_backend
from analysis.cells import CI_NOTE, Cell, ItemCache, est_columns
from analysis.footer import provenance_lines
from analysis.load import one_setting
from analysis.stats import fmt

NAME = "sensitivity"
DEFAULT = ("gsm8k", 5)
CELL = ("K", "include_target", "p_drop")
RULE_NOTE = (
    "include_target: false = the paper's Algorithm 1 (accept a draft token iff Eq. 6 (JS to the heads' "
    "centroid within the heads' spread) or Eq. 7 (it is the heads' majority token) holds; the token equal "
    "to the target's own greedy token can be rejected, so τ can fall below SD's); true = also accept that "
    "token (DM then accepts a superset of SD's tokens); solid lines, filled markers = false; dashed lines, "
    "hollow markers = true"
)

Key = tuple[int, bool, float]


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete greedy SD and DropMatch (JS) runs of the profile, any batch size, no trace runs, one backend."""
    r = of_profile(runs, profile)
    r = r[
        r["method"].isin(["sd", "dropmatch"])
        & r["complete"].astype(bool)
        & (r["temperature"] == 0.0)
        & ~r["trace"].astype(bool)
    ]
    return pick_backend(r, profile, default="hf")


def frame(dm: pd.DataFrame, cache: ItemCache) -> tuple[pd.DataFrame, dict[Key, Cell]]:
    """One row per (K, include_target, p_drop): tau, accuracy (%), tok/s with intervals, n, run_id."""
    cells = {
        (int(r["K"]), bool(r["include_target"]), float(r["p_drop"])): cache.cell(r)
        for _, r in dm.iterrows()
    }
    rows = [
        {
            "K": K,
            "include_target": it,
            "p_drop": p,
            "n": c.n,
            **est_columns("tau", c.tau),
            **est_columns("accuracy_pct", c.acc),
            **est_columns("tok_per_s", c.tps),
            "run_id": c.run_id,
        }
        for (K, it, p), c in sorted(cells.items())
    ]
    return pd.DataFrame(rows), cells


DODGE = 0.06  # sideways shift between series, as a share of the smallest gap between p_drop values


def offsets(data: pd.DataFrame) -> dict[tuple[int, bool], float]:
    """Sideways shift in p_drop of each (K, include_target) series, centred on 0, so series with equal values
    (e.g. the same accuracy) do not hide each other; the CSV keeps the true p_drop."""
    series = sorted({(int(K), bool(it)) for K, it in zip(data["K"], data["include_target"])})
    ps = sorted(set(float(p) for p in data["p_drop"]))
    gap = min((b - a for a, b in zip(ps, ps[1:])), default=0.1)
    return {k: (i - (len(series) - 1) / 2) * DODGE * gap for i, k in enumerate(series)}


def plot(data: pd.DataFrame, sd: Cell | None):
    """Panels (a) τ and (b) accuracy vs p_drop; colour and marker per K, line style per include_target;
    series shifted sideways (:func:`offsets`)."""
    fig, axes = style.subplots(1, 2, width="double", aspect=0.75)
    shift = offsets(data)
    for i, K in enumerate(sorted(set(data["K"]))):
        color, marker = style.COLORS[i % len(style.COLORS)], style.MARKERS[i % len(style.MARKERS)]
        for it, g in data[data["K"] == K].groupby("include_target"):
            for ax, col in zip(axes, ("tau", "accuracy_pct")):
                ax.errorbar(
                    g["p_drop"] + shift[(int(K), bool(it))],
                    g[col],
                    yerr=[g[col] - g[f"{col}_lo"], g[f"{col}_hi"] - g[col]],
                    color=color,
                    marker=marker,
                    ls="--" if it else "-",
                    mfc="none" if it else color,
                    capsize=2,
                    label=f"K={K}" + (", include_target" if it else ""),
                )
    if sd is not None:
        for ax, e in zip(axes, (sd.tau, sd.acc)):
            if e.n:
                ax.axhline(e.value, ls=":", color="0.4", lw=1.0, label="SD")
                ax.axhspan(e.lo, e.hi, color="0.4", alpha=0.12, lw=0)
    for ax in axes:
        ax.set_xticks(sorted(set(data["p_drop"])))
    axes[0].set(xlabel="$p_{drop}$", ylabel=r"mean acceptance length $\tau$")
    axes[1].set(xlabel="$p_{drop}$", ylabel="accuracy (%)", ylim=(-5, 105))
    handles, labels = axes[0].get_legend_handles_labels()
    order = sorted(
        range(len(labels)), key=lambda i: labels[i] == "SD"
    )  # per K: paper's rule over the other, SD last
    fig.legend(
        [handles[i] for i in order],
        [labels[i] for i in order],
        loc="outside lower center",
        ncol=(len(labels) + 1) // 2,
    )
    return fig, style.panel_labels(axes)


def batch_text(batch_size: int) -> str:
    if batch_size == 1:
        return "batch size 1; tok/s = per-item output tokens/s (prefill excluded)"
    return (
        f"batch size {batch_size} (that many items decoded together, one verify forward per round); tok/s = "
        "per-item output tokens / the item's share of its batch's wall time (throughput at that batch size, "
        "not batch-1 latency)"
    )


def build(selected: pd.DataFrame) -> Artefact:
    art, cache, used = Artefact(NAME), ItemCache(), []
    dm_all = selected[selected["method"] == "dropmatch"]
    settings = sorted(
        {(d, int(L)) for d, L in zip(dm_all["dataset"], dm_all["L"])},
        key=lambda s: (s != DEFAULT, s),
    )
    for dataset, L in settings:
        r = selected[(selected["dataset"] == dataset) & (selected["L"] == L)]
        dm = one_setting(
            r[r["method"] == "dropmatch"],
            cell=CELL,
            extra=("batch_size", "majority"),
            artefact=NAME,
        )
        if len(dm) < 2:  # one (K, p_drop) point is not a sensitivity sweep (Table 6 shows it)
            art.notes.append(f"{dataset} L={L}: one DropMatch setting only, no sensitivity plot")
            continue
        ref = dm.iloc[0]
        batch = int(ref["batch_size"])
        sd_runs = r[
            (r["method"] == "sd")
            & (r["n_expected"] == ref["n_expected"])
            & (r["offset"] == ref["offset"])
            & (r["max_new_tokens"] == ref["max_new_tokens"])
            & (r["batch_size"] == batch)
        ].sort_values("date_utc", ascending=False)
        sd = cache.cell(sd_runs.iloc[0]) if not sd_runs.empty else None
        data, cells = frame(dm, cache)
        runs = pd.concat([dm, sd_runs.iloc[:1]])
        stem = NAME if (dataset, L) == DEFAULT else f"{NAME}_{dataset}_L{L}"
        ordered = [c for _, c in sorted(cells.items())]
        display = pd.DataFrame(
            {
                "K": data["K"],
                "include_target": data["include_target"].map(str).str.lower(),
                "p_drop": data["p_drop"].map(lambda v: f"{v:g}"),
                "n": data["n"],
                "τ": [fmt(c.tau) for c in ordered],
                "accuracy (%)": [fmt(c.acc, 1) for c in ordered],
                "tok/s": [fmt(c.tps) for c in ordered],
            }
        )
        sd_line = (
            (
                f"SD reference (dotted line, band = its CI): τ {fmt(sd.tau)}, accuracy {fmt(sd.acc, 1)}%, "
                f"tok/s {fmt(sd.tps)}, n={sd.n}"
            )
            if sd is not None
            else "SD reference: no SD run of the same items"
        )
        footer = [
            f"DropMatch JS rule (Eq. 5-7, majority: {ref['majority']}) on {dataset}, L={L}, greedy; "
            f"n (items per run): {', '.join(map(str, sorted(set(data['n']))))}; "
            f"max_new_tokens {int(ref['max_new_tokens'])}; {batch_text(batch)}",
            RULE_NOTE,
            f"{CI_NOTE}; error bars = the 95% CI",
            sd_line,
            *provenance_lines(runs),
        ]
        title = f"DropMatch sensitivity to p_drop and K ({dataset}, L={L})"
        art.tables.append(Table(stem, title, data, display, footer))
        fig, panels = plot(data, sd)
        art.figures.append(
            Figure(
                f"{stem}_plot",
                f"{title}: {panels[0]} τ vs p_drop, {panels[1]} accuracy vs "
                "p_drop; one colour per K, solid = paper's rule (include_target=false), dashed = "
                "include_target=true, SD dotted; the series are drawn a little apart along p_drop "
                f"(±{DODGE * 1.5:.2f} of the p_drop step at most) so equal values do not hide each other",
                fig,
                data,
                footer,
            )
        )
        used.append(runs)
    art.runs = pd.concat(used).drop_duplicates("run_id") if used else selected.iloc[0:0]
    return art


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
