"""Judging protocols (``protocol.<dataset>`` in ``conf/judging.yaml``, registry :data:`PROTOCOLS`).

Each protocol turns one question and its answer(s) into judge requests, the replies into one judgment line,
and the lines into the run's summary:

- ``single`` (FastChat single-answer grading, MT-Bench / KoMT-Bench, first turn): ``single-v1``, or
  ``single-math-v1`` with the reference answer for math, reasoning and coding questions; rating parsed from
  ``[[x]]`` (backup ``[x]``); the score is the mean rating over the questions with one (FastChat ``show_result``
  drops unparsed ratings; here they are counted as parse failures and shown).
- ``pairwise`` (FastChat pairwise vs a baseline, ``pair-v2`` / ``pair-math-v1``): two games, the model's answer as
  A then as B; different winners count as a tie; a game without ``[[A]]``/``[[B]]``/``[[C]]`` drops the question
  (a parse failure). Win rate ``(wins + ties / 2) / n`` (FastChat's ``win_rate_adjusted``).
- ``alpaca_eval`` (AlpacaEval 2.0's ``weighted_alpaca_eval_gpt4_turbo``): output_1 = the baseline's answer,
  output_2 = the model's, shown in AlpacaEval's per-instruction random order; identical outputs are a draw
  (1.5) without asking the judge; preference ``2 - P(m)`` from the first token's top-5 logprobs. Win rate
  ``mean(preference - 1) x 100`` with its standard error ``sem x 100`` (AlpacaEval ``get_winrate``).

Length-controlled win rate (AlpacaEval's GLM) is not computed: its fit needs per-instruction difficulties and
the leaderboard's gamed-baseline annotations, estimated on AlpacaEval's own 805 instructions and downloaded from
the hub; EAGLE's 80 Alpaca instructions are not among them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from criteria.registry import Registry
from runners.judging import prompts as P
from runners.judging.judges import JudgeReply, JudgeRequest
from runners.judging.parse import (
    alpaca_preference,
    combine_games,
    parse_rating,
    parse_verdict,
)

PROTOCOLS: Registry = Registry("protocol")


@dataclass(frozen=True)
class Unit:
    """One judged question: the model's answer and, for pairwise protocols, the baseline's."""

    question: P.Question
    answer: str
    baseline: str | None = None


def _cut_note(reply: JudgeReply) -> str:
    return " (the reply hit max_tokens)" if reply.finish_reason == "length" else ""


def _sem(values: Sequence[float]) -> float:
    """Standard error of the mean (ddof 1, as pandas ``sem``); NaN for fewer than 2 values."""
    n = len(values)
    if n < 2:
        return math.nan
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1) / n)


@PROTOCOLS.register("single")
class Single:
    """FastChat single-answer grading (module docstring)."""

    needs_baseline = False

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = int(max_tokens)

    def requests(self, u: Unit) -> tuple[str, list[JudgeRequest]]:
        name, msgs = P.single_messages(u.question, u.answer)
        return name, [JudgeRequest.of(msgs, max_tokens=self.max_tokens, temperature=0.0)]

    def judgment(self, u: Unit, replies: Sequence[JudgeReply]) -> dict:
        score = parse_rating(replies[0].text or "")
        return {
            "score": score,
            "parse_error": None
            if score is not None
            else f"no [[rating]] in the reply{_cut_note(replies[0])}",
        }

    @staticmethod
    def value(line: Mapping[str, Any]) -> float | None:
        """The line's number for intervals and agreement: the rating."""
        return line.get("score")

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        scores = [float(x["score"]) for x in lines if x.get("score") is not None]
        by_cat: dict[str, list[float]] = {}
        for x in lines:
            if x.get("score") is not None:
                by_cat.setdefault(str(x.get("category") or ""), []).append(float(x["score"]))
        return {
            "judge/metric": "mean rating (1-10)",
            "judge/score": sum(scores) / len(scores) if scores else None,
            "judge/score_stderr": _sem(scores) if scores else None,
            "judge/num_scored": len(scores),
            "judge/score_by_category": {k: sum(v) / len(v) for k, v in sorted(by_cat.items())},
        }


