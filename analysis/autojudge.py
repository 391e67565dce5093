"""What Tables 8-9 and Figs. 1, 5, 6 share: the Auto-Judge runs of one benchmark, the judge's record, footers
and the accuracy-vs-tau plot.

Reads run records (:func:`analysis.load.load_runs`) and the judge records ``results/autojudge/judges/<key>/judge.json``
written by ``runners.autojudge.train`` (a record like any run's summary; analysis computes nothing on models).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from analysis.load import one_setting
from runners.paths import results_dir

METHODS = {"sd": "SD", "autojudge": "AJ", "autojudge_dropmatch": "AJ+DM"}


def select(runs: pd.DataFrame, dataset: str, profile: str | None, backend: str = "hf") -> pd.DataFrame:
    """Complete greedy batch-1 runs of SD / AJ / AJ+DM on ``dataset`` (one setting: same items and cap)."""
    if runs.empty:
        return runs
    r = runs[(runs["dataset"] == dataset) & runs["method"].isin(list(METHODS)) & (runs["temperature"] == 0.0)
             & (runs["backend"] == backend) & (runs["batch_size"] == 1) & runs["complete"]]
    if profile is not None:
        r = r[r["profile"] == profile]
    if r.empty:
        return r
    r = r.assign(threshold=r["threshold"].astype(float), p_drop=pd.to_numeric(r["p_drop"], errors="coerce"))
    return one_setting(r, cell=("method", "L", "threshold", "p_drop", "judge_key"))


def judge_record(key: str) -> dict | None:
    path = results_dir() / "autojudge" / "judges" / str(key) / "judge.json"
    return json.loads(path.read_text()) if path.is_file() else None


def recall_at(info: dict, threshold: float) -> float | None:
    """Validation recall of important mismatches at ``threshold`` (rejected iff ``p >= threshold``)."""
    p, y = np.asarray(info.get("val_p") or []), np.asarray(info.get("val_y") or [])
    if not (y == 1).any():
        return None
    rejected = p >= threshold if threshold < 1.0 else np.zeros_like(p, dtype=bool)
    return float((rejected & (y == 1)).sum() / (y == 1).sum())


def judge_footer(runs: pd.DataFrame, thresholds) -> list[str]:
    """Mining size, data source, judge metrics and thresholds of the judge(s) these runs used."""
    lines = []
    for key in sorted(k for k in runs.get("judge_key", pd.Series(dtype=object)).dropna().unique()):
        info = judge_record(key)
        if info is None:
            lines.append(f"judge {key}: record missing (results/autojudge/judges/{key}/judge.json)")
            continue
        m, jm = info.get("mining") or {}, info["judge"]["mining"]
        auc = info.get("roc_auc_val")
        rec = ", ".join(f"{t:g}: {'n/a' if recall_at(info, t) is None else f'{100 * recall_at(info, t):.0f}%'}"
                        for t in thresholds)
        lines += [
            f"judge {key} ({info['judge'].get('name')}, features {info['features']}, label '{jm['label']}'): mined "
            f"{m.get('num_samples')} prompts of {jm['dataset']}/{jm['split']} from item {jm['offset']} "
            f"({m.get('num_skipped') or 0} without a final answer within the cap, skipped) "
            f"(source {m.get('data_source')}; max_new_tokens {jm.get('max_new_tokens')}): {info['num_mismatches']} "
            f"mismatches, {info['num_important']} important; mining took {float(m.get('wall_s') or 0):.0f} s",
            f"judge training: {info['num_train_prompts']}/{info['num_val_prompts']} prompts train/val "
            f"({info['num_train']}/{info['num_val']} mismatches), logistic regression C={info.get('C')}, "
            f"val ROC AUC {'n/a' if auc is None else f'{auc:.3f}'}" + (" (one class only: constant head)"
                                                                       if info.get("degenerate") else ""),
            f"recall of important mismatches on the val split at each threshold: {rec}",
        ]
        if jm["split"] != "train":
            lines.append(f"no {jm['dataset']} train split offline: the judge was mined on the held-out {jm['split']} "
                         f"items >= {jm['offset']}, which the table never evaluates")
    return lines


def points(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: method label, L, threshold, p_drop, accuracy (%), tau, tok/s, n."""
    return pd.DataFrame({
        "method": runs["method"].map(METHODS), "L": runs["L"].astype(int), "threshold": runs["threshold"],
        "p_drop": [p if m == "autojudge_dropmatch" else np.nan for m, p in zip(runs["method"], runs["p_drop"])],
        "accuracy": 100.0 * runs["accuracy"].astype(float), "tau": runs["tau"].astype(float),
        "tok_per_s": runs["tok_per_s"].astype(float), "n": runs["n"].astype(int), "run_id": runs["run_id"],
    }).sort_values(["method", "p_drop", "threshold"], na_position="first").reset_index(drop=True)


def plot_curves(ax, pts: pd.DataFrame, p_drop: float | None, title: str) -> None:
    """Accuracy vs tau: AJ and AJ+DM (at ``p_drop``) over thresholds (labelled), SD as a star."""
    aj = pts[pts["method"] == "AJ"].sort_values("threshold")
    dm = pts[(pts["method"] == "AJ+DM") & ((pts["p_drop"] == p_drop) if p_drop is not None else True)].sort_values("threshold")
    for g, style, label in ((aj, "o-", "Auto-Judge"), (dm, "s-", "Auto-Judge + DM")):
        if not g.empty:
            ax.plot(g["tau"], g["accuracy"], style, label=label)
            for _, r in g.iterrows():
                ax.annotate(f"{r['threshold']:g}", (r["tau"], r["accuracy"]), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
    for _, r in pts[pts["method"] == "SD"].iterrows():
        ax.plot([r["tau"]], [r["accuracy"]], "k*", ms=10, label=f"SD (L={int(r['L'])})")
    ax.set(xlabel=r"mean acceptance length $\tau$", ylabel="accuracy (%)", ylim=(-5, 105), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
