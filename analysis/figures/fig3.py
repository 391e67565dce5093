"""Figure 3: semantic similarity across K = 5 MC-dropout decoding paths on Spec-Bench prompts.

Paper: DropMatch (arXiv 2603.03333) Fig. 3: for p_drop = 0.1 and 0.3, a KxK matrix of cosine similarity of
Sentence-BERT embeddings of the paths' outputs and a KxK matrix of semantic consistency from an entailment
model (bidirectional entailment, Kuhn et al. 2023); H1-HK = the paths; darker = higher. Each cell is the mean
over prompts. The entailment panels show the bidirectional entailment score min(P(i entails j), P(j entails i));
Kuhn et al.'s 0/1 relation (both directions > 0.5) is in the CSV and the summary table.

Reads records only: the ``method=similarity`` runs (``runners/measure/similarity.py``; one per p_drop) of one
pair and dataset (the most frequent), whose lines hold each prompt's SBERT cosine matrix and the judge's
directed entailment probabilities, measured on the outputs of the ``method=dropout_path`` runs.

    ./reproduce.sh fig3      (= python -m runners.main -m experiment=fig3; ... -m experiment=fig3_measure; render)
    python -m analysis.render fig3 --profile default
Writes results/fig3/fig3.{png,pdf,csv,md} (figure; CSV = every matrix, long form) and
fig3_summary.{md,csv,tex} (mean off-diagonal scores per p_drop with 95 % bootstrap intervals over prompts).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis import style
from analysis.artefact import Artefact, Figure, Profile, Table, of_profile
from analysis.cells import est_columns
from analysis.footer import provenance_lines
from analysis.measure_runs import lines_of
from analysis.similarity import bidirectional, off_diagonal_mean
from analysis.stats import B_DEFAULT, SEED, Estimate, fmt, mean_ci
from analysis.traces import dedupe

NAME = "fig3"
# Runs the figure reads through its similarity runs (their source_runs), not through select(): the single-path
# decodes of conf/experiment/fig3.yaml (runners.sweep.artefact_points asks select() of every other point)
INPUT_METHODS = ("dropout_path",)
PANEL = "entailment_soft"  # the entailment panels: min(P(i=>j), P(j=>i))
METRICS = {
    "cosine": "mean off-diag cosine",
    "entailment": "mean off-diag bidirectional entailment",
    "entailment_soft": "mean off-diag soft entailment",
}


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """``method=similarity`` runs of the profile, of the most frequent (pair, dataset); one per p_drop and K
    (:func:`analysis.traces.dedupe`: complete first, then the most samples, then the newest)."""
    r = of_profile(runs, profile)
    if r.empty:
        return r
    r = r[r["method"] == "similarity"]
    if r.empty:
        return r
    pair, dataset = r.groupby(["pair", "dataset"]).size().sort_values(ascending=False).index[0]
    return dedupe(r[(r["pair"] == pair) & (r["dataset"] == dataset)])


def prompt_matrices(line: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """One prompt's ``[K, K]`` cosine, bidirectional (0/1) and soft entailment matrices (float64)."""
    binary, soft = bidirectional(np.asarray(line["entail_p"], dtype=np.float64))
    return {
        "cosine": np.asarray(line["cosine"], dtype=np.float64),
        "entailment": binary,
        "entailment_soft": soft,
    }