@PROTOCOLS.register("pairwise")
class Pairwise:
    """FastChat pairwise comparison against a baseline, both orders (module docstring)."""

    needs_baseline = True

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = int(max_tokens)

    def requests(self, u: Unit) -> tuple[str, list[JudgeRequest]]:
        assert u.baseline is not None
        name, g1 = P.pair_messages(u.question, u.answer, u.baseline)
        _, g2 = P.pair_messages(u.question, u.baseline, u.answer)
        return name, [
            JudgeRequest.of(g1, max_tokens=self.max_tokens, temperature=0.0),
            JudgeRequest.of(g2, max_tokens=self.max_tokens, temperature=0.0),
        ]

    def judgment(self, u: Unit, replies: Sequence[JudgeReply]) -> dict:
        g1, g2 = (parse_verdict(r.text or "") for r in replies)
        winner = combine_games(g1, g2)
        # FastChat's "inconsistent": the two games name different winners (counted as a tie)
        w1 = {"A": "model", "B": "baseline"}.get(g1 or "", g1)
        w2 = {"A": "baseline", "B": "model"}.get(g2 or "", g2)
        bad = [
            f"game {i + 1}{_cut_note(r)}"
            for i, (g, r) in enumerate(zip((g1, g2), replies))
            if g is None
        ]
        return {
            "g1": g1,
            "g2": g2,
            "winner": winner,
            "inconsistent": winner is not None and w1 != w2,
            "parse_error": None
            if winner is not None
            else f"no [[A]]/[[B]]/[[C]] in {', '.join(bad)}",
        }

    @staticmethod
    def value(line: Mapping[str, Any]) -> float | None:
        """1 (model wins), 0.5 (tie), 0 (baseline wins), None (no verdict)."""
        return {"model": 1.0, "tie": 0.5, "baseline": 0.0}.get(line.get("winner"))

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        w = [x["winner"] for x in lines if x.get("winner") is not None]
        n = len(w)
        wins, losses, ties = w.count("model"), w.count("baseline"), w.count("tie")
        return {
            "judge/metric": "win rate vs baseline (%), ties count half (FastChat win_rate_adjusted)",
            "judge/win_rate": 100.0 * (wins + 0.5 * ties) / n if n else None,
            "judge/win_rate_stderr": 100.0 * _sem([self.value(x) for x in lines if x.get("winner")])
            if n
            else None,
            "judge/num_wins": wins,
            "judge/num_losses": losses,
            "judge/num_ties": ties,
            "judge/num_inconsistent": sum(bool(x.get("inconsistent")) for x in lines),
            "judge/num_scored": n,
        }


@PROTOCOLS.register("alpaca_eval")
class AlpacaEval:
    """AlpacaEval's weighted pairwise annotator against a baseline (module docstring)."""

    needs_baseline = True

    def __init__(self, max_tokens: int) -> None:
        del max_tokens  # AlpacaEval asks for one token

    def requests(self, u: Unit) -> tuple[str, list[JudgeRequest]]:
        assert u.baseline is not None
        if u.answer == u.baseline:
            return P.ALPACA_EVAL_ANNOTATOR, []
        inst = u.question.text
        o1, o2 = (u.answer, u.baseline) if P.alpaca_switched(inst) else (u.baseline, u.answer)
        msgs = P.alpaca_messages(inst, o1, o2)
        return P.ALPACA_EVAL_ANNOTATOR, [
            JudgeRequest.of(
                msgs, max_tokens=1, temperature=1.0, top_logprobs=P.ALPACA_EVAL_TOP_LOGPROBS
            )
        ]

    def judgment(self, u: Unit, replies: Sequence[JudgeReply]) -> dict:
        switched = P.alpaca_switched(u.question.text)
        if not replies:
            return {"preference": 1.5, "identical": True, "switched": switched, "parse_error": None}
        shown = alpaca_preference(
            replies[0].top_logprobs, P.ALPACA_EVAL_NUMERATOR, P.ALPACA_EVAL_TOKENS
        )
        pref = None if shown is None else (3.0 - shown if switched else shown)
        return {
            "preference": pref,
            "identical": False,
            "switched": switched,
            "parse_error": None
            if pref is not None
            else (
                "no logprobs in the reply"
                if not replies[0].top_logprobs
                else "neither 'm' nor 'M' among the top-5 first-token logprobs"
            ),
        }

    @staticmethod
    def value(line: Mapping[str, Any]) -> float | None:
        """``preference - 1`` in [0, 1] (1: the model's answer preferred), None when unparsed."""
        p = line.get("preference")
        return None if p is None else float(p) - 1.0

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        v = [self.value(x) for x in lines if x.get("preference") is not None]
        n = len(v)
        discrete = [1.0 if x > 0.5 else 0.0 if x < 0.5 else 0.5 for x in v]
        return {
            "judge/metric": "AlpacaEval win rate vs baseline (%), weighted preference",
            "judge/win_rate": 100.0 * sum(v) / n if n else None,
            "judge/standard_error": 100.0 * _sem(v) if n else None,
            "judge/discrete_win_rate": 100.0 * sum(discrete) / n if n else None,
            "judge/num_wins": sum(x > 0.5 for x in v),
            "judge/num_wins_base": sum(x < 0.5 for x in v),
            "judge/num_draws": sum(x == 0.5 for x in v),
            "judge/num_identical": sum(bool(x.get("identical")) for x in lines),
            "judge/num_scored": n,
        }


def build_protocol(name: str, max_tokens: int) -> Any:
    return PROTOCOLS.get(name)(max_tokens)
