"""p_drop x K sensitivity: tau and accuracy of DropMatch vs p_drop, one line per K (SD as a dashed line).

Not a paper figure: the paper fixes p_drop = 0.3, K = 5; this shows what moving them does.
Reads every complete DropMatch run of the chosen dataset / L / profile.

    python -m analysis.figures.sensitivity [--profile default] [--dataset gsm8k] [--L 5]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.load import load_runs, one_setting  # noqa: E402
from analysis.render import artefact_dir, provenance_lines, write_table  # noqa: E402


def sensitivity_frame(runs: pd.DataFrame, dataset: str, L: int, method: str = "dropmatch") -> pd.DataFrame:
    """One row per (K, p_drop): tau, accuracy (%), tok/s, n; all from one setting (:func:`one_setting`)."""
    r = runs[(runs["dataset"] == dataset) & (runs["L"] == L) & (runs["method"] == method) & runs["complete"]
             & (runs["temperature"] == 0.0)]
    if r.empty:
        return pd.DataFrame(columns=["K", "p_drop", "tau", "accuracy", "tok_per_s", "n", "run_id"])
    r = one_setting(r, cell=("K", "p_drop"))
    out = pd.DataFrame({
        "K": r["K"].astype(int), "p_drop": r["p_drop"].astype(float), "tau": r["tau"].astype(float),
        "accuracy": 100.0 * r["accuracy"].astype(float), "tok_per_s": r["tok_per_s"].astype(float), "n": r["n"],
        "run_id": r["run_id"],
    })
    return out.sort_values(["K", "p_drop"]).reset_index(drop=True)


def plot(frame: pd.DataFrame, sd: pd.Series | None, title: str, out_stem) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 3.2), constrained_layout=True)
    for K, g in frame.groupby("K"):
        axes[0].plot(g["p_drop"], g["tau"], marker="o", label=f"K={K}")
        axes[1].plot(g["p_drop"], g["accuracy"], marker="o", label=f"K={K}")
    if sd is not None:
        axes[0].axhline(float(sd["tau"]), ls="--", c="gray", label="SD")
        if pd.notna(sd["accuracy"]):
            axes[1].axhline(100.0 * float(sd["accuracy"]), ls="--", c="gray", label="SD")
    axes[0].set(xlabel="$p_{drop}$", ylabel=r"mean acceptance length $\tau$")
    axes[1].set(xlabel="$p_{drop}$", ylabel="accuracy (%)", ylim=(-5, 105))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(f"{out_stem}.png", dpi=200)
    fig.savefig(f"{out_stem}.pdf")
    plt.close(fig)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--dataset", default="gsm8k")
    ap.add_argument("--L", type=int, default=5)
    a = ap.parse_args(argv)
    runs = load_runs()
    if not runs.empty and a.profile != "any":
        runs = runs[runs["profile"] == a.profile]
    frame = sensitivity_frame(runs, a.dataset, a.L) if not runs.empty else pd.DataFrame()
    if frame.empty:
        print(f"[sensitivity] no DropMatch runs for dataset={a.dataset} L={a.L} profile={a.profile}")
        return frame
    sd_runs = runs[(runs["dataset"] == a.dataset) & (runs["L"] == a.L) & (runs["method"] == "sd") & runs["complete"]]
    if not frame.empty and not sd_runs.empty:   # SD of the same items and cap as the DropMatch lines
        ref = runs[runs["run_id"].isin(frame["run_id"])].iloc[0]
        sd_runs = sd_runs[(sd_runs["n_expected"] == ref["n_expected"]) & (sd_runs["offset"] == ref["offset"])
                          & (sd_runs["max_new_tokens"] == ref["max_new_tokens"])]
    sd = sd_runs.sort_values("date_utc", ascending=False).iloc[0] if not sd_runs.empty else None
    used = runs[runs["run_id"].isin(set(frame["run_id"]) | ({sd["run_id"]} if sd is not None else set()))]
    out = artefact_dir("sensitivity")
    title = f"DropMatch sensitivity, {a.dataset}, L={a.L}, n={int(frame['n'].max())}"
    plot(frame, sd, title, out / "sensitivity")
    write_table(frame.round(3), "sensitivity", title=title, footer=provenance_lines(used))
    print(f"[analysis] wrote {out / 'sensitivity'}.{{png,pdf}}")
    return frame


if __name__ == "__main__":
    main()
