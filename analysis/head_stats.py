"""Statistics of the MC-dropout heads over the per-position criterion traces of DropMatch runs.

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Table 2 (agreement patterns of the K = 5 heads and the
target probability of the majority token), Table 3 (JS divergence to the centroid when the draft
agrees / disagrees with the majority).

Input: the ``"trace"`` field of sample records written by the HF loop with ``trace: true``: a list per
verification round of dicts of per-position lists (``head_token_ids`` ``[pos][K]``, ``agreement_pattern``,
``majority_target_prob``, ``draft_agrees_majority``, ``js_draft``, ``js_heads_max``, ``accepted_by_js``,
``accepted_by_majority``, ...; see ``criteria.dropmatch_base.dropmatch_trace``). Only positions up to the
first rejection are stored, so each position is a draft token proposed on committed context.

All functions are pure: records in, DataFrames out; no I/O, inputs not mutated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from analysis.stats import NAN, ratio_ci
from criteria.divergence import agreement_pattern_names

# Per-position trace fields copied into the position frame (when present).
POSITION_FIELDS = (
    "agreement_pattern",
    "majority_counts",
    "majority_target_prob",
    "draft_agrees_majority",
    "accepted_by_naive",
    "js_draft",
    "js_heads_max",
    "accepted_by_js",
    "accepted_by_majority",
    "exact_accept",
    "sparse_accept",  # dropmatch.sparse_check_top_n runs: the run's verdict and the sparse one's
)


def position_frame(samples: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per traced draft position of every round of every sample.

    Args:
        samples: sample records (``samples.jsonl`` lines); those without ``"trace"`` are skipped.

    Returns:
        DataFrame with ``sample_id``, ``round``, ``pos``, ``K`` (heads, from ``head_token_ids``) and the
        :data:`POSITION_FIELDS` present in the traces (missing ones are absent or NaN).

    Raises:
        ValueError: a round whose per-position lists have different lengths.
    """
    rows: list[dict[str, Any]] = []
    for s in samples:
        for r, rnd in enumerate(s.get("trace") or []):
            heads = rnd.get("head_token_ids") or []
            n = len(heads)
            for key, values in rnd.items():
                if isinstance(values, list) and len(values) != n:
                    raise ValueError(
                        f"sample {s.get('sample_id')!r} round {r}: {key!r} has {len(values)} "
                        f"positions but head_token_ids has {n}"
                    )
            for p in range(n):
                row = {"sample_id": s.get("sample_id"), "round": r, "pos": p, "K": len(heads[p])}
                row.update({k: rnd[k][p] for k in POSITION_FIELDS if k in rnd})
                rows.append(row)
    cols = ["sample_id", "round", "pos", "K"]
    return pd.DataFrame(rows, columns=None if rows else cols)


def sparse_agreement(positions: pd.DataFrame) -> dict[str, int] | None:
    """Agreement of the sparse variant with the exact rule, from the traces of ``dropmatch.sparse_check_top_n``
    runs (:func:`criteria.verify.verify_round` decides each round both ways on the same dropout masks).

    Args:
        positions: :func:`position_frame` output (traced positions: each round's accepted prefix and the first
            rejected position).

    Returns:
        None when no position carries both verdicts; else ``positions`` / ``positions_equal`` (the verdict at a
        traced position) and ``rounds`` / ``rounds_equal`` (every traced position equal, i.e. the same accepted
        length) counts.
    """
    if positions.empty or not {"exact_accept", "sparse_accept"} <= set(positions.columns):
        return None
    both = positions.dropna(subset=["exact_accept", "sparse_accept"])
    if both.empty:
        return None
    same = both["exact_accept"].astype(bool) == both["sparse_accept"].astype(bool)
    keys = [k for k in ("run_id", "sample_id", "round") if k in both]
    rounds = same.groupby([both[k] for k in keys]).all()
    return {
        "positions": int(len(both)),
        "positions_equal": int(same.sum()),
        "rounds": int(len(rounds)),
        "rounds_equal": int(rounds.sum()),
    }


def _mean(values: Sequence[float]) -> float:
    vals = [
        float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))
    ]
    return sum(vals) / len(vals) if vals else math.nan


