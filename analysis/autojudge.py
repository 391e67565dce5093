"""What Tables 8-9 and Figs. 1, 5, 6 share: selecting the Auto-Judge runs, their cells, the judge's footer and
the accuracy-vs-tau plot.

Reads run records (:func:`analysis.load.load_runs`, ``samples.jsonl`` through :class:`analysis.cells.ItemCache`)
and the judge record each Auto-Judge run names (``method.judge.key`` ->
``<results>/autojudge/judges/<key>/judge.json``, written by ``runners.autojudge.train``: sizes, validation
probabilities and labels; analysis computes nothing on models).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import style
from analysis.artefact import Profile, of_profile, pick_backend
from analysis.cells import Cell, ItemCache, est_columns
from analysis.load import one_setting
from analysis.stats import Estimate
from runners.paths import results_dir

METHODS = {"sd": "SD", "autojudge": "AJ", "autojudge_dropmatch": "AJ+DM"}
RULES_NOTE = (
    "AJ = Auto-Judge (exact match, or the judge's p_important < threshold; Garipov et al. 2025); "
    "AJ+DM = AJ OR DropMatch's JS rule (Algorithm 1) per position, then the prefix closure; SD = greedy "
    "exact match; greedy; τ = 1 + accepted/rounds"
)


def select_aj(runs: pd.DataFrame, profile: Profile, datasets: tuple[str, ...]) -> pd.DataFrame:
    """Complete greedy SD / AJ / AJ+DM runs of the profile on ``datasets``, no trace runs, one backend
    (default ``hf``) and one batch size (1 when it has runs, else the most common)."""
    r = of_profile(runs, profile)
    if r.empty:
        return r
    r = r[
        r["method"].isin(list(METHODS))
        & r["dataset"].isin(list(datasets))
        & (r["temperature"] == 0.0)
        & r["complete"].astype(bool)
        & ~r["trace"].astype(bool)
    ]
    r = pick_backend(r, profile, default="hf")
    if r.empty:
        return r
    have = r["batch_size"].value_counts()
    B = 1 if 1 in have.index else sorted(have.index, key=lambda b: (-have[b], b))[0]
    r = one_judge(r[r["batch_size"] == B])
    return r.assign(
        threshold=pd.to_numeric(r["threshold"], errors="coerce"),
        p_drop=pd.to_numeric(r["p_drop"], errors="coerce"),
        K=pd.to_numeric(r["K"], errors="coerce"),
    )


def one_judge(runs: pd.DataFrame) -> pd.DataFrame:
    """SD runs and the AJ / AJ+DM runs of one judge: the newest judge whose ``judge.json`` is found (by its
    ``date_utc``; ties and judges without a record: the one with the most runs). A rebuilt judge (new mining or
    training config) leaves the earlier judge's runs in ``runs/``; a table mixing two judges would compare rules
    that are not the same rule, and a table of the older judge would hide the rebuilt one's runs."""
    aj = runs[runs["method"] != "sd"]
    counts = aj["judge_key"].dropna().value_counts() if "judge_key" in aj else pd.Series(dtype=int)
    if len(counts) <= 1:
        return runs

    def rank(key: str) -> tuple:
        info = judge_record(key, runs)
        return info is not None, str((info or {}).get("date_utc") or ""), counts[key]

    best = max(counts.index, key=rank)
    return runs[(runs["method"] == "sd") | (runs["judge_key"] == best)]


def one_dataset(selected: pd.DataFrame, dataset: str) -> pd.DataFrame:
    """The runs of one dataset, one setting (same items and cap), one run per (method, L, threshold, p_drop, K)."""
    r = selected[selected["dataset"] == dataset]
    return (
        one_setting(r, cell=("method", "L", "threshold", "p_drop", "K", "judge_key"))
        if not r.empty
        else r
    )


def dm_settings(runs: pd.DataFrame) -> list[tuple[float, int]]:
    """Every (p_drop, K) of the AJ+DM runs, the paper's (0.3, 5) first."""
    dm = runs[runs["method"] == "autojudge_dropmatch"]
    found = sorted({(float(p), int(k)) for p, k in zip(dm["p_drop"], dm["K"])})
    return sorted(found, key=lambda s: (s != (0.3, 5), s))


def cells(runs: pd.DataFrame, cache: ItemCache) -> pd.DataFrame:
    """One row per run: label, L, threshold, p_drop, K, the :class:`Cell` and its numbers with 95% CIs."""
    rows = []
    for _, r in runs.iterrows():
        c = cache.cell(r)
        dm = r["method"] == "autojudge_dropmatch"
        rows.append(
            {
                "method": METHODS[r["method"]],
                "L": int(r["L"]),
                "threshold": float(r["threshold"]) if r["method"] != "sd" else math.nan,
                "p_drop": float(r["p_drop"]) if dm else math.nan,
                "K": int(r["K"]) if dm else math.nan,
                "n": c.n,
                **est_columns("accuracy_pct", c.acc),
                **est_columns("tau", c.tau),
                **est_columns("tok_per_s", c.tps),
                "run_id": c.run_id,
                "cell": c,
            }
        )
    cols = ["method", "L", "threshold", "p_drop", "K", "n", "run_id", "cell"]
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=cols)


