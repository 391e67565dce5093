"""EAGLE's 80-question evaluation sets (GSM8K, MT-Bench, Alpaca) and KoMT-Bench, as single-turn chat prompts.

Paper: DropMatch Table 7 (EAGLE3 vs EAGLE3 + DM on GSM8K, MT-Bench, Alpaca; "evaluating 80 samples", the
EAGLE setting, SafeAILab/EAGLE ``eagle/data/<name>/question.jsonl``) and Table 10 (KoMT-Bench, the Korean
MT-Bench translation, ``question_ko.jsonl``).

Rows are ``{question_id, category, turns: [str, ...], reference?: [str, ...]}``. Prompt: one user turn
holding ``turns[0]`` verbatim, no system message. Known deviation: EAGLE's ``gen_ea_answer_*`` also
answers the second turn of MT-Bench / KoMT-Bench items after the first answer; only the first turn is
decoded here (every set's speed and acceptance counters cover first answers only). Canonical order
(what ``offset`` / ``limit`` index): file order. ``sample_id`` is ``"<key>/<split>/<question_id>"``.

Registry keys (one class each, sharing this code): ``eagle_gsm8k`` (reference = ``{question, answer}``
with EAGLE's ``reference[0]`` GSM8K solution ending ``#### N``, graded by ``eagle_gsm8k_exact_match``),
``mt_bench``, ``alpaca``, ``komt_bench`` (no offline grader: the paper judges with GPT-4; scorer
``none``, ``reference`` = ``{question_id, question}``). The files are bundled with this repository as
the pinned offline source (``runners/datasets/data/<key>/``, sha256-checked, with their LICENSE).
"""

from __future__ import annotations

from typing import Any

from runners.datasets.base import BenchmarkDataset, Sample
from runners.registry import DATASETS


class EagleBenchDataset(BenchmarkDataset):
    """One EAGLE-format question file as :class:`Sample` (first turn only).

    Args:
        **common: see :class:`BenchmarkDataset`.

    ``meta`` holds ``question_id``, ``category`` and ``num_turns`` (turns in the file; 1 is decoded).
    """

    name = ""
    local_filename = "question.jsonl"
    graded = False  # True: reference carries lm-eval's GSM8K doc {question, answer}

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for row in rows:
            doc = {
                "question_id": int(row["question_id"]),
                "category": str(row.get("category") or ""),
                "turns": [str(t) for t in row["turns"]],
                "reference": list(row.get("reference") or []),
            }
            out.append((f"{self.name}/{self.split}/{doc['question_id']}", doc))
        return out

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        question = doc["turns"][0]
        if self.graded:
            if not doc["reference"]:
                raise ValueError(f"{sample_id}: no reference answer in the file")
            reference: dict[str, Any] = {"question": question, "answer": doc["reference"][0]}
        else:
            reference = {"question_id": doc["question_id"], "question": question}
        return Sample(
            sample_id=sample_id,
            messages=[{"role": "user", "content": question}],
            reference=reference,
            meta={
                "question_id": doc["question_id"],
                "category": doc["category"],
                "num_turns": len(doc["turns"]),
            },
        )


@DATASETS.register("eagle_gsm8k")
class EagleGsm8kDataset(EagleBenchDataset):
    """EAGLE's 80 GSM8K questions (zero-shot, no CoT instruction), graded on the final number."""

    name = "eagle_gsm8k"
    graded = True


@DATASETS.register("mt_bench")
class MtBenchDataset(EagleBenchDataset):
    """MT-Bench's 80 questions (EAGLE's copy), first turn."""

    name = "mt_bench"


@DATASETS.register("alpaca")
class AlpacaDataset(EagleBenchDataset):
    """EAGLE's 80 Alpaca instructions."""

    name = "alpaca"


@DATASETS.register("komt_bench")
class KomtBenchDataset(EagleBenchDataset):
    """KoMT-Bench (MT-Bench translated to Korean, 80 questions), first turn."""

    name = "komt_bench"
    local_filename = "question_ko.jsonl"