def pattern_table(positions: pd.DataFrame, K: int = 5) -> pd.DataFrame:
    """Frequency of each agreement pattern and the mean target probability of the majority token.

    Paper: Table 2 (K = 5: "5" = all heads agree, ..., "1-1-1-1-1" = all differ).

    Args:
        positions: :func:`position_frame` output (rows with another K are ignored).
        K: number of heads.

    Returns:
        One row per pattern of :func:`criteria.divergence.agreement_pattern_names` ``(K)``, in that order:
        ``pattern``, ``count``, ``frequency_pct`` (share of all positions with K heads, NaN if none),
        ``mean_majority_target_prob`` (NaN for a pattern never seen).
    """
    names = agreement_pattern_names(K)
    pos = positions[positions["K"] == K] if "K" in positions else positions.iloc[0:0]
    total = len(pos)
    out = []
    for code, name in enumerate(names):
        sel = pos[pos["agreement_pattern"] == code] if total else pos
        out.append(
            {
                "pattern": name,
                "count": int(len(sel)),
                "frequency_pct": 100.0 * len(sel) / total if total else math.nan,
                "mean_majority_target_prob": _mean(sel["majority_target_prob"].tolist())
                if len(sel)
                else math.nan,
            }
        )
    return pd.DataFrame(out)


def js_table(positions: pd.DataFrame) -> pd.DataFrame:
    """Mean JS divergences to the heads' centroid, for drafts that agree / disagree with the majority.

    Paper: Table 3 (``JS(c || draft)`` and ``max_i JS(c || head_i)``, agree vs disagree), plus the split
    by Algorithm 1's branch the text discusses: accepted by Eq. (6) vs accepted only by Eq. (7).

    Args:
        positions: :func:`position_frame` output with ``js_draft``, ``js_heads_max``,
            ``draft_agrees_majority`` (``accepted_by_js`` / ``accepted_by_majority`` optional).

    Returns:
        Rows ``case`` in (``agree``, ``disagree``, ``accepted by Eq. 6 (JS)``, ``accepted only by Eq. 7
        (majority)``, ``all``) with ``count``, ``share_pct``, ``mean_js_draft``, ``mean_js_heads_max``
        (nats; NaN where the count is 0).
    """
    cols = ("js_draft", "js_heads_max", "draft_agrees_majority")
    if len(positions) == 0 or not all(c in positions for c in cols):
        pos = pd.DataFrame({c: [] for c in cols})
    else:
        pos = positions.dropna(subset=["js_draft", "js_heads_max"])
    total = len(pos)
    agree = pos["draft_agrees_majority"].astype(bool) if total else pd.Series([], dtype=bool)
    cases = [("agree", agree), ("disagree", ~agree)]
    if total and "accepted_by_js" in pos:
        cases.append(("accepted by Eq. 6 (JS)", pos["accepted_by_js"].astype(bool)))
    if total and "accepted_by_majority" in pos:
        cases.append(
            ("accepted only by Eq. 7 (majority)", pos["accepted_by_majority"].astype(bool))
        )
    cases.append(("all", pd.Series(True, index=pos.index, dtype=bool)))
    out = []
    for name, mask in cases:
        sel = pos[mask] if total else pos
        out.append(
            {
                "case": name,
                "count": int(len(sel)),
                "share_pct": 100.0 * len(sel) / total if total else math.nan,
                "mean_js_draft": _mean(sel["js_draft"].tolist()) if len(sel) else math.nan,
                "mean_js_heads_max": _mean(sel["js_heads_max"].tolist()) if len(sel) else math.nan,
            }
        )
    return pd.DataFrame(out)


def _item_keys(positions: pd.DataFrame) -> list[str]:
    return [k for k in ("run_id", "sample_id") if k in positions]


def share_ci(positions: pd.DataFrame, mask: pd.Series, **kw: Any):
    """Share (fraction) of ``positions`` where ``mask`` holds, with a bootstrap interval over items (samples):
    Σ_items positions with mask / Σ_items positions (:func:`analysis.stats.ratio_ci`)."""

    if len(positions) == 0:
        return NAN
    g = pd.DataFrame({"num": mask.astype(float).to_numpy(), "den": 1.0}, index=positions.index)
    g = g.groupby([positions[k] for k in _item_keys(positions)]).sum()
    return ratio_ci(g["num"], g["den"], **kw)


def mean_over_positions_ci(positions: pd.DataFrame, mask: pd.Series, column: str, **kw: Any):
    """Mean of ``column`` over the positions where ``mask`` holds (pooled), with a bootstrap interval over
    items: Σ_items values / Σ_items positions (:func:`analysis.stats.ratio_ci`)."""

    sel = positions[mask.astype(bool)].dropna(subset=[column])
    if len(sel) == 0:
        return NAN
    g = pd.DataFrame({"num": sel[column].astype(float), "den": 1.0}, index=sel.index)
    g = g.groupby([sel[k] for k in _item_keys(sel)]).sum()
    return ratio_ci(g["num"], g["den"], **kw)