def first_cell(pts: pd.DataFrame, **match) -> Cell | None:
    """The cell of the first row of ``pts`` whose columns equal ``match`` (NaN never matches), else None."""
    m = pts
    for k, v in match.items():
        m = m[m[k] == v]
    return None if m.empty else m.iloc[0]["cell"]


def judge_record(key: str, runs: pd.DataFrame) -> dict | None:
    """``judge.json`` of judge ``key``: next to the runs' records (``<results>/autojudge``), else the results dir."""
    roots = {Path(str(d)).parent.parent / "autojudge" for d in runs.get("run_dir", [])} | {
        results_dir() / "autojudge"
    }
    for root in sorted(roots):
        path = root / "judges" / str(key) / "judge.json"
        if path.is_file():
            return json.loads(path.read_text())
    return None


def recall_at(info: dict, threshold: float) -> float | None:
    """Validation recall of important mismatches at ``threshold`` (an important one is rejected iff
    ``p_important >= threshold``); None without important validation mismatches."""
    p, y = np.asarray(info.get("val_p") or [], dtype=float), np.asarray(info.get("val_y") or [])
    if not (y == 1).any():
        return None
    rejected = p >= threshold if threshold < 1.0 else np.zeros_like(p, dtype=bool)
    return float((rejected & (y == 1)).sum() / (y == 1).sum())


def judge_footer(runs: pd.DataFrame, thresholds) -> list[str]:
    """Mining size and source, training split, judge metrics (val ROC AUC, recall of important mismatches at
    each threshold) and the thresholds, for every judge the runs used."""
    lines = [f"judge thresholds: {', '.join(f'{t:g}' for t in thresholds) or 'none'}"]
    keys = sorted(k for k in runs.get("judge_key", pd.Series(dtype=object)).dropna().unique())
    if not keys:
        return lines
    for key in keys:
        info = judge_record(key, runs)
        if info is None:
            lines.append(f"judge {key}: record missing (results/autojudge/judges/{key}/judge.json)")
            continue
        m, jm = info.get("mining") or {}, info["judge"]["mining"]
        auc = info.get("roc_auc_val")
        ci = info.get("roc_auc_val_ci")
        auc_text = (
            "n/a"
            if auc is None
            else f"{auc:.3f}"
            + (f" [{ci[0]:.3f}, {ci[1]:.3f}] (95% bootstrap over prompts)" if ci else "")
        )
        cv = (
            info.get("selection") == "cv"
        )  # roc_auc_val / val_p / val_y are then out-of-fold over all prompts
        rec = ", ".join(
            f"{t:g}: {'n/a' if recall_at(info, t) is None else f'{100 * recall_at(info, t):.0f}%'}"
            for t in thresholds
        )
        lines += [
            f"judge {key} ({info['judge'].get('name')}, features {info['features']}, label '{jm['label']}'): mined "
            f"{m.get('num_samples')} prompts of {jm['dataset']}/{jm['split']} from item {jm['offset']} "
            f"({m.get('num_skipped') or 0} without a final answer within the cap, skipped; source "
            f"{m.get('data_source')}; max_new_tokens {jm.get('max_new_tokens')}, at most "
            f"{jm.get('max_mismatches') or 'all'} mismatches per prompt): {info['num_mismatches']} mismatches, "
            f"{info['num_important']} important; mining took {float(m.get('wall_s') or 0):.0f} s",
            (
                f"judge training: C of logistic regression by cross-validation over prompts "
                f"({info.get('num_folds')} folds over {info['num_prompts']} prompts, {info['num_mismatches']} mismatches), "
                f"C={info.get('C')}, refitted on all; out-of-fold ROC AUC {auc_text}"
                if cv
                else f"judge training: {info['num_train_prompts']}/{info['num_val_prompts']} prompts train/val "
                f"({info['num_train']}/{info['num_val']} mismatches), logistic regression C={info.get('C')}, "
                f"val ROC AUC {auc_text}"
            )
            + (" (one class only: constant head)" if info.get("degenerate") else ""),
            f"judge recall of important mismatches {'out of fold' if cv else 'on the val split'} at each threshold: {rec}",
        ]
        if jm["split"] != "train":
            lines.append(
                f"no {jm['dataset']} train split offline: the judge was mined on the held-out {jm['split']} "
                f"items >= {jm['offset']}, which these runs never evaluate"
            )
        if info.get("num_val", 0) < 30:
            lines.append(
                f"NOTE: {info.get('num_val', 0)} {'out-of-fold' if cv else 'validation'} mismatches: the "
                f"judge metrics are indicative only"
            )
    return lines


