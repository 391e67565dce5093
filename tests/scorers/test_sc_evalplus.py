"""EvalPlus scorer: sanitizer + sandboxed execution in a separate process, and agreement with EvalPlus."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

import runners.scorers  # noqa: F401  (registration)
from runners.registry import SCORERS, build
from runners.scorers.base import Scorer

TASKS = ("HumanEval/0", "HumanEval/3", "HumanEval/5", "HumanEval/7", "HumanEval/12")


@pytest.fixture(scope="module")
def problems(shared_data: Path) -> dict[str, dict[str, Any]]:
    with gzip.open(shared_data / "humaneval/HumanEval.jsonl.gz", "rt") as f:
        return {p["task_id"]: p for p in map(json.loads, f)}


@pytest.fixture(scope="module")
def samples(make_dataset) -> dict[str, Any]:
    return {s.reference["task_id"]: s for s in make_dataset("humaneval", limit=13).load()}


def md(code: str) -> str:
    """A chat-style answer: prose around a markdown code block."""
    return f"Sure! Here is a solution.\n```python\n{code}\n```\nIt runs in linear time."


def canonical(p: dict[str, Any]) -> str:
    return md(p["prompt"] + p["canonical_solution"])


def wrong(p: dict[str, Any]) -> str:
    return md(f"def {p['entry_point']}(*args):\n    return 12345")


def loop(p: dict[str, Any]) -> str:
    return md(f"def {p['entry_point']}(*args):\n    while True:\n        pass\n    return 0")


def crash(p: dict[str, Any]) -> str:
    return md(f"def {p['entry_point']}(*args):\n    raise RuntimeError('boom')\n    return 0")


def hard_exit(p: dict[str, Any]) -> str:
    return md(f"import os\ndef {p['entry_point']}(*args):\n    os._exit(3)\n    return 0")


@pytest.fixture(scope="module")
def scorer() -> Any:
    return SCORERS.get("evalplus_humaneval")(base_timeout_s=1.0, plus=False, n_workers=2)


class TestSandbox:
    def test_protocol(self, scorer) -> None:
        assert (
            isinstance(scorer, Scorer)
            and scorer.metric == "pass@1,check"
            and scorer.higher_is_better
        )
        built = build(SCORERS, {"name": "evalplus_humaneval"})
        assert built.plus == "auto" and built.base_timeout_s > 1
        assert (
            SCORERS.get("evalplus_humaneval")(plus=True).metric == "pass@1,base"
        )  # EvalPlus's own name

    def test_default_build_offline_is_base_only(
        self, samples, problems, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", "/nonexistent/HumanEvalPlus.jsonl")
        built = build(SCORERS, {"name": "evalplus_humaneval"})
        (res,) = built.score([samples["HumanEval/0"]], [canonical(problems["HumanEval/0"])])
        assert built.metric == "pass@1,check" and built.plus_available is False
        assert res["correct"] == 1 and res["pass@1,check"] == 1.0
        assert (
            "pass@1,plus" not in res and "pass@1,base" not in res
        )  # never named as EvalPlus's numbers
        agg = built.aggregate([res])
        assert (
            agg["evalplus_ran"] == 0
            and "only HumanEval's original check() tests ran" in agg["note"]
        )

    def test_known_outputs(self, scorer, samples, problems) -> None:
        p0, p3 = problems["HumanEval/0"], problems["HumanEval/3"]
        cases = [
            (samples["HumanEval/0"], canonical(p0), "pass"),
            (samples["HumanEval/3"], canonical(p3), "pass"),
            (samples["HumanEval/0"], wrong(p0), "fail"),
            (samples["HumanEval/3"], loop(p3), "timeout"),
            (samples["HumanEval/0"], crash(p0), "fail"),
            (samples["HumanEval/3"], hard_exit(p3), "fail"),
        ]
        res = scorer.score([c[0] for c in cases], [c[1] for c in cases])
        assert [r["status,check"] for r in res] == [c[2] for c in cases]
        assert [r["correct"] for r in res] == [1, 1, 0, 0, 0, 0]
        assert "def has_close_elements" in res[0]["solution"] and "Sure!" not in res[0]["solution"]
        agg = scorer.aggregate(res)
        assert agg["accuracy"] == agg["pass@1,check"] == pytest.approx(2 / 6)
        assert agg["pass@1_stderr,check"] == pytest.approx((2 / 6 * 4 / 6 / 5) ** 0.5)
        assert (
            agg["num_timeout,check"] == 1
            and agg["metric"] == "pass@1,check"
            and agg["evalplus_ran"] == 0
        )

    def test_malformed_scores_zero(self, scorer, samples) -> None:
        outputs = [None, "", "I cannot help with that.", "```python\ndef f(:\n```", 42]
        res = scorer.score([samples["HumanEval/5"]] * len(outputs), outputs)
        assert [r["correct"] for r in res] == [0] * 5 and {r["status,check"] for r in res} == {
            "fail"
        }

    def test_guard_blocks_destructive_calls(
        self, scorer, samples, problems, tmp_path: Path
    ) -> None:
        victim = tmp_path / "victim.txt"
        victim.write_text("keep me")
        p = problems["HumanEval/7"]
        code = (
            f"import os\ndef {p['entry_point']}(strings, substring):\n    os.remove({str(victim)!r})\n"
            f"    return [s for s in strings if substring in s]"
        )
        (res,) = scorer.score([samples["HumanEval/7"]], [md(code)])
        assert res["status,check"] == "fail" and victim.read_text() == "keep me"

    def test_memory_limit(self, scorer, samples, problems, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("EVALPLUS_MAX_MEMORY_BYTES", str(512 * 1024 * 1024))
        p = problems["HumanEval/12"]
        code = (
            f"def {p['entry_point']}(strings):\n    x = bytearray(2 * 1024 ** 3)\n    return None"
        )
        (res,) = scorer.score([samples["HumanEval/12"]], [md(code)])
        assert res["status,check"] == "fail"

    def test_length_mismatch_raises(self, scorer, samples) -> None:
        with pytest.raises(ValueError):
            scorer.score([samples["HumanEval/0"]], [])


def base_inputs(problem: dict[str, Any]) -> list[list[Any]]:
    """Inputs of HumanEval's ``assert candidate(...) == ...`` tests (how EvalPlus's base_input arose)."""
    check = next(
        n
        for n in ast.parse(problem["test"]).body
        if isinstance(n, ast.FunctionDef) and n.name == "check"
    )
    return [
        [ast.literal_eval(a) for a in st.test.left.args]
        for st in check.body
        if isinstance(st, ast.Assert) and isinstance(st.test, ast.Compare)
    ]


@pytest.mark.slow
def test_agrees_with_evalplus_check_correctness(
    samples, problems, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same solutions through evalplus.evaluate.check_correctness directly and through our scorer."""
    from evalplus.evaluate import check_correctness
    from evalplus.gen.util import trusted_exec

    plus_file = tmp_path / "HumanEvalPlusMini.jsonl"
    mini = {}
    for tid in TASKS:
        p = problems[tid]
        inputs = base_inputs(p)
        mini[tid] = {
            "task_id": tid,
            "prompt": p["prompt"],
            "entry_point": p["entry_point"],
            "canonical_solution": p["canonical_solution"],
            "base_input": inputs,
            "plus_input": inputs[:2],
            "atol": 0,
            "contract": "",
        }
    plus_file.write_text("".join(json.dumps(v) + "\n" for v in mini.values()))

    makers = (canonical, wrong, loop, crash)
    cases = [(tid, make) for tid in TASKS for make in makers]
    direct = []
    for tid, make in cases:
        p = mini[tid]
        expected = {}
        for part in ("base", "plus"):
            expected[part], expected[f"{part}_time"] = trusted_exec(
                p["prompt"] + p["canonical_solution"],
                p[f"{part}_input"],
                p["entry_point"],
                record_time=True,
            )
        from evalplus.sanitize import sanitize

        solution = sanitize(make(problems[tid]), entrypoint=p["entry_point"])
        out = check_correctness(
            "humaneval", 0, p, solution, expected, base_only=False, fast_check=True
        )
        direct.append((out["base"][0], out["plus"][0]))

    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(plus_file))
    ours = SCORERS.get("evalplus_humaneval")(base_timeout_s=1.0, plus="auto", n_workers=2)
    res = ours.score(
        [samples[tid] for tid, _ in cases], [make(problems[tid]) for tid, make in cases]
    )
    assert ours.plus_available is True and ours.metric == "pass@1,base"
    assert [(r["status,base"], r["status,plus"]) for r in res] == direct
    assert "status,check" not in res[0]  # EvalPlus's evaluator replaces the hand-run check()
    assert [r["pass@1,plus"] for r in res] == [float(b == p == "pass") for b, p in direct]
    assert [make for _, make in cases if make is canonical] and all(
        r["correct"] == (make is canonical) for r, (_, make) in zip(res, cases)
    )
    agg = ours.aggregate(res)
    assert agg["pass@1,plus"] == agg["pass@1,base"] == agg["accuracy"] == pytest.approx(0.25)
    assert agg["evalplus_ran"] == 1 and "note" not in agg
