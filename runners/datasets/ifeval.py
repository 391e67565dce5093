"""IFEval (541 verifiable-instruction prompts), zero-shot, as lm-eval's ``ifeval`` task.

Paper: Table 6, Fig. 1 / Fig. 6 (IFEval accuracy via lm-evaluation-harness).

Prompt: one user turn holding the item's ``prompt`` verbatim (lm-eval ``doc_to_text: prompt``), no
system message. Canonical order: the file / hub order (ascending ``key``). ``sample_id`` is
``"ifeval/<split>/<key>"`` (IFEval's own stable key).
"""

from __future__ import annotations

from typing import Any

from runners.datasets.base import Sample
from runners.datasets.common import BenchmarkDataset
from runners.registry import DATASETS


@DATASETS.register("ifeval")
class IfevalDataset(BenchmarkDataset):
    """IFEval items as :class:`Sample`.

    ``reference`` is the lm-eval doc ``{key, prompt, instruction_id_list, kwargs}`` that
    ``lm_eval.tasks.ifeval.utils.process_results`` grades.
    """

    name = "ifeval"
    local_filename = "input_data.jsonl"

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for row in rows:
            doc = {"key": int(row["key"]), "prompt": row["prompt"],
                   "instruction_id_list": list(row["instruction_id_list"]),
                   "kwargs": [dict(k or {}) for k in row["kwargs"]]}
            out.append((f"ifeval/{self.split}/{doc['key']}", doc))
        return out

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        return Sample(sample_id=sample_id, messages=[{"role": "user", "content": doc["prompt"]}], reference=doc,
                      meta={"key": doc["key"], "instruction_id_list": doc["instruction_id_list"]})