def matrices(lines: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Mean over a run's prompt lines of each matrix of :func:`prompt_matrices`."""
    per = [prompt_matrices(ln) for ln in lines]
    return {k: np.mean([m[k] for m in per], axis=0) for k in METRICS}


def off_diagonal_cis(lines: Sequence[Mapping[str, Any]]) -> dict[str, Estimate]:
    """Mean over prompts of each prompt's mean off-diagonal score, with its bootstrap interval over prompts."""
    per = [prompt_matrices(ln) for ln in lines]
    return {k: mean_ci([off_diagonal_mean(m[k]) for m in per]) for k in METRICS}


def matrices_frame(mats: Mapping[float, Mapping[str, np.ndarray]]) -> pd.DataFrame:
    """Long CSV form: p_drop, metric, row (H_i), col (H_j), value."""
    rows = []
    for p, by_metric in sorted(mats.items()):
        for metric, m in by_metric.items():
            for i in range(m.shape[0]):
                for j in range(m.shape[1]):
                    rows.append(
                        {
                            "p_drop": p,
                            "metric": metric,
                            "row": f"H{i + 1}",
                            "col": f"H{j + 1}",
                            "value": float(m[i, j]),
                        }
                    )
    return pd.DataFrame(rows)


COLORBAR = {
    "cosine": "cosine similarity",
    "entailment": "share of prompts: entailment both ways",
    "entailment_soft": r"min(P(i$\Rightarrow$j), P(j$\Rightarrow$i))",
}


def figure(
    mats: Mapping[float, Mapping[str, np.ndarray]],
    entail_key: str = PANEL,
    *,
    judge: str | None = None,
    sbert: str | None = None,
    prompts: int | None = None,
) -> tuple[Any, list[str]]:
    """The paper layout in :mod:`analysis.style`: one row per p_drop, (cosine | entailment) heatmaps, values
    written in the cells, each colourbar labelled with its score; axes name the paths H_i, H_j and a line
    under the panels says what H1-HK are and which judge and SBERT model scored them (``judge``, ``sbert``,
    ``prompts``: as recorded). Returns ``(fig, panel labels)``, panels in reading order."""
    ps = sorted(mats)
    fig, axes = style.subplots(len(ps), 2, width="double", aspect=0.85)
    names = {
        "cosine": "cosine (SBERT)",
        "entailment": "bidirectional entailment (0/1)",
        "entailment_soft": "entailment score",
    }
    for r, p in enumerate(ps):
        for c, key in enumerate(("cosine", entail_key)):
            ax = axes[2 * r + c]
            m = np.asarray(mats[p][key], dtype=float)
            K = m.shape[0]
            im = ax.imshow(m, cmap="Blues", vmin=0.0, vmax=1.0)
            for i in range(K):
                for j in range(K):
                    ax.text(
                        j,
                        i,
                        f"{m[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="white" if m[i, j] > 0.6 else "black",
                    )
            labels = [f"H{i + 1}" for i in range(K)]
            ax.set_xticks(range(K), labels)
            ax.set_yticks(range(K), labels)
            ax.set(xlabel="path $j$", ylabel="path $i$")
            ax.grid(False)
            ax.set_title(f"$p_{{drop}}$={p:g}: {names[key]}")
            bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
            bar.set_label(COLORBAR[key])
    K = np.asarray(mats[ps[0]]["cosine"]).shape[0]
    note = [
        f"H1-H{K}: the target's K={K} MC-dropout decoding paths (each decodes greedily under its own "
        "dropout masks); cell (i, j): mean over " + (f"{prompts} prompts" if prompts else "prompts")
    ]
    if judge or sbert:
        note.append(
            "; ".join(
                x
                for x in (
                    f"entailment scored by the {judge}" if judge else "",
                    f"cosine of SBERT embeddings: {sbert}" if sbert else "",
                )
                if x
            )
        )
    fig.supxlabel("\n".join(note), fontsize=style.RC["legend.fontsize"])
    return fig, style.panel_labels(axes)


def build(selected: pd.DataFrame) -> Artefact:
    art = Artefact(NAME)
    lines = {float(r["p_drop"]): lines_of(r) for _, r in selected.iterrows()}
    lines = {p: ls for p, ls in sorted(lines.items()) if ls}
    if not lines:
        return art
    runs = selected[[float(p) in lines for p in selected["p_drop"]]]
    mats = {p: matrices(ls) for p, ls in lines.items()}
    n = {p: len(ls) for p, ls in lines.items()}
    judges = sorted({ln["judge"] for ls in lines.values() for ln in ls})
    calls = sum(int(ln["num_judge_calls"]) for ls in lines.values() for ln in ls)
    sbert = sorted({str(ln.get("sbert")) for ls in lines.values() for ln in ls})
    data = summary_frame(lines, mats)
    display = display_frame(data)
    foot = [
        f"n (prompts per p_drop): {', '.join(f'{n[p]} at p_drop={p:g}' for p in n)}; dataset "
        f"{', '.join(sorted(runs['dataset'].unique()))}",
        f"judge: {'; '.join(judges)}; directed judgments asked: {calls} (identical outputs and repeated pairs "
        "are not asked); bidirectional = both directions P(entailment) > 0.5 (Kuhn et al. 2023); soft = min of "
        "the two",
        f"SBERT: {'; '.join(sbert)}",
        f"[95% CI]: percentile bootstrap over prompts (B={B_DEFAULT}, seed {SEED}) of each prompt's mean "
        "off-diagonal score",
        *provenance_lines(runs),
    ]
    fig, panels = figure(
        mats,
        judge="; ".join(judges),
        sbert="; ".join(sbert),
        prompts=min(n.values()) if len(set(n.values())) == 1 else None,
    )
    parts = [
        f"{panels[2 * r]} cosine similarity (SBERT) and {panels[2 * r + 1]} entailment score "
        f"min(P(i⇒j), P(j⇒i)) at p_drop={p:g} (mean over {n[p]} prompts)"
        for r, p in enumerate(lines)
    ]
    caption = (
        f"Figure 3: semantic similarity across MC-dropout paths H1-H{mats[next(iter(mats))]['cosine'].shape[0]}: "
        + "; ".join(parts)
        + f"; entailment by {'; '.join(judges)}"
    )
    art.figures.append(Figure(NAME, caption, fig, matrices_frame(mats), foot))
    art.tables.append(
        Table(
            f"{NAME}_summary",
            "Figure 3: similarity across MC-dropout paths, summary",
            data,
            display,
            foot,
        )
    )
    art.runs = runs
    art.source_runs = source_run_ids(runs)
    return art


def summary_frame(lines: dict[float, list], mats: dict[float, dict]) -> pd.DataFrame:
    """Per p_drop: prompts, paths, each metric's mean off-diagonal score with its interval, identical pairs."""
    rows = []
    for p, ls in lines.items():
        ci = off_diagonal_cis(ls)
        ident = sum(
            int(ln["identical"][i][j])
            for ln in ls
            for i in range(len(ln["identical"]))
            for j in range(i + 1, len(ln["identical"]))
        )
        rows.append(
            {
                "p_drop": p,
                "prompts": len(ls),
                "paths": mats[p]["cosine"].shape[0],
                **{k2: v for k, e in ci.items() for k2, v in est_columns(METRICS[k], e).items()},
                "identical outputs (pairs)": ident,
            }
        )
    return pd.DataFrame(rows)


def display_frame(data: pd.DataFrame) -> pd.DataFrame:
    """:func:`summary_frame` as shown: p_drop as text, each metric ``value [lo, hi]``."""
    return pd.DataFrame(
        {
            "p_drop": [f"{p:g}" for p in data["p_drop"]],
            "prompts": data["prompts"],
            "paths": data["paths"],
            **{
                f"{name} [95% CI]": [
                    fmt(Estimate(v, lo, hi, 1), 3)
                    for v, lo, hi in zip(data[name], data[f"{name}_lo"], data[f"{name}_hi"])
                ]
                for name in METRICS.values()
            },
            "identical outputs (pairs)": data["identical outputs (pairs)"],
        }
    )


def source_run_ids(runs: pd.DataFrame) -> list[str]:
    """The single-path decodes the similarity runs read (``similarity/source_run_ids`` of their summaries)."""
    ids: set[str] = set()
    for d in runs.get("run_dir", pd.Series(dtype=object)).dropna():
        path = Path(str(d)) / "summary.json"
        if path.is_file():
            ids |= set(json.loads(path.read_text()).get("similarity/source_run_ids") or [])
    return sorted(ids)


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
