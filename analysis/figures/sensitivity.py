"""p_drop x K sensitivity: tau and accuracy of DropMatch vs p_drop, one line per K (SD as a dashed line).

Not a paper figure: the paper fixes p_drop = 0.3, K = 5; this shows what moving them does. Reads every
complete greedy DropMatch run of the profile, one figure and table per (dataset, L) with at least two
(K, p_drop) points (``sensitivity``
for GSM8K at L = 5, else ``sensitivity_<dataset>_L<L>``), with 95 % bootstrap intervals over items as
error bars; the SD reference is the SD run of the same items and cap.

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


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete greedy batch-1 SD and DropMatch (JS) runs of the profile, no trace runs, one backend."""
    r = of_profile(runs, profile)
    r = r[r["method"].isin(["sd", "dropmatch"]) & r["complete"].astype(bool) & (r["temperature"] == 0.0)
          & (r["batch_size"] == 1) & ~r["trace"].astype(bool)]
    return pick_backend(r, profile, default="hf")


def frame(dm: pd.DataFrame, cache: ItemCache) -> tuple[pd.DataFrame, dict[tuple[int, float], Cell]]:
    """One row per (K, p_drop): tau, accuracy (%), tok/s with intervals, n, run_id."""
    cells = {(int(r["K"]), float(r["p_drop"])): cache.cell(r) for _, r in dm.iterrows()}
    rows = [{"K": K, "p_drop": p, "n": c.n, **est_columns("tau", c.tau), **est_columns("accuracy_pct", c.acc),
             **est_columns("tok_per_s", c.tps), "run_id": c.run_id} for (K, p), c in sorted(cells.items())]
    return pd.DataFrame(rows), cells


def plot(data: pd.DataFrame, sd: Cell | None):
    fig, axes = style.subplots(1, 2, width="double", aspect=0.6)
    for i, (K, g) in enumerate(data.groupby("K")):
        for ax, col in zip(axes, ("tau", "accuracy_pct")):
            ax.errorbar(g["p_drop"], g[col], yerr=[g[col] - g[f"{col}_lo"], g[f"{col}_hi"] - g[col]],
                        color=style.COLORS[i % len(style.COLORS)], marker=style.MARKERS[i % len(style.MARKERS)],
                        capsize=2, label=f"K={K}")
    if sd is not None:
        for ax, e in zip(axes, (sd.tau, sd.acc)):
            if e.n:
                ax.axhline(e.value, ls="--", color="0.4", lw=1.0, label="SD")
                ax.axhspan(e.lo, e.hi, color="0.4", alpha=0.12, lw=0)
    for ax in axes:
        ax.set_xticks(sorted(set(data["p_drop"])))
    axes[0].set(xlabel="$p_{drop}$", ylabel=r"mean acceptance length $\tau$")
    axes[1].set(xlabel="$p_{drop}$", ylabel="accuracy (%)", ylim=(-5, 105))
    axes[0].legend()
    return fig, style.panel_labels(axes)


def build(selected: pd.DataFrame) -> Artefact:
    art, cache, used = Artefact(NAME), ItemCache(), []
    dm_all = selected[selected["method"] == "dropmatch"]
    settings = sorted({(d, int(L)) for d, L in zip(dm_all["dataset"], dm_all["L"])}, key=lambda s: (s != DEFAULT, s))
    for dataset, L in settings:
        r = selected[(selected["dataset"] == dataset) & (selected["L"] == L)]
        dm = one_setting(r[r["method"] == "dropmatch"], cell=("K", "p_drop"))
        if len(dm) < 2:  # one (K, p_drop) point is not a sensitivity sweep (Table 6 shows it)
            art.notes.append(f"{dataset} L={L}: one DropMatch setting only, no sensitivity plot")
            continue
        ref = dm.iloc[0]
        sd_runs = r[(r["method"] == "sd") & (r["n_expected"] == ref["n_expected"]) & (r["offset"] == ref["offset"])
                    & (r["max_new_tokens"] == ref["max_new_tokens"])].sort_values("date_utc", ascending=False)
        sd = cache.cell(sd_runs.iloc[0]) if not sd_runs.empty else None
        data, cells = frame(dm, cache)
        runs = pd.concat([dm, sd_runs.iloc[:1]])
        stem = NAME if (dataset, L) == DEFAULT else f"{NAME}_{dataset}_L{L}"
        display = pd.DataFrame({"K": data["K"], "p_drop": data["p_drop"].map(lambda v: f"{v:g}"), "n": data["n"],
                                "τ": [fmt(c.tau) for _, c in sorted(cells.items())],
                                "accuracy (%)": [fmt(c.acc, 1) for _, c in sorted(cells.items())],
                                "tok/s": [fmt(c.tps) for _, c in sorted(cells.items())]})
        sd_line = (f"SD reference (dashed line, band = its CI): τ {fmt(sd.tau)}, accuracy {fmt(sd.acc, 1)}%, "
                   f"tok/s {fmt(sd.tps)}, n={sd.n}") if sd is not None else "SD reference: no SD run of the same items"
        footer = [f"DropMatch JS rule (Eq. 5-7) on {dataset}, L={L}, greedy; n (items per run): "
                  f"{', '.join(map(str, sorted(set(data['n']))))}; max_new_tokens {int(ref['max_new_tokens'])}",
                  f"{CI_NOTE}; error bars = the 95% CI", sd_line, *provenance_lines(runs)]
        title = f"DropMatch sensitivity to p_drop and K ({dataset}, L={L})"
        art.tables.append(Table(stem, title, data, display, footer))
        fig, panels = plot(data, sd)
        art.figures.append(Figure(f"{stem}_plot", f"{title}: {panels[0]} τ vs p_drop, {panels[1]} accuracy vs "
                                  "p_drop; one line per K, SD dashed", fig, data, footer))
        used.append(runs)
    art.runs = pd.concat(used).drop_duplicates("run_id") if used else selected.iloc[0:0]
    return art


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
