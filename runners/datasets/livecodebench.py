"""LiveCodeBench code generation (``livecodebench/code_generation_lite``) with the benchmark's own chat prompt.

Paper: DropMatch Table 9 (LiveCodeBench pass@1, Sec. 4.3); Jain et al. 2024 (arXiv 2403.07974).

Prompt (``lcb_runner/prompts/code_generation.py``, chat models / ``LMStyle.OpenAIChat``): a system message
"You are an expert Python programmer. ..." and one user turn ``### Question:\\n<question>\\n\\n### Format: ...``
with the starter code (LeetCode, call-based) or the stdin instruction and a ``# YOUR CODE HERE`` block, then
``### Answer: (use the provided format with backticks)``. Tests: the public and private test cases (private ones
stored base64 / zlib / pickle of a JSON list in the lite release), call-based when ``metadata.func_name`` is
set, stdin/stdout otherwise; graded by :mod:`runners.scorers.livecodebench_scorer` in the project's sandbox.

Sources: a local ``.jsonl`` of the lite release (``dataset.source.local_path``) or the hub when online. No PyPI
wheel ships the problems, so offline there is no data: Table 9 then runs HumanEval as a stand-in.
``sample_id`` is ``"livecodebench/<split>/<question_id>"``; order is the release's row order.
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from typing import Any

from runners.datasets.base import BenchmarkDataset, Sample
from runners.registry import DATASETS

SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests. You will NOT "
    "return anything except for the program."
)
FORMAT_WITH_STARTER = "You will use the following starter code to write the solution to the problem and enclose your code within delimiters."
FORMAT_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the "
    "sample inputs). Enclose your code within delimiters as follows."
)


def decode_tests(field: Any) -> list[dict[str, Any]]:
    """Test cases ``[{"input", "output", "testtype"}]`` from a JSON string or the lite release's compressed form."""
    if isinstance(field, list):
        return field
    try:
        return json.loads(field)
    except (TypeError, ValueError):
        return json.loads(
            pickle.loads(zlib.decompress(base64.b64decode(str(field).encode("utf-8"))))
        )


def user_prompt(question: str, starter_code: str) -> str:
    """LiveCodeBench's generic question template (``get_generic_question_template_answer``)."""
    text = f"### Question:\n{question}\n\n"
    if starter_code:
        text += f"### Format: {FORMAT_WITH_STARTER}\n```python\n{starter_code}\n```\n\n"
    else:
        text += f"### Format: {FORMAT_STDIN}\n```python\n# YOUR CODE HERE\n```\n\n"
    return text + "### Answer: (use the provided format with backticks)\n\n"


@DATASETS.register("livecodebench")
class LiveCodeBenchDataset(BenchmarkDataset):
    """LiveCodeBench problems as :class:`Sample`.

    ``reference``: ``{question_id, platform, difficulty, fn_name (None: stdin), inputs [str], outputs [str]}``
    (public then private tests), what the scorer's sandbox needs.
    """

    name = "livecodebench"
    local_filename = "test.jsonl"

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for r in rows:
            tests = decode_tests(r["public_test_cases"]) + decode_tests(r["private_test_cases"])
            meta = r.get("metadata") or {}
            meta = json.loads(meta) if isinstance(meta, str) else meta
            out.append(
                (
                    f"livecodebench/{self.split}/{r['question_id']}",
                    {
                        "question_id": r["question_id"],
                        "question_content": r["question_content"],
                        "starter_code": r.get("starter_code") or "",
                        "platform": r.get("platform"),
                        "difficulty": r.get("difficulty"),
                        "contest_date": str(r.get("contest_date")),
                        "fn_name": meta.get("func_name"),
                        "inputs": [t["input"] for t in tests],
                        "outputs": [t["output"] for t in tests],
                    },
                )
            )
        return out

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        messages = [
            {"role": "system", "content": SYSTEM_MESSAGE},
            {"role": "user", "content": user_prompt(doc["question_content"], doc["starter_code"])},
        ]
        reference = {
            k: doc[k]
            for k in ("question_id", "platform", "difficulty", "fn_name", "inputs", "outputs")
        }
        return Sample(
            sample_id=sample_id,
            messages=messages,
            reference=reference,
            meta={"difficulty": doc["difficulty"], "contest_date": doc["contest_date"]},
        )
