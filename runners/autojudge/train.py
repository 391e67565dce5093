"""Train Auto-Judge's judge head: logistic regression on the mined mismatches' hidden states.

Paper: Garipov et al. 2025 (arXiv 2504.20039) Sec. 3.2; the authors' ``src/train_head_gsm8k.py`` and
``notebooks/train.ipynb``: prompts shuffled with a seed and split 90/10 (train / validation, by prompt,
so the mismatches of one answer never straddle the split), ``StandardScaler`` fitted on the train split,
``LogisticRegression(C)`` for each C of a grid, the C with the best validation ROC AUC kept (optionally
refitted on all prompts), thresholds at quantiles of the validation probabilities.

``train.selection``: ``val`` is the authors' recipe above. ``cv`` is for mining sets of a few prompts (the CPU
profile mines 3), where a 10% validation split is one prompt, often with one class only, so the validation
ROC AUC is undefined and the smallest C wins by default (a head that scores every mismatch at the class rate):
C is chosen by the pooled out-of-fold ROC AUC of a cross-validation over prompts (group k-fold by
prompt, k = min(prompts, 10)), the head is refitted on all prompts, and the judge's metrics are those of the
out-of-fold probabilities (each mismatch scored by a head that never saw its prompt).

    python -m runners.autojudge.train method=autojudge [pair=...] [profile=...]

Writes ``results/autojudge/judges/<judge_key>/judge.pt`` (weight, bias, mean, scale, features) and
``judge.json`` (sizes, C, ROC AUC, validation probabilities and labels, metrics per threshold: recall of
important mismatches = share with ``p >= threshold``, i.e. rejected; precision; share of mismatches accepted).
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from runners.autojudge.artefact import judge_dir, judge_key, mining_identity, root
from runners.autojudge.cli import hydra_entry
from runners.autojudge.mine import decode_rows
from runners.config.errors import ConfigError
from runners.records.io import atomic_write_json
from runners.records.provenance import provenance
from runners.records.record import RunRecord

SELECTIONS = (
    "val",
    "cv",
)  # C chosen on the authors' 90/10 validation split, or by group k-fold CV over prompts
METRIC_THRESHOLDS = tuple(round(x, 2) for x in np.linspace(0.0, 1.0, 21))


def in_dataset_order(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The mined records in the mining data set's order (their ``index``), which the prompt split and the folds
    depend on; records without one (written one prompt at a time, before ``index`` existed) keep their place."""
    # records without an index were written in data-set order from the first prompt: their place is their index
    return [r for _, r in sorted(enumerate(records), key=lambda p: p[1].get("index", p[0]))]


