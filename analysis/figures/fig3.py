"""Figure 3: semantic similarity across K = 5 MC-dropout decoding paths on Spec-Bench prompts.

Paper: DropMatch (arXiv 2603.03333) Fig. 3: for p_drop = 0.1 (a) and 0.3 (b), a 5x5 matrix of cosine
similarity of Sentence-BERT embeddings of the paths' outputs and a 5x5 matrix of semantic consistency
from an entailment model (bidirectional entailment, Kuhn et al. 2023); H1-H5 = the paths; darker =
higher. Each cell is the mean over prompts. The entailment panel shows by default the bidirectional
entailment score min(P(i entails j), P(j entails i)); ``--score binary`` shows Kuhn et al.'s 0/1 relation
(both directions > 0.5) instead. Both are in fig3_matrices.csv and fig3.md.

Reads records only: the ``method=similarity`` runs (``runners/measure/similarity.py``; one per p_drop), whose
lines hold each prompt's SBERT cosine matrix and the judge's directed entailment probabilities, measured on
the outputs of the ``method=dropout_path`` runs (``dropmatch.path`` = 1..K).

    ./reproduce.sh fig3      (= python -m runners.main -m experiment=fig3; ... -m experiment=fig3_measure; this)
    python -m analysis.figures.fig3 [--profile default] [--score soft|binary] [--p-drops 0.1,0.3]
Writes results/fig3/fig3.{png,pdf}, fig3_matrices.csv, fig3.{md,csv,tex} (summary + provenance).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from analysis.render import artefact_dir, write_table
from analysis.similarity import bidirectional, off_diagonal_mean
from analysis.traces import cli, footer, load
from runners.record import read_samples

METHODS = ("similarity",)
PAPER_P_DROPS = (0.1, 0.3)


def matrices(lines: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Mean over a run's prompt lines of the cosine, bidirectional-entailment (binary) and soft-entailment matrices."""
    cos, binary, soft = [], [], []
    for ln in lines:
        cos.append(np.asarray(ln["cosine"], dtype=np.float64))
        b, s = bidirectional(np.asarray(ln["entail_p"], dtype=np.float64))
        binary.append(b)
        soft.append(s)
    return {"cosine": np.mean(cos, axis=0), "entailment": np.mean(binary, axis=0),
            "entailment_soft": np.mean(soft, axis=0)}


