"""HumanEval's offline ``check()``: tests that call a helper the prompt defines pass for a correct answer that does
not call (so does not keep) that helper; the prompt's helpers are in scope, as in HumanEval's own harness."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import runners.scorers  # noqa: F401  (registration)
from runners.datasets.base import Sample
from runners.registry import SCORERS

# correct answers that compute the result without calling the prompt's helper (the sanitizer drops it)
NO_HELPER = {
    "HumanEval/32": (
        "def find_zero(xs: list):\n"
        "    f = lambda x: sum(c * x ** i for i, c in enumerate(xs))\n"
        "    lo, hi = -1.0, 1.0\n"
        "    while f(lo) * f(hi) > 0:\n"
        "        lo, hi = 2.0 * lo, 2.0 * hi\n"
        "    while hi - lo > 1e-10:\n"
        "        mid = (lo + hi) / 2.0\n"
        "        lo, hi = (mid, hi) if f(mid) * f(lo) > 0 else (lo, mid)\n"
        "    return lo\n"
    ),
    "HumanEval/38": (
        "def decode_cyclic(s: str):\n"
        "    groups = [s[3 * i:min(3 * i + 3, len(s))] for i in range((len(s) + 2) // 3)]\n"
        "    return ''.join((g[-1] + g[:-1]) if len(g) == 3 else g for g in groups)\n"
    ),
    "HumanEval/50": (
        "def decode_shift(s: str):\n"
        "    return ''.join(chr(((ord(ch) - 5 - ord('a')) % 26) + ord('a')) for ch in s)\n"
    ),
}
WRONG = {
    "HumanEval/32": "def find_zero(xs: list):\n    return 0.5\n",
    "HumanEval/38": "def decode_cyclic(s: str):\n    return s\n",
    "HumanEval/50": "def decode_shift(s: str):\n    return s[::-1]\n",
}

# a problem of our own in that shape: the test calls the prompt's helper, which needs the prompt's import
OWN_PROMPT = (
    "import math\n\n\n"
    "def scale(x: float) -> float:\n"
    '    """Multiply by pi."""\n'
    "    return x * math.pi\n\n\n"
    "def unscale(y: float) -> float:\n"
    '    """Inverse of scale: unscale(scale(x)) == x."""\n'
)
OWN_TEST = (
    "def check(candidate):\n"
    "    for x in (0.0, 1.5, -2.0, 10.0):\n"
    "        assert abs(candidate(scale(x)) - x) < 1e-9\n"
)
OWN_RIGHT = "def unscale(y: float) -> float:\n    return y / 3.141592653589793\n"
OWN_WRONG = "def unscale(y: float) -> float:\n    return y / 3.0\n"
OWN_NO_ENTRY = "def something_else(y):\n    return y\n"


def md(code: str) -> str:
    return f"Here is the solution.\n```python\n{code}\n```\nIt runs in linear time."


@pytest.fixture(scope="module")
def problems(shared_data: Path) -> dict[str, dict[str, Any]]:
    with gzip.open(shared_data / "humaneval/HumanEval.jsonl.gz", "rt") as f:
        return {p["task_id"]: p for p in map(json.loads, f)}


@pytest.fixture(scope="module")
def samples(make_dataset) -> dict[str, Any]:
    return {s.reference["task_id"]: s for s in make_dataset("humaneval").load()}


@pytest.fixture(scope="module")
def scorer() -> Any:
    return SCORERS.get("evalplus_humaneval")(base_timeout_s=5.0, plus=False, n_workers=2)


def own_sample() -> Sample:
    ref = {"task_id": "Own/0", "prompt": OWN_PROMPT, "entry_point": "unscale", "test": OWN_TEST}
    return Sample("own/test/0", [], ref, {})


def test_correct_answers_that_skip_the_helper_pass(scorer, samples) -> None:
    ids = list(NO_HELPER)
    res = scorer.score(
        [samples[t] for t in ids] * 2,
        [md(NO_HELPER[t]) for t in ids] + [md(WRONG[t]) for t in ids],
    )
    assert [r["status,check"] for r in res] == ["pass"] * 3 + ["fail"] * 3
    for t, r in zip(ids, res[:3]):  # the sanitizer did drop the helper: the prompt supplied it
        helper = {"HumanEval/32": "poly", "HumanEval/38": "encode_cyclic"}.get(t, "encode_shift")
        assert f"def {helper}" not in r["solution"]


def test_a_problem_of_our_own_in_that_shape(scorer) -> None:
    s = own_sample()
    res = scorer.score([s] * 3, [md(OWN_RIGHT), md(OWN_WRONG), md(OWN_NO_ENTRY)])
    assert [r["status,check"] for r in res] == ["pass", "fail", "fail"]


def test_canonical_solutions_of_every_problem_with_helpers_pass(scorer, problems, samples) -> None:
    """Every HumanEval problem whose prompt defines more than the entry point: the canonical answer passes."""
    with_helpers = [
        t
        for t, p in problems.items()
        if sum(isinstance(n, ast.FunctionDef) for n in ast.parse(p["prompt"]).body) > 1
    ]
    assert set(NO_HELPER) <= set(with_helpers)
    res = scorer.score(
        [samples[t] for t in with_helpers],
        [md(problems[t]["prompt"] + problems[t]["canonical_solution"]) for t in with_helpers],
    )
    assert {t: r["status,check"] for t, r in zip(with_helpers, res)} == {
        t: "pass" for t in with_helpers
    }
