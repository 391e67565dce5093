"""Figure 1: out-of-distribution behaviour of learned acceptance. (a) Auto-Judge (judge mined on GSM8K) keeps a
long mean acceptance length on IFEval but loses accuracy; (b) EAGLE-3 (head trained on English data) keeps
quality but its tau drops on KoMT-Bench (Korean) relative to MT-Bench.

Paper: DropMatch Fig. 1 (a: Llama-3.1-70B Auto-Judge on IFEval; b: Llama-3.3-70B EAGLE3 on KoMT-Bench, L=5).
(a) reads the hf runs of Table 8 / Fig. 6 (SD and AJ at one threshold on GSM8K and IFEval); (b) the vLLM eagle3
runs of Tables 7 / 10 (method sd on mt_bench and komt_bench). On CPU the EAGLE-3 head is random (tau ~ 1):
the panel then shows the mechanism only, and says so.

    python -m analysis.figures.fig1 [--profile default] [--threshold 0.5] [--L 5]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.autojudge import judge_footer, points, select  # noqa: E402
from analysis.load import load_runs  # noqa: E402
from analysis.render import artefact_dir, provenance_lines, write_table  # noqa: E402
from analysis.tables.table7 import RANDOM_HEAD_NOTE, select_eagle_runs  # noqa: E402

PART_A = {"gsm8k": "GSM8K (in domain)", "ifeval": "IFEval (OOD)"}
PART_B = {"mt_bench": "MT-Bench (English)", "komt_bench": "KoMT-Bench (Korean)"}


def part_a(runs: pd.DataFrame, profile: str | None, threshold: float) -> pd.DataFrame:
    rows = []
    for ds, label in PART_A.items():
        sel = select(runs, ds, profile)
        pts = points(sel) if not sel.empty else pd.DataFrame()
        for method in ("SD", "AJ"):
            p = pts[(pts["method"] == method) & ((pts["threshold"] == threshold) if method == "AJ" else True)] if not pts.empty else pts
            if not p.empty:
                r = p.sort_values("L").iloc[-1]
                rows.append({"part": "a", "benchmark": label, "method": method if method == "SD" else f"AJ (thr {threshold:g})",
                             "accuracy": r["accuracy"], "tau": r["tau"], "L": int(r["L"]), "n": int(r["n"]), "run_id": r["run_id"]})
    return pd.DataFrame(rows)


def part_b(runs: pd.DataFrame, profile: str | None, L: int) -> pd.DataFrame:
    sel = select_eagle_runs(runs, profile, tuple(PART_B), {"sd": "EAGLE3"}, 0.3, 5, spec_method="eagle3")
    sel = sel[sel["L"] == L] if not sel.empty else sel
    return pd.DataFrame([{"part": "b", "benchmark": PART_B[r["dataset"]], "method": "EAGLE3", "accuracy": float("nan"),
                          "tau": float(r["tau"]), "L": int(r["L"]), "n": int(r["n"]), "run_id": r["run_id"],
                          "random_head": bool(r["eagle3_random_head"])} for _, r in sel.iterrows()])


def plot(a: pd.DataFrame, b: pd.DataFrame, out_stem) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(11.0, 3.3), constrained_layout=True)
    for ax, col, ylab in ((axes[0], "accuracy", "accuracy (%)"), (axes[1], "tau", r"$\tau$")):
        if not a.empty:
            piv = a.pivot_table(index="benchmark", columns="method", values=col).reindex(list(PART_A.values()))
            piv[sorted(piv.columns, key=lambda m: m != "SD")].plot.bar(ax=ax, rot=0)
        ax.set(ylabel=ylab, xlabel="", title=f"(a) Auto-Judge, trained on math: {ylab}")
        if col == "accuracy":
            ax.set_ylim(0, 105)
    if not b.empty:
        bb = b.set_index("benchmark").reindex([v for v in PART_B.values() if v in set(b["benchmark"])])
        axes[2].bar(bb.index, bb["tau"], color=["tab:blue", "tab:red"][: len(bb)])
    axes[2].set(ylabel=r"$\tau$", title="(b) EAGLE3, trained on English")
    for ax in axes:
        ax.grid(alpha=0.3, axis="y")
        ax.tick_params(axis="x", labelsize=7)
    fig.savefig(f"{out_stem}.png", dpi=200)
    fig.savefig(f"{out_stem}.pdf")
    plt.close(fig)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--threshold", type=float, default=0.5, help="the Auto-Judge threshold shown in (a)")
    ap.add_argument("--L", type=int, default=5, help="EAGLE3 draft length in (b) (paper: 5)")
    a = ap.parse_args(argv)
    runs = load_runs()
    profile = None if a.profile == "any" else a.profile
    pa = part_a(runs, profile, a.threshold) if not runs.empty else pd.DataFrame()
    pb = part_b(runs, profile, a.L) if not runs.empty else pd.DataFrame()
    if pa.empty and pb.empty:
        print(f"[fig1] no runs for profile={a.profile}; run ./reproduce.sh fig1")
        return pa
    frame = pd.concat([pa, pb], ignore_index=True)
    out = artefact_dir("fig1")
    plot(pa, pb, out / "fig1")
    used = runs[runs["run_id"].isin(frame["run_id"])]
    footer = [f"(a) greedy hf runs, batch size 1, AJ threshold {a.threshold:g}; (b) vLLM eagle3 drafting, exact match, L={a.L}; "
              "MT-Bench / KoMT-Bench quality needs a GPT-4 judge (not judged offline)",
              *judge_footer(used[used["method"] == "autojudge"], [a.threshold]), *provenance_lines(used)]
    if pa.empty or pb.empty:
        footer.append(f"pending: part {'a' if pa.empty else 'b'} has no runs yet")
    if "random_head" in frame and frame["random_head"].fillna(False).astype(bool).any():
        footer.append(f"(b) {RANDOM_HEAD_NOTE}")
    write_table(frame.drop(columns=["run_id"]).round(3), "fig1", title="Figure 1: out-of-distribution behaviour",
                footer=footer)
    print(f"[analysis] wrote {out / 'fig1'}.{{png,pdf}}")
    return frame


if __name__ == "__main__":
    main()
