"""HumanEval (164 problems) with EvalPlus's instruct-model chat prompt.

Paper: Table 1, Table 2, Table 6 (HumanEval pass@1 via EvalPlus).

Prompt (EvalPlus ``codegen`` for a chat model, ``evalplus.provider.utility.make_raw_chat_prompt``):
one user turn ``"Please provide a self-contained Python script that solves the following problem in a
markdown code block:\\n```\\n<prompt.strip()>\\n```\\n"``, then EvalPlus's pre-filled assistant turn
"Below is a Python script with a self-contained function that solves the problem and passes
corresponding tests:\\n```python\\n", which the backend continues (a final assistant message, see
:func:`runners.datasets.base.prompt_token_ids`); the rendered prompt equals ``make_raw_chat_prompt``'s.
The answer's code is extracted by EvalPlus's sanitizer at scoring time. Stop strings are EvalPlus's
chat-model ``eos`` list (with ``"\\n```\\n"``).
``sample_id`` is ``"humaneval/<split>/<problem number>"``; order is the problem number.
"""

from __future__ import annotations

from typing import Any

from runners.datasets.base import BenchmarkDataset, Sample
from runners.registry import DATASETS

INSTRUCTION_PREFIX = (
    "Please provide a self-contained Python script that solves the following problem in a "
    "markdown code block:"
)
RESPONSE_PREFIX = (
    "Below is a Python script with a self-contained function that solves the problem and passes "
    "corresponding tests:"
)


def response_start(response_prefix: str = RESPONSE_PREFIX) -> str:
    """EvalPlus's pre-filled start of the assistant turn (``make_raw_chat_prompt``'s ``response`` up to the code)."""
    return f"{response_prefix}\n```python\n"


def instruct_prompt(prompt: str, instruction_prefix: str = INSTRUCTION_PREFIX) -> str:
    """The user message EvalPlus builds for a chat model (``make_raw_chat_prompt``'s ``task_prompt``)."""
    task_prompt = prompt.strip() + "\n"  # evalplus.codegen: task["prompt"].strip() + "\n"
    return f"{instruction_prefix}\n```\n{task_prompt.strip()}\n```\n"


@DATASETS.register("humaneval")
class HumanevalDataset(BenchmarkDataset):
    """HumanEval problems as :class:`Sample`.

    Args:
        instruction_prefix: first line of the user message (EvalPlus's default instruct prefix).
        response_prefix: start of the pre-filled assistant turn (EvalPlus's default response prefix).
        **common: see :class:`BenchmarkDataset`.

    ``reference`` is ``{task_id, prompt, entry_point, test}``: the original HumanEval problem, whose
    ``test`` (a ``check(candidate)`` function) is the offline base test suite.
    """

    name = "humaneval"
    local_filename = "HumanEval.jsonl.gz"

    def __init__(
        self,
        *,
        instruction_prefix: str = INSTRUCTION_PREFIX,
        response_prefix: str = RESPONSE_PREFIX,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.instruction_prefix = instruction_prefix
        self.response_prefix = response_prefix

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        docs = [{k: r[k] for k in ("task_id", "prompt", "entry_point", "test")} for r in rows]
        docs.sort(key=lambda d: int(str(d["task_id"]).split("/")[-1]))
        return [(f"humaneval/{self.split}/{str(d['task_id']).split('/')[-1]}", d) for d in docs]

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        content = instruct_prompt(doc["prompt"], self.instruction_prefix)
        messages = [
            {"role": "user", "content": content},
            {"role": "assistant", "content": response_start(self.response_prefix)},
        ]
        return Sample(
            sample_id=sample_id,
            messages=messages,
            reference=doc,
            meta={"task_id": doc["task_id"], "entry_point": doc["entry_point"]},
        )
