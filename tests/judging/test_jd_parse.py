"""Replies to scores as FastChat and AlpacaEval parse them (hand-worked cases)."""

from __future__ import annotations

import math

import pytest

from runners.judging.parse import alpaca_preference, combine_games, parse_rating, parse_verdict


@pytest.mark.parametrize(
    "reply, rating",
    [
        ('The answer is fine. Rating: "[[5]]"', 5.0),
        ("Solid work. [[8.5]]", 8.5),
        ("First [7] as a draft, final: [[9]]", 9.0),  # [[x]] wins over an earlier [x]
        ("Only the backup form: [6]", 6.0),
        ("Rating: [[10]]", 10.0),
        ("Rating: [[07]]", 7.0),  # a leading zero is a number, not a parse error
        ("Rating: [[7.]]", 7.0),
        ("Rating: [[ 5 ]]", None),  # FastChat's patterns allow no spaces
        ("I would rate this 7 out of 10.", None),
        ("", None),
    ],
)
def test_rating(reply, rating):
    assert parse_rating(reply) == rating


@pytest.mark.parametrize(
    "reply, verdict",
    [
        ("... so [[A]]", "A"),
        ("[[B]] is better", "B"),
        ("both good [[C]]", "tie"),
        ("B is better than A: [[B]], not [[A]]", "A"),  # FastChat tests [[A]] first
        ("Assistant A", None),
    ],
)
def test_verdict(reply, verdict):
    assert parse_verdict(reply) == verdict


def test_two_games():
    # game 1: A = model, game 2: A = baseline
    assert combine_games("A", "B") == "model"
    assert combine_games("B", "A") == "baseline"
    assert combine_games("A", "A") == "tie"  # position bias: inconsistent -> tie
    assert combine_games("tie", "tie") == "tie"
    assert combine_games("tie", "B") == "tie"
    assert combine_games(None, "A") is None and combine_games("A", None) is None


def test_alpaca_preference():
    # AlpacaEval's own example completion: M at -0.0176, m at -4.0488 -> output_2 preferred
    top = [
        {"token": "M", "logprob": -0.017597131},
        {"token": "m", "logprob": -4.048847},
        {"token": "Both", "logprob": -14.9},
    ]
    pm, pM = math.exp(-4.048847), math.exp(-0.017597131)
    assert alpaca_preference(top) == pytest.approx(2.0 - pm / (pm + pM))
    assert 1.98 < alpaca_preference(top) < 1.99
    assert alpaca_preference([{"token": "M", "logprob": -3.0}]) == 2.0  # m absent: probability 0
    assert alpaca_preference([{"token": "m", "logprob": -3.0}]) == 1.0
    assert alpaca_preference([{"token": "The", "logprob": -0.1}]) is None
    assert alpaca_preference(None) is None and alpaca_preference([]) is None
    # equal probabilities: exactly a draw
    assert (
        alpaca_preference([{"token": "m", "logprob": -0.7}, {"token": "M", "logprob": -0.7}]) == 1.5
    )
