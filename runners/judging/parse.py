"""Parsing judge replies into scores, as FastChat and AlpacaEval do (pure functions, no I/O).

- :func:`parse_rating`: FastChat ``run_judge_single``: the first ``[[x]]`` in the reply, else the first ``[x]``
  (backup pattern); FastChat records -1 when neither matches and drops -1 from the averages. Here: None.
- :func:`parse_verdict`: FastChat ``run_judge_pair`` (output format ``[[A]]``): ``[[A]]`` anywhere in the reply
  wins, else ``[[B]]``, else ``[[C]]`` (tie), else an error (None).
- :func:`alpaca_preference`: AlpacaEval ``logprob_parser`` with ``is_binarize=False`` (weighted_alpaca_eval_gpt4_turbo):
  among the reply's first-token ``top_logprobs``, the probability of ``m`` (output_1 better) relative to ``m`` and
  ``M``; preference ``2 - P(m)`` in [1, 2] (1: output_1 better, 2: output_2 better). A token absent from the
  top list has probability 0; neither present: None.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

# FastChat common.one_score_pattern / one_score_pattern_backup
RATING = re.compile(r"\[\[(\d+\.?\d*)\]\]")
RATING_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")


def parse_rating(reply: str) -> float | None:
    """The judge's rating (a number; FastChat's scale is 1-10 and it is not clipped), or None if none is found."""
    m = RATING.search(reply) or RATING_BACKUP.search(reply)
    # float(), not FastChat's ast.literal_eval: the same value for every match, and '[[07]]' is a 7, not an error
    return float(m.group(1)) if m else None


def parse_verdict(reply: str) -> str | None:
    """``"A"``, ``"B"``, ``"tie"`` (``[[C]]``) or None (no verdict), in FastChat's order of precedence."""
    for tag, verdict in (("[[A]]", "A"), ("[[B]]", "B"), ("[[C]]", "tie")):
        if tag in reply:
            return verdict
    return None


def combine_games(g1: str | None, g2: str | None) -> str | None:
    """FastChat's two games (A = model, then A = baseline) as one result: ``model``, ``baseline``, ``tie`` or None.

    ``g1`` is the verdict with the model's answer as A, ``g2`` with the baseline's as A. Either game without a
    verdict: None (FastChat's ``show_result`` drops the match). Different winners: ``tie`` (FastChat counts an
    inconsistent match as a tie).
    """
    if g1 is None or g2 is None:
        return None
    w1 = {"A": "model", "B": "baseline"}.get(g1, g1)
    w2 = {"A": "baseline", "B": "model"}.get(g2, g2)
    return w1 if w1 == w2 else "tie"


def alpaca_preference(
    top_logprobs: Sequence[Mapping[str, Any]] | None,
    numerator: str = "m",
    tokens: Sequence[str] = ("m", "M"),
) -> float | None:
    """AlpacaEval's weighted preference from one position's ``top_logprobs`` (``[{token, logprob}, ...]``).

    Returns:
        ``2 - P(numerator) / sum_t P(t)`` over ``tokens`` in [1, 2], or None when no token of ``tokens`` is listed
        (or no logprobs were returned).
    """
    if not top_logprobs:
        return None
    lp = {str(t["token"]): float(t["logprob"]) for t in top_logprobs if str(t["token"]) in tokens}
    if not lp:
        return None
    top = max(lp.values())
    den = top + math.log(sum(math.exp(v - top) for v in lp.values()))
    num = lp.get(numerator, -math.inf)
    return 2.0 - math.exp(num - den)
