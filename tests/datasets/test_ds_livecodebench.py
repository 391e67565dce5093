"""LiveCodeBench: rows of the lite release (compressed private tests) -> samples with its prompt; the sandboxed
scorer passes right programs and fails wrong / crashing / slow ones, call-based and stdin."""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import pytest

from runners.datasets.livecodebench import SYSTEM_MESSAGE, LiveCodeBenchDataset
from runners.scorers.livecodebench_scorer import LiveCodeBenchScorer
from runners.scorers.livecodebench_worker import extract_code


def compressed(tests):
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


ROWS = [
    {
        "question_id": "lc1",
        "question_title": "add",
        "question_content": "Return a + b.",
        "platform": "leetcode",
        "difficulty": "easy",
        "contest_date": "2024-01-01",
        "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
        "public_test_cases": json.dumps(
            [{"input": "1\n2", "output": "3", "testtype": "functional"}]
        ),
        "private_test_cases": compressed(
            [{"input": "[1, 2]\n[3]", "output": "[1, 2, 3]", "testtype": "functional"}]
        ),
        "metadata": json.dumps({"func_name": "add"}),
    },
    {
        "question_id": "ac1",
        "question_title": "sum",
        "question_content": "Read N numbers, print their sum.",
        "platform": "atcoder",
        "difficulty": "easy",
        "contest_date": "2024-01-02",
        "starter_code": "",
        "public_test_cases": json.dumps(
            [{"input": "3\n1 2 3\n", "output": "6\n", "testtype": "stdin"}]
        ),
        "private_test_cases": compressed(
            [{"input": "2\n0.5 0.25\n", "output": "0.75\n", "testtype": "stdin"}]
        ),
        "metadata": "{}",
    },
]


@pytest.fixture
def samples(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    ds = LiveCodeBenchDataset(
        source={"local_path": str(path), "order": ["local"]},
        split="test",
        max_new_tokens=64,
        stop=[],
        scorer="livecodebench",
    )
    return ds.load()


def test_samples(samples):
    lc, ac = samples
    assert lc.sample_id == "livecodebench/test/lc1" and lc.messages[0] == {
        "role": "system",
        "content": SYSTEM_MESSAGE,
    }
    assert (
        "### Question:\nReturn a + b." in lc.messages[1]["content"]
        and "class Solution" in lc.messages[1]["content"]
    )
    assert "Read the inputs from stdin" in ac.messages[1]["content"]
    assert lc.reference["fn_name"] == "add" and lc.reference["inputs"] == ["1\n2", "[1, 2]\n[3]"]
    assert ac.reference["fn_name"] is None and ac.reference["outputs"] == ["6\n", "0.75\n"]


def fenced(code):
    return f"Here is the solution:\n```python\n{code}\n```\nDone."


@pytest.mark.slow
def test_scorer_runs_the_harness_rules(samples):
    lc, ac = samples
    good_lc = "class Solution:\n    def add(self, a, b):\n        return a + b"
    good_ac = "n = int(input())\nxs = list(map(float, input().split()))\ns = sum(xs)\nprint(int(s) if s == int(s) else s)"
    cases = [
        (lc, fenced(good_lc), 1),
        (lc, fenced(good_lc.replace("a + b", "a - b")), 0),
        (lc, "no code", 0),
        (ac, fenced(good_ac), 1),
        (ac, fenced("print(7)"), 0),
        (ac, fenced("while True:\n    pass"), 0),
        (
            ac,
            fenced(
                "import sys\nif __name__ == '__main__':\n    sys.stdin.readline()\n"
                "    print(sum(map(float, sys.stdin.readline().split())))"
            ),
            1,
        ),
    ]  # guard dropped; 6.0 == 6 as decimals
    res = LiveCodeBenchScorer(timeout_s=1.0, n_workers=2).score(
        [c[0] for c in cases], [c[1] for c in cases]
    )
    assert [r["correct"] for r in res] == [c[2] for c in cases]
    assert res[5]["status"] == "timeout"


def test_extract_code():
    assert extract_code("a\n```python\nx = 1\n```\nb\n```\ny = 2\n```") == "y = 2"
    assert extract_code("```python\nonly one fence") == ""
