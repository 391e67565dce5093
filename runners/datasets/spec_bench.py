"""Spec-Bench (480 prompts, 6 tasks) as single-turn chat prompts, for Fig. 3's decoding-path similarity.

Paper: Fig. 3 (MC-dropout decoding paths on Spec-Bench; Xia et al. 2024, hemingkx/Spec-Bench
``data/spec_bench/question.jsonl``).

Rows are ``{question_id, category, turns: [str, ...]}``. Tasks: ``mt_bench`` (question ids 81-160, eight
MT-Bench categories), ``translation``, ``summarization``, ``qa``, ``math_reasoning``, ``rag`` (80 each).
Prompt: one user turn holding ``turns[0]`` verbatim, no system message. Spec-Bench's own runner also
answers an MT-Bench item's second turn after its first answer; Fig. 3 compares first answers only, so
the second turn is dropped (known deviation). Canonical order (what ``offset`` / ``limit`` index):
``order: interleaved`` (default) deals the six tasks round-robin in file order (item 0 of every task,
then item 1, ...), so a small ``limit`` spreads over tasks; ``order: file`` keeps the file order.
``sample_id`` is ``"spec_bench/<split>/<question_id>"``. No reference answer: scored by the ``none``
scorer; ``reference`` carries the question so run records alone suffice for Fig. 3's entailment judge.
No hub or pinned offline copy is known: give ``source.local_path`` (the file or its folder), e.g.
with ``DROPMATCH_SPEC_BENCH=/path/to/question.jsonl``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from runners.datasets.base import BenchmarkDataset, Sample
from runners.registry import DATASETS

MT_BENCH_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
)
ORDERS = ("interleaved", "file")


def task_of(category: str) -> str:
    """Spec-Bench task of a row's ``category`` (the eight MT-Bench categories form ``mt_bench``)."""
    return "mt_bench" if category in MT_BENCH_CATEGORIES else category


@DATASETS.register("spec_bench")
class SpecBenchDataset(BenchmarkDataset):
    """Spec-Bench prompts as :class:`Sample`.

    Args:
        order: ``"interleaved"`` or ``"file"`` (see module docstring).
        tasks: optional list of tasks to keep (``mt_bench``, ``translation``, ...); None keeps all.
        **common: see :class:`BenchmarkDataset`.

    ``reference`` is ``{question_id, question}`` (the first turn); ``meta`` holds ``question_id``,
    ``category`` and ``task``.
    """

    name = "spec_bench"
    local_filename = "question.jsonl"

    def __init__(
        self, *, order: str = "interleaved", tasks: list[str] | None = None, **common: Any
    ) -> None:
        super().__init__(**common)
        if order not in ORDERS:
            raise ValueError(f"dataset.order={order!r} unknown; allowed: {', '.join(ORDERS)}")
        self.order = order
        self.tasks = None if tasks is None else [str(t) for t in tasks]

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        by_task: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
        for row in rows:
            doc = {
                "question_id": int(row["question_id"]),
                "category": str(row["category"]),
                "turns": [str(t) for t in row["turns"]],
            }
            doc["task"] = task_of(doc["category"])
            by_task[doc["task"]].append((f"spec_bench/{self.split}/{doc['question_id']}", doc))
        names = list(by_task)  # first-appearance (file) order
        if self.tasks is not None:
            unknown = sorted(set(self.tasks) - set(names))
            if unknown:
                raise ValueError(
                    f"dataset.tasks has unknown tasks {unknown}; known: {', '.join(names)}"
                )
            names = [t for t in names if t in self.tasks]
        if self.order == "file":
            return sorted(
                (item for t in names for item in by_task[t]), key=lambda it: it[1]["question_id"]
            )
        depth = max((len(by_task[t]) for t in names), default=0)
        return [by_task[t][i] for i in range(depth) for t in names if i < len(by_task[t])]

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        return Sample(
            sample_id=sample_id,
            messages=[{"role": "user", "content": doc["turns"][0]}],
            reference={"question_id": doc["question_id"], "question": doc["turns"][0]},
            meta={
                "question_id": doc["question_id"],
                "category": doc["category"],
                "task": doc["task"],
            },
        )