def setting_lines(runs: pd.DataFrame, pts: pd.DataFrame) -> list[str]:
    """n per cell, output cap, batch size, backend's L, rules."""
    ns = sorted(set(int(n) for n in pts["n"]))
    return [
        RULES_NOTE,
        f"n (items per cell): {'/'.join(map(str, ns))}; max_new_tokens {int(runs['max_new_tokens'].max())}; "
        f"batch size {int(runs['batch_size'].iloc[0])}; L: {', '.join(str(L) for L in sorted(set(pts['L'])))}",
    ]


def err(e: Estimate) -> tuple[float, float]:
    """(value - lo, hi - value), 0 where undefined (for error bars)."""
    if e.n == 0 or math.isnan(e.lo):
        return 0.0, 0.0
    return e.value - e.lo, e.hi - e.value


def plot_curves(ax, pts: pd.DataFrame, p_drop: float | None, K: int | None) -> None:
    """Accuracy vs tau with 95% CIs: AJ and AJ+DM (at ``p_drop``, ``K``) over thresholds, SD stars.

    Each point carries its judge threshold as a label; the labels are moved off each other, the points and the
    error bars by ``adjustText`` (a leader line joins a moved label to its point). The panel's title names
    the AJ+DM setting. No legend here: the caller draws one for the figure (:func:`curves_legend`).
    """
    from adjustText import adjust_text

    aj = pts[pts["method"] == "AJ"].sort_values("threshold")
    dm = pts[(pts["method"] == "AJ+DM") & (pts["p_drop"] == p_drop) & (pts["K"] == K)].sort_values(
        "threshold"
    )
    texts, xs, ys = [], [], []
    for i, (g, label) in enumerate(((aj, "Auto-Judge"), (dm, "Auto-Judge + DM"))):
        if g.empty:
            continue
        xe = np.array([err(c.tau) for c in g["cell"]]).T
        ye = np.array([err(c.acc) for c in g["cell"]]).T
        ax.errorbar(
            g["tau"],
            g["accuracy_pct"],
            xerr=xe,
            yerr=ye,
            color=style.COLORS[i],
            marker=style.MARKERS[i],
            ls=style.LINESTYLES[0],
            capsize=2,
            label=label,
        )
        for _, r in g.iterrows():
            # the point and samples along its two error bars: places a label must not cover
            t, a = r["tau"], r["accuracy_pct"]
            (tl, th), (al, ah) = err(r["cell"].tau), err(r["cell"].acc)
            for f in np.linspace(-1.0, 1.0, 9):
                xs += [t, t + f * (th if f > 0 else tl)]
                ys += [a + f * (ah if f > 0 else al), a]
            texts.append(
                ax.text(
                    r["tau"],
                    r["accuracy_pct"],
                    f"{r['threshold']:g}",
                    fontsize=6,
                    color=style.COLORS[i],
                    ha="center",
                    va="center",
                    bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85},
                    zorder=5,
                )
            )
    for j, (_, r) in enumerate(pts[pts["method"] == "SD"].sort_values("L").iterrows()):
        ax.plot(
            [r["tau"]],
            [r["accuracy_pct"]],
            marker="*",
            ms=8,
            ls="none",
            color=SD_COLORS[j % len(SD_COLORS)],
            label=f"SD (L={int(r['L'])})",
        )
        xs.append(r["tau"])
        ys.append(r["accuracy_pct"])
    ax.set(xlabel=r"mean acceptance length $\tau$", ylabel="accuracy (%)", ylim=(-5, 105))
    if p_drop is not None:
        ax.set_title(f"AJ+DM at $p_{{drop}}$={p_drop:g}, K={K}")
    if texts:
        # an iteration limit, not adjustText's default 1 s time limit: the same labels on every machine and
        # load (its only random draw, for labels on the very same spot, is seeded)
        adjust_text(
            texts,
            x=xs,
            y=ys,
            ax=ax,
            expand=(1.6, 2.2),
            force_text=(0.6, 0.9),
            force_static=(0.3, 0.5),
            max_move=(20, 20),
            arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.4"},
            iter_lim=LABEL_ITERATIONS,
        )


LABEL_ITERATIONS = 150  # adjustText steps (it stops earlier only when nothing overlaps)
SD_COLORS = (
    "#000000",
    "#999999",
)  # SD stars: black, grey (readable on white, unlike the palette's yellow)


def curves_legend(fig, axes) -> None:
    """One legend for the figure, under the panels (labels of the first panel that has each)."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    if seen:
        fig.legend(
            list(seen.values()), list(seen), loc="outside lower center", ncol=min(len(seen), 4)
        )


def points_table(pts: pd.DataFrame) -> pd.DataFrame:
    """The plotted numbers (CSV): no Cell objects."""
    return pts.drop(columns=["cell"]).reset_index(drop=True)
