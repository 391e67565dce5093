"""GSM8K test split, 8-shot chain of thought in lm-eval's ``gsm8k_cot_llama`` chat format.

Paper: Table 6 / Table 8 (GSM8K, 8-shot; accuracy via lm-evaluation-harness).

Prompt (as ``lm_eval --apply_chat_template --fewshot_as_multiturn`` builds it for ``gsm8k_cot_llama``):
8 user/assistant turns taken from the task YAML's ``fewshot_config.samples`` (user = ``doc_to_text``:
"Given the following problem, reason and give a final answer to the problem.\\nProblem: ...\\nYour
response should end with \\"The final answer is [answer]\\" ...", assistant = the worked answer ending
"The final answer is N"), then the test question as the last user turn. No system message. All items
share the same 16-message prefix, so the backend can cache its KV.
"""

from __future__ import annotations

from typing import Any

from runners.datasets.base import Sample
from runners.datasets.common import BenchmarkDataset
from runners.datasets.lm_eval_tasks import render, task_config
from runners.registry import DATASETS

LM_EVAL_TASK_YAML = "gsm8k/gsm8k-cot-llama.yaml"


@DATASETS.register("gsm8k")
class Gsm8kDataset(BenchmarkDataset):
    """GSM8K items as :class:`Sample` (``sample_id`` ``"gsm8k/<split>/<row index>"``).

    Args:
        num_fewshot: few-shot turns taken (in order) from the lm-eval task's fixed examples (8).
        lm_eval_task: task YAML under ``lm_eval/tasks/`` that defines the prompt.
        **common: see :class:`BenchmarkDataset`.

    ``reference`` is the lm-eval doc ``{"question", "answer"}``; ``meta["target"]`` the gold number.
    """

    name = "gsm8k"

    def __init__(self, *, num_fewshot: int = 8, lm_eval_task: str = LM_EVAL_TASK_YAML, **common: Any) -> None:
        super().__init__(**common)
        self.num_fewshot = int(num_fewshot)
        self.lm_eval_task = lm_eval_task
        self.local_filename = f"{self.split}.jsonl"
        self._prefix: list[dict[str, str]] | None = None

    def fewshot_messages(self) -> list[dict[str, str]]:
        """The shared prefix: ``num_fewshot`` user/assistant pairs (a fresh list on each call)."""
        if self._prefix is None:
            cfg = task_config(self.lm_eval_task)
            shots = list(cfg["fewshot_config"]["samples"])
            if self.num_fewshot > len(shots):
                raise ValueError(f"num_fewshot={self.num_fewshot} > {len(shots)} examples in {self.lm_eval_task}")
            prefix: list[dict[str, str]] = []
            for shot in shots[: self.num_fewshot]:
                prefix.append({"role": "user", "content": render(cfg["doc_to_text"], shot)})
                prefix.append({"role": "assistant", "content": render(cfg["doc_to_target"], shot)})
            self._prefix = prefix
        return [dict(m) for m in self._prefix]

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        return [(f"gsm8k/{self.split}/{i}", {"question": r["question"], "answer": r["answer"]})
                for i, r in enumerate(rows)]

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        cfg = task_config(self.lm_eval_task)
        messages = self.fewshot_messages() + [{"role": "user", "content": render(cfg["doc_to_text"], doc)}]
        return Sample(sample_id=sample_id, messages=messages, reference=doc,
                      meta={"target": render(cfg["doc_to_target"], doc)})
