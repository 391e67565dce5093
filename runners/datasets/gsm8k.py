"""GSM8K test split, 8-shot chain of thought: lm-eval's ``gsm8k_cot_llama`` task.

Paper: Table 6 / Table 8 (GSM8K, 8-shot; accuracy via lm-evaluation-harness).

Prompt, stops and cap come from lm-eval (``lm_eval --tasks gsm8k_cot_llama --apply_chat_template
--fewshot_as_multiturn``): 8 user/assistant turns from the task's fixed ``fewshot_config.samples``
(``first_n``), then the test question as the last user turn; no system message; every item shares the
16-message prefix, so a backend can cache its KV. Stop strings: the task's ``generation_kwargs.until``;
cap: its ``max_gen_toks`` (lm-eval's default 256 when the task sets none). Docs come from the pinned
offline source (``conf/dataset/gsm8k.yaml``) and are handed to lm-eval's task as its test split.
"""

from __future__ import annotations

from typing import Any

from runners.datasets.lm_eval_dataset import LmEvalDataset
from runners.registry import DATASETS


@DATASETS.register("gsm8k")
class Gsm8kDataset(LmEvalDataset):
    """GSM8K items as :class:`~runners.datasets.base.Sample` (``sample_id`` ``"gsm8k/<split>/<row index>"``).

    Args:
        lm_eval_task: registered task name (default ``gsm8k_cot_llama``).
        num_fewshot: ``None``: the task's 8; an int takes the first n of its fixed examples.
        **common: see :class:`~runners.datasets.lm_eval_dataset.LmEvalDataset`.

    ``reference`` is the lm-eval doc ``{"question", "answer"}``; ``meta["target"]`` the gold number.
    """

    name = "gsm8k"
    default_task = "gsm8k_cot_llama"

    def __init__(self, **common: Any) -> None:
        super().__init__(**common)
        self.local_filename = f"{self.split}.jsonl"

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        return [
            (f"gsm8k/{self.split}/{i}", {"question": r["question"], "answer": r["answer"]})
            for i, r in enumerate(rows)
        ]
