"""IFEval (541 verifiable-instruction prompts), zero-shot: lm-eval's ``ifeval`` task.

Paper: Table 6, Fig. 1 / Fig. 6 (IFEval accuracy via lm-evaluation-harness).

Prompt, stops and cap come from lm-eval: one user turn holding the item's ``prompt`` (``doc_to_text:
prompt``), no system message, no stop strings, ``max_gen_toks`` 1280. Canonical order: the file / hub
order (ascending ``key``). ``sample_id`` is ``"ifeval/<split>/<key>"`` (IFEval's own stable key).
"""

from __future__ import annotations

from typing import Any

from runners.datasets.lm_eval_dataset import LmEvalDataset
from runners.registry import DATASETS


@DATASETS.register("ifeval")
class IfevalDataset(LmEvalDataset):
    """IFEval items as :class:`~runners.datasets.base.Sample`.

    ``reference`` is the lm-eval doc ``{key, prompt, instruction_id_list, kwargs}`` as lm-eval's task holds
    it (``kwargs`` entries carry every checker argument, unused ones ``None``, as on the hub), which
    ``lm_eval.tasks.ifeval.utils.process_results`` grades.
    """

    name = "ifeval"
    default_task = "ifeval"
    local_filename = "input_data.jsonl"

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for row in rows:
            doc = {
                "key": int(row["key"]),
                "prompt": row["prompt"],
                "instruction_id_list": list(row["instruction_id_list"]),
                "kwargs": [dict(k or {}) for k in row["kwargs"]],
            }
            out.append((f"ifeval/{self.split}/{doc['key']}", doc))
        return out

    def sample_meta(self, doc: dict[str, Any]) -> dict[str, Any]:
        return {"key": doc["key"], "instruction_id_list": list(doc["instruction_id_list"])}
