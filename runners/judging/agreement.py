"""Agreement between two judges on a fixed calibration subset of the same judged run (pure reads).

The calibration subset of a judged run is its ``n`` questions with the lowest question ids (fixed by the dataset,
not by which questions a judge happened to finish). Two judging runs of the same decode run, protocol and
baseline but different judges are compared on the subset's questions both scored:

- ``single``: Pearson and Spearman correlation of the ratings, mean absolute difference, share of equal ratings;
- ``pairwise`` / ``alpaca_eval``: share of equal outcomes (model better / tie / baseline better; an AlpacaEval
  preference counts as a win above 1.5, a loss below) and Cohen's kappa of those outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from runners.judging.protocols import PROTOCOLS
from runners.judging.runs import judge_runs_of
from runners.records.record import read_samples


def _outcome(v: float) -> int:
    return 1 if v > 0.5 else -1 if v < 0.5 else 0


def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float:
    """Cohen's kappa of two label sequences (``sklearn.metrics.cohen_kappa_score``); NaN when there is nothing to
    compare or the expected agreement is 1 (both judges always give the same single label)."""
    if len(a) == 0 or (len(set(a) | set(b)) == 1):
        return math.nan
    from sklearn.metrics import cohen_kappa_score

    return float(cohen_kappa_score(list(a), list(b)))


def agreement(
    protocol: str,
    lines_a: Iterable[Mapping[str, Any]],
    lines_b: Iterable[Mapping[str, Any]],
    calibration_n: int,
) -> dict:
    """Agreement of two judges' lines on the calibration subset (module docstring).

    Returns:
        ``{"n": questions compared, "question_ids": [...], ...}`` with ``pearson``, ``spearman``,
        ``mean_abs_diff``, ``exact`` (single) or ``exact``, ``kappa`` (pairwise protocols); NaN where undefined.
    """
    value = PROTOCOLS.get(protocol).value
    va = {int(x["question_id"]): value(x) for x in lines_a}
    vb = {int(x["question_id"]): value(x) for x in lines_b}
    subset = sorted(set(va) | set(vb))[: int(calibration_n)]
    both = [q for q in subset if va.get(q) is not None and vb.get(q) is not None]
    a = [float(va[q]) for q in both]
    b = [float(vb[q]) for q in both]
    out: dict[str, Any] = {"n": len(both), "question_ids": both}
    if protocol == "single":
        from scipy.stats import pearsonr, spearmanr

        ok = len(both) >= 2 and len(set(a)) > 1 and len(set(b)) > 1
        out["pearson"] = float(pearsonr(a, b)[0]) if ok else math.nan
        out["spearman"] = float(spearmanr(a, b)[0]) if ok else math.nan
        out["mean_abs_diff"] = sum(abs(x - y) for x, y in zip(a, b)) / len(a) if a else math.nan
        out["exact"] = sum(x == y for x, y in zip(a, b)) / len(a) if a else math.nan
    else:
        oa, ob = [_outcome(x) for x in a], [_outcome(x) for x in b]
        out["exact"] = sum(x == y for x, y in zip(oa, ob)) / len(oa) if oa else math.nan
        out["kappa"] = cohen_kappa(oa, ob)
    return out


def describe(a: Mapping[str, Any]) -> str:
    """One line of numbers for a log or a footer."""
    if a["n"] == 0:
        return "no question scored by both"
    parts = [f"n={a['n']}"]
    for k, label in (
        ("pearson", "Pearson r"),
        ("spearman", "Spearman rho"),
        ("mean_abs_diff", "mean |diff|"),
        ("exact", "equal"),
        ("kappa", "Cohen's kappa"),
    ):
        if k in a:
            v = a[k]
            parts.append(
                f"{label} {'n/a' if v != v else (f'{100 * v:.0f}%' if k == 'exact' else f'{v:.2f}')}"
            )
    return ", ".join(parts)


def pairs_for(root: Path, source_run_ids: Iterable[str], calibration_n: int) -> list[dict]:
    """Every pair of judging runs with different judges on the same decode run, protocol and baseline, compared on
    the calibration subset of ``calibration_n`` questions.

    Returns:
        ``[{"source_run_id", "protocol", "judges": (label a, label b), "runs": (id a, id b), "agreement"}]``.
    """
    groups: dict[tuple, list[tuple[dict, dict, Path]]] = {}
    for c, s, d in judge_runs_of(root, source_run_ids):
        m = c["method"]
        key = (m["source_run_id"], m["protocol"], repr(m.get("baseline")))
        groups.setdefault(key, []).append((c, s, d))
    out = []
    for (src, protocol, _), runs in sorted(groups.items()):
        by_judge: dict[str, tuple[dict, dict, Path]] = {}
        for (
            c,
            s,
            d,
        ) in runs:  # one run per judge identity; a full run is preferred to a calibration one
            ident = repr(sorted(c["judge"]["identity"].items()))
            if ident not in by_judge or c["method"].get("subset") == "all":
                by_judge[ident] = (c, s, d)
        for (_, sa, da), (_, sb, db) in combinations(by_judge.values(), 2):
            a = agreement(
                protocol,
                read_samples(da / "samples.jsonl"),
                read_samples(db / "samples.jsonl"),
                calibration_n,
            )
            out.append(
                {
                    "source_run_id": src,
                    "protocol": protocol,
                    "judges": (sa.get("judge/label"), sb.get("judge/label")),
                    "runs": (da.name, db.name),
                    "agreement": a,
                }
            )
    return out