def render_figure(mats: Mapping[float, Mapping[str, np.ndarray]], judge_name: str, stem: Path,
                  entail_key: str = "entailment", n_prompts: Mapping[float, int] | None = None,
                  footer_text: str = "") -> list[Path]:
    """Draw the paper layout: one row per p_drop, (cosine | entailment) heatmaps; save PNG and PDF.

    Args:
        mats: ``{p_drop: {"cosine": [K, K], entail_key: [K, K]}}``.
        judge_name: shown in the entailment panel titles (which judge produced them).
        stem: output path without suffix.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ps = sorted(mats)
    fig, axes = plt.subplots(len(ps), 2, figsize=(9.0, 4.2 * len(ps)), squeeze=False)
    for r, p in enumerate(ps):
        entail_title = ("Bidirectional entailment (0/1)" if entail_key == "entailment"
                        else "Entailment score min(P(i=>j), P(j=>i))")
        for c, (key, title) in enumerate((("cosine", "Cosine similarity (SBERT)"), (entail_key, entail_title))):
            ax = axes[r][c]
            m = np.asarray(mats[p][key], dtype=float)
            K = m.shape[0]
            im = ax.imshow(m, cmap="Blues", vmin=0.0, vmax=1.0)
            for i in range(K):
                for j in range(K):
                    ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=9,
                            color="white" if m[i, j] > 0.6 else "black")
            labels = [f"H{i + 1}" for i in range(K)]
            ax.set_xticks(range(K), labels)
            ax.set_yticks(range(K), labels)
            n = (n_prompts or {}).get(p)
            ax.set_title(f"({'ab'[r] if r < 2 else r}) p_drop={p:g}: {title}" + (f"\nn={n} prompts" if n else ""),
                         fontsize=9)
            fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle(f"Semantic similarity across MC-dropout paths; entailment by {judge_name}", fontsize=9)
    if footer_text:
        fig.text(0.5, 0.005, footer_text, ha="center", va="bottom", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.04 if footer_text else 0, 1, 0.97))
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    return paths


def matrices_frame(mats: Mapping[float, Mapping[str, np.ndarray]]) -> pd.DataFrame:
    """Long CSV form: p_drop, metric, row (H_i), col (H_j), value."""
    rows = []
    for p, by_metric in sorted(mats.items()):
        for metric, m in by_metric.items():
            for i in range(m.shape[0]):
                for j in range(m.shape[1]):
                    rows.append({"p_drop": p, "metric": metric, "row": f"H{i + 1}", "col": f"H{j + 1}",
                                 "value": float(m[i, j])})
    return pd.DataFrame(rows)


def main(argv: Iterable[str] | None = None) -> int:
    extra = {
        "--score": {"default": "soft", "choices": ["soft", "binary"],
                    "help": "entailment panel: soft = min(P(i=>j), P(j=>i)) (an entailment score, as the paper's "
                            "panel name); binary = both directions > 0.5 (Kuhn et al.'s equivalence)"},
        "--p-drops": {"default": None, "help": "comma-separated p_drop values to draw (default: all present)"},
    }
    args = cli("Figure 3: semantic similarity across MC-dropout paths", argv, dataset="spec_bench", extra=extra)
    runs = load(args.profile, args.dataset, args.pair, METHODS)
    if args.p_drops and not runs.empty:
        keep = {round(float(x), 6) for x in args.p_drops.split(",")}
        runs = runs[[round(float(p), 6) in keep for p in runs["p_drop"]]]
    lines = {float(r.p_drop): read_samples(Path(r.run_dir) / "samples.jsonl") for r in runs.itertuples(index=False)}
    lines = {p: ls for p, ls in lines.items() if ls}
    if not lines:
        print(f"no method=similarity records on {args.dataset} (profile={args.profile}); run: python -m runners.main "
              "-m experiment=fig3, then python -m runners.main -m experiment=fig3_measure", file=sys.stderr)
        return 1
    used = runs[[float(p) in lines for p in runs["p_drop"]]]
    mats = {p: matrices(ls) for p, ls in sorted(lines.items())}
    n_prompts = {p: len(ls) for p, ls in lines.items()}
    judges = sorted({ln["judge"] for ls in lines.values() for ln in ls})
    calls = sum(int(ln["num_judge_calls"]) for ls in lines.values() for ln in ls)
    sbert = sorted({str(ln.get("sbert")) for ls in lines.values() for ln in ls})
    foot = footer(used, [f"judge: {'; '.join(judges)}; directed judgments asked: {calls} (identical outputs and "
                         f"repeated pairs are not asked); entailment panel: {args.score} (binary = both directions "
                         "P(entailment) > 0.5, Kuhn et al. 2023; soft = min of the two)",
                         f"SBERT: {'; '.join(sbert)}"])
    key = "entailment" if args.score == "binary" else "entailment_soft"
    out_dir = artefact_dir("fig3")
    devices = "; ".join(sorted(str(d) for d in used["device"].dropna().unique()))
    ns = ", ".join(f"{n_prompts[p]}@p={p:g}" for p in sorted(n_prompts))
    short = f"{used['pair'].iloc[0]} | {devices} | {str(used['date_utc'].dropna().max())[:10]} | prompts n={ns}"
    paths = render_figure(mats, "; ".join(judges), out_dir / "fig3", key, n_prompts, footer_text=short)
    matrices_frame(mats).to_csv(out_dir / "fig3_matrices.csv", index=False)
    summary = pd.DataFrame([{
        "p_drop": p, "prompts": n_prompts[p], "paths": m["cosine"].shape[0],
        "mean off-diag cosine": round(off_diagonal_mean(m["cosine"]), 3),
        "mean off-diag bidirectional entailment": round(off_diagonal_mean(m["entailment"]), 3),
        "mean off-diag soft entailment": round(off_diagonal_mean(m["entailment_soft"]), 3),
        "identical outputs (pairs)": sum(int(ln["identical"][i][j]) for ln in lines[p]
                                         for i in range(len(ln["identical"])) for j in range(i + 1, len(ln["identical"]))),
    } for p, m in sorted(mats.items())])
    write_table(summary, "fig3", title="Figure 3: similarity across MC-dropout paths (Spec-Bench), summary",
                footer=foot + [f"figure: {', '.join(p.name for p in paths)}"])
    print(f"[analysis] wrote {', '.join(str(p) for p in paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