def dataset_arrays(
    records: Sequence[Mapping[str, Any]], features: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X`` ``[N, F]`` float32, ``y`` ``[N]`` (1 = important) and the prompt index of each row ``[N]``."""
    xs, ys, groups = [], [], []
    for g, r in enumerate(records):
        f = r["features"]
        dt = decode_rows(f["dt"], int(f["d_target"]))
        x = (
            dt
            if features == "dt"
            else np.concatenate([decode_rows(f["dd"], int(f["d_draft"])), dt], axis=1)
        )
        xs.append(x)
        ys.extend(int(bool(mm["important"])) for mm in r["mismatches"])
        groups.extend([g] * len(r["mismatches"]))
    width = xs[0].shape[1] if xs else 0
    return (
        (np.concatenate(xs) if xs else np.zeros((0, width), np.float32)),
        np.asarray(ys),
        np.asarray(groups),
    )


def split_prompts(n: int, val_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt indices of the train and validation splits (at least one validation prompt when n >= 2)."""
    order = np.random.default_rng(seed).permutation(n)
    n_val = 0 if n < 2 else max(1, int(round(n * val_fraction)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def threshold_metrics(p: np.ndarray, y: np.ndarray, thresholds: Sequence[float]) -> list[dict]:
    """Per threshold: recall of important mismatches (``p >= t``, rejected), precision, share accepted."""
    out = []
    for t in thresholds:
        rejected = p >= t if t < 1.0 else np.zeros_like(p, dtype=bool)
        tp = int((rejected & (y == 1)).sum())
        out.append(
            {
                "threshold": float(t),
                "recall_important": tp / max(int((y == 1).sum()), 1) if len(y) else None,
                "precision_important": tp / int(rejected.sum()) if rejected.any() else None,
                "accept_rate": float((~rejected).mean()) if len(y) else None,
            }
        )
    return out


def fit_head(
    X: np.ndarray, y: np.ndarray, tr: np.ndarray, va: np.ndarray, C_grid: Sequence[float]
) -> dict:
    """StandardScaler + LogisticRegression per C; keep the best validation ROC AUC (the first C on ties)."""
    scaler = StandardScaler().fit(X[tr])
    scaler.scale_ = np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    Xtr, Xva = scaler.transform(X[tr]), scaler.transform(X[va]) if len(va) else X[:0]
    if len(set(y[tr].tolist())) < 2:  # one class only: a constant head (the class rate, clipped)
        rate = float(np.clip(y[tr].mean() if len(tr) else 0.5, 1e-3, 1 - 1e-3))
        return {
            "scaler": scaler,
            "coef": np.zeros(X.shape[1]),
            "intercept": float(np.log(rate / (1 - rate))),
            "C": None,
            "auc_val": None,
            "auc_train": None,
            "degenerate": True,
        }
    best = None
    for C in C_grid:
        lr = LogisticRegression(C=float(C), max_iter=2000).fit(Xtr, y[tr])
        auc_val = (
            roc_auc_score(y[va], lr.predict_proba(Xva)[:, 1])
            if len(set(y[va].tolist())) == 2
            else None
        )
        score = -1.0 if auc_val is None else auc_val
        if best is None or score > best["score"]:
            best = {
                "score": score,
                "lr": lr,
                "C": float(C),
                "auc_val": auc_val,
                "auc_train": roc_auc_score(y[tr], lr.predict_proba(Xtr)[:, 1]),
            }
    return {
        "scaler": scaler,
        "coef": best["lr"].coef_[0],
        "intercept": float(best["lr"].intercept_[0]),
        "C": best["C"],
        "auc_val": best["auc_val"],
        "auc_train": best["auc_train"],
        "degenerate": False,
    }


def auc_interval(
    p: np.ndarray, y: np.ndarray, groups: np.ndarray, B: int = 2000, seed: int = 0
) -> list[float] | None:
    """95% percentile interval of the ROC AUC of scores ``p`` ``[N]`` for labels ``y`` ``[N]`` (0/1), prompts
    resampled with replacement (``groups`` ``[N]``: a row's prompt; one answer's mismatches are not
    independent, so the prompt is the unit, as in the split). Resamples holding one class only are dropped.

    Returns:
        ``[lo, hi]``, or None when fewer than 2 prompts or one class only.
    """
    prompts = np.unique(groups)
    if len(prompts) < 2 or len(set(np.asarray(y).tolist())) < 2:
        return None
    rows = [np.flatnonzero(groups == g) for g in prompts]
    rng = np.random.default_rng(seed)
    aucs = []
    for _ in range(B):
        idx = np.concatenate([rows[i] for i in rng.integers(0, len(prompts), len(prompts))])
        if 0 < y[idx].sum() < len(idx):
            aucs.append(roc_auc_score(y[idx], p[idx]))
    if not aucs:
        return None
    lo, hi = np.percentile(aucs, [2.5, 97.5])
    return [float(lo), float(hi)]


def prompt_folds(groups: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Group k-fold by prompt: ``[(train rows, held-out rows)]``, every prompt held out once (k <= prompts)."""
    prompts = np.unique(groups)
    k = max(2, min(k, len(prompts)))
    parts = np.array_split(prompts, k)
    return [
        (np.flatnonzero(~np.isin(groups, part)), np.flatnonzero(np.isin(groups, part)))
        for part in parts
    ]


def cv_select(
    X: np.ndarray, y: np.ndarray, groups: np.ndarray, C_grid: Sequence[float], k: int = 10
) -> dict:
    """The C of ``C_grid`` with the best pooled out-of-fold ROC AUC over :func:`prompt_folds`.

    A fold whose training rows hold one class scores its held-out rows at that class rate (clipped).

    Returns:
        ``{"C", "auc_oof" (None when y has one class), "p_oof" [N] float64 (at the chosen C), "num_folds"}``.
    """
    folds = prompt_folds(groups, k)
    best = None
    for C in C_grid:
        p = np.zeros(len(y))
        for tr, va in folds:
            f = fit_head(X, y, tr, va, [C])
            z = f["scaler"].transform(X[va]) @ f["coef"] + f["intercept"]
            p[va] = 1.0 / (1.0 + np.exp(-z))
        auc = roc_auc_score(y, p) if len(set(y.tolist())) == 2 else None
        score = -1.0 if auc is None else auc
        if best is None or score > best["score"]:
            best = {"score": score, "C": float(C), "auc_oof": auc, "p_oof": p}
    return {
        "C": best["C"],
        "auc_oof": best["auc_oof"],
        "p_oof": best["p_oof"],
        "num_folds": len(folds),
    }


def existing_judge(key: str) -> dict | None:
    """``judge.json`` of judge ``key`` when both its files exist (built earlier or committed), else None."""
    out = judge_dir(key)
    if (out / "judge.json").is_file() and (out / "judge.pt").is_file():
        return json.loads((out / "judge.json").read_text())
    return None


def train(
    pair_cfg: Mapping[str, Any],
    judge_cfg: Mapping[str, Any],
    log: Callable[[str], None] | None = None,
) -> dict:
    """Train (or reuse) the judge for ``pair`` and ``method.judge``; return its ``judge.json``.

    Raises:
        RuntimeError: the mining records are missing or unfinished (run the miner first).
        runners.config.validate.ConfigError: ``train.selection`` is not one of :data:`SELECTIONS`.
    """
    log = log or logging.getLogger(__name__).info
    key = judge_key(pair_cfg, judge_cfg)
    out = judge_dir(key)
    if (info := existing_judge(key)) is not None:
        log(f"[train {key}] judge exists ({out}); skipped")
        return info
    record = RunRecord(root() / "mining", mining_identity(pair_cfg, judge_cfg), kind="mine")
    summary = record.existing_summary()
    if summary is None:
        raise RuntimeError(
            f"[train {key}] mining records {record.dir} are missing or unfinished; run "
            f"python -m runners.autojudge.mine (or runners.autojudge.build) first"
        )
    records = in_dataset_order(record.samples())
    t = dict(judge_cfg["train"])
    features = str(judge_cfg["mining"]["features"])
    X, y, groups = dataset_arrays(records, features)
    if len(y) == 0:
        raise RuntimeError(
            f"[train {key}] the {len(records)} mined prompts have no mismatch: nothing to train on"
        )
    selection = str(t.get("selection", "val"))
    if selection not in SELECTIONS:
        raise ConfigError(
            f"method.judge.train.selection={selection!r} is invalid; allowed: {', '.join(SELECTIONS)}"
        )
    fit = select_and_fit(X, y, groups, len(records), t, selection)
    out.mkdir(parents=True, exist_ok=True)
    save_head(out / "judge.pt", fit, features, key)
    info = judge_info(fit, y, t, selection, summary, X.shape[1], len(records))
    info.update(
        judge_key=key, mining_key=record.run_id, pair=pair_cfg["name"], judge=dict(judge_cfg)
    )
    info.update(features=features, **provenance())
    atomic_write_json(out / "judge.json", info)
    log(
        f"[train {key}] {len(y)} mismatches ({int(y.sum())} important) from {len(records)} prompts; C={fit['C']} "
        f"ROC AUC {'out-of-fold' if selection == 'cv' else 'val'}={fit['auc_val']}; wrote {out}"
    )
    return info


def select_and_fit(
    X: np.ndarray,
    y: np.ndarray,
    groups: np.ndarray,
    num_prompts: int,
    t: Mapping[str, Any],
    selection: str,
) -> dict:
    """:func:`fit_head` with C chosen by ``selection`` (module docstring), plus the rows and prompts it was fitted
    and validated on (``tr``, ``va``, ``tr_p``, ``va_p``), the validation probabilities ``p_va`` and
    ``num_folds`` (``cv`` only). ``cv`` validates out of fold on every row."""
    if selection == "cv":
        cv = cv_select(X, y, groups, list(t["C_grid"]))
        everything = np.arange(len(y))
        fit = {**fit_head(X, y, everything, np.arange(0), [cv["C"]]), "auc_val": cv["auc_oof"]}
        prompts = np.unique(groups)
        rows = {
            "tr": everything,
            "va": everything,
            "p_va": cv["p_oof"],
            "num_folds": cv["num_folds"],
            "auc_ci": auc_interval(cv["p_oof"], y, groups) if cv["auc_oof"] is not None else None,
        }
        return {**fit, "tr_p": prompts, "va_p": prompts, **rows}
    tr_p, va_p = split_prompts(num_prompts, float(t["val_fraction"]), int(t["seed"]))
    tr, va = np.flatnonzero(np.isin(groups, tr_p)), np.flatnonzero(np.isin(groups, va_p))
    fit = fit_head(X, y, tr, va, list(t["C_grid"]))
    # validation scores from the head fitted on the train prompts only, also when it is then refitted on all
    z_va = (
        (fit["scaler"].transform(X[va]) @ fit["coef"] + fit["intercept"])
        if len(va)
        else np.zeros(0)
    )
    p_va = 1.0 / (1.0 + np.exp(-z_va))
    ci = auc_interval(p_va, y[va], groups[va]) if fit["auc_val"] is not None else None
    if t.get("refit_on_all") and not fit["degenerate"]:
        fit = {
            **fit_head(X, y, np.arange(len(y)), np.arange(0), [fit["C"]]),
            "auc_val": fit["auc_val"],
        }
    rows = {"tr": tr, "va": va, "p_va": p_va, "auc_ci": ci}
    return {**fit, "tr_p": tr_p, "va_p": va_p, **rows, "num_folds": None}


def save_head(path: Any, fit: Mapping[str, Any], features: str, key: str) -> None:
    """``judge.pt``: the head's weight, bias and the scaler's mean and scale (float32), its features and key."""
    scaler = fit["scaler"]
    torch.save(
        {
            "weight": torch.tensor(fit["coef"], dtype=torch.float32),
            "bias": torch.tensor(fit["intercept"]),
            "mean": torch.tensor(scaler.mean_, dtype=torch.float32),
            "scale": torch.tensor(scaler.scale_, dtype=torch.float32),
            "features": features,
            "key": key,
        },
        path,
    )


def judge_info(
    fit: Mapping[str, Any],
    y: np.ndarray,
    t: Mapping[str, Any],
    selection: str,
    mining: Mapping[str, Any],
    num_features: int,
    num_prompts: int,
) -> dict:
    """What ``judge.json`` says of the fit: data sizes, C, ROC AUC (validation or out of fold) with its 95%
    interval over prompts (:func:`auc_interval`), validation probabilities and labels, metrics per threshold,
    and the mining summary's counts."""
    va, p_va = fit["va"], fit["p_va"]
    q = np.linspace(0.0, 1.0, int(t.get("quantiles", 26)))
    return {
        "num_features": int(num_features),
        "num_prompts": num_prompts,
        "num_train_prompts": len(fit["tr_p"]),
        "num_val_prompts": len(fit["va_p"]),
        "num_mismatches": int(len(y)),
        "num_important": int(y.sum()),
        "num_train": int(len(fit["tr"])),
        "num_val": int(len(va)),
        "selection": selection,
        "num_folds": fit["num_folds"],
        "C": fit["C"],
        "degenerate": fit["degenerate"],
        "roc_auc_train": fit["auc_train"],
        "roc_auc_val": fit["auc_val"],
        "roc_auc_val_ci": fit.get("auc_ci"),
        "val_p": p_va.tolist(),
        "val_y": y[va].tolist(),
        "quantile_thresholds": np.quantile(p_va, q).tolist() if len(va) else [],
        "metrics_val": threshold_metrics(p_va, y[va], METRIC_THRESHOLDS),
        "mining": {
            k: mining.get(k)
            for k in (
                "num_samples",
                "num_mismatches",
                "num_important",
                "data_source",
                "target_accuracy",
                "wall_s",
                "num_skipped",
            )
        },
    }


def main() -> None:
    hydra_entry("train", train)


if __name__ == "__main__":
    sys.exit(main())
