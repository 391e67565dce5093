"""Figure 5: accuracy vs mean acceptance length of Auto-Judge and Auto-Judge + DropMatch on GSM8K, one panel
per p_drop (paper: 0.2 and 0.3, K=5); the points of a line are the judge thresholds (labelled), SD a star.

Paper: DropMatch Fig. 5 ("a rightward shift of Auto-Judge + DM relative to Auto-Judge indicates increased
acceptance length at comparable accuracy").

    python -m analysis.figures.fig5 [--profile default] [--dataset gsm8k] [--p-drop 0.2,0.3]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.autojudge import judge_footer, plot_curves, points, select  # noqa: E402
from analysis.load import load_runs  # noqa: E402
from analysis.render import artefact_dir, provenance_lines, write_table  # noqa: E402

LABEL = {"gsm8k": "GSM8K 8-shot", "ifeval": "IFEval"}


def render(name: str, dataset: str, p_drops: list[float], profile: str) -> pd.DataFrame:
    """Plot ``results/<name>/<name>.{png,pdf}`` and write its points table; shared by Figs. 5 and 6."""
    runs = select(load_runs(), dataset, None if profile == "any" else profile)
    pts = points(runs) if not runs.empty else pd.DataFrame()
    if pts.empty or not pts["method"].isin(["AJ", "AJ+DM"]).any():
        print(f"[{name}] no complete Auto-Judge runs on {dataset} for profile={profile}; run ./reproduce.sh {name}")
        return pd.DataFrame()
    fig, axes = plt.subplots(1, len(p_drops), figsize=(4.2 * len(p_drops), 3.6), constrained_layout=True, squeeze=False)
    for ax, p in zip(axes[0], p_drops):
        plot_curves(ax, pts, p, f"{LABEL.get(dataset, dataset)}, $p_{{drop}}$={p:g}, K=5")
    out = artefact_dir(name)
    fig.savefig(out / f"{name}.png", dpi=200)
    fig.savefig(out / f"{name}.pdf")
    plt.close(fig)
    thresholds = sorted(t for t in pts["threshold"].dropna().unique())
    write_table(pts.drop(columns=["run_id"]).round(3), name, title=f"{name}: accuracy vs τ, {LABEL.get(dataset, dataset)}",
                footer=[f"n={int(pts['n'].max())} per point; L={int(pts['L'].max())}; thresholds "
                        + ", ".join(f"{t:g}" for t in thresholds), *judge_footer(runs, thresholds), *provenance_lines(runs)])
    print(f"[analysis] wrote {out / name}.{{png,pdf}}")
    return pts


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--dataset", default="gsm8k")
    ap.add_argument("--p-drop", default="0.2,0.3")
    a = ap.parse_args(argv)
    return render("fig5", a.dataset, [float(x) for x in a.p_drop.split(",")], a.profile)


if __name__ == "__main__":
    main()
