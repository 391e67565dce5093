"""Judge prompts as the reference tools build them: FastChat's MT-Bench judge and AlpacaEval's annotator.

Sources (bundled, sha256-checked, licence beside each file in ``runners/datasets/data/``):

- ``mt_bench_judge/judge_prompts.jsonl``: FastChat ``llm_judge`` judge prompts (``single-v1``, ``single-math-v1``,
  ``pair-v2``, ``pair-math-v1`` and their multi-turn forms), each ``{name, type, system_prompt, prompt_template,
  category, output_format}``; ``mt_bench_judge/reference_answer_gpt-4.jsonl``: FastChat's GPT-4 reference answers
  of the MT-Bench questions in the categories that need one (:data:`NEED_REF_CATS`).
- ``alpaca_eval/alpaca_eval_clf.txt``: AlpacaEval's annotator prompt of ``weighted_alpaca_eval_gpt4_turbo`` (the
  AlpacaEval 2.0 default): a ChatML-style text (``<|im_start|>system ... <|im_end|>``) with ``{instruction}``,
  ``{output_1}``, ``{output_2}``; the judge answers the identifier of the better output, ``m`` (output_1) or ``M``.

How the reference tools turn them into chat messages (what :func:`single_messages`, :func:`pair_messages` and
:func:`alpaca_messages` reproduce):

- FastChat (``fastchat/llm_judge/common.py`` ``run_judge_single`` / ``run_judge_pair``, first turn): the user
  message is ``prompt_template.format(question=turns[0], answer=..., ref_answer_1=...)`` (``answer_a`` /
  ``answer_b`` for pairs); the system message is the prompt's ``system_prompt``. Questions of the categories in
  :data:`NEED_REF_CATS` use the reference-guided prompts (``*-math-v1``) with the reference answer's first turn.
- AlpacaEval (``annotators`` + ``utils.prompt_to_chatml``): each placeholder replaced once, the text split at
  ``<|im_start|>`` into ``{role, content}`` messages, each content stripped.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runners.datasets.sources import fetch_pinned_file

# Categories whose questions are graded against a reference answer (FastChat common.NEED_REF_CATS).
NEED_REF_CATS = ("math", "reasoning", "coding")

# Bundled files: path relative to the repository root and sha256 (checked on every load).
FASTCHAT_PROMPTS = {
    "package": None,
    "file": "runners/datasets/data/mt_bench_judge/judge_prompts.jsonl",
    "sha256": "fd283293406d024f44c174b094ef48031d0687a4682fd3a56b29b138f80281b6",
}
FASTCHAT_REFERENCES = {
    "package": None,
    "file": "runners/datasets/data/mt_bench_judge/reference_answer_gpt-4.jsonl",
    "sha256": "f957a5bc977badb66885ec970e6cd08527845780313f0995764260e5777b9b3f",
}
ALPACA_EVAL_TEMPLATE = {
    "package": None,
    "file": "runners/datasets/data/alpaca_eval/alpaca_eval_clf.txt",
    "sha256": "784227e6dc2832fc08c43d2c8ea3a308e7523780187a1aaad2f85e30bac85f62",
}
# AlpacaEval's annotator settings of weighted_alpaca_eval_gpt4_turbo (completions_kwargs, logprob_parser).
ALPACA_EVAL_ANNOTATOR = "weighted_alpaca_eval_gpt4_turbo"
ALPACA_EVAL_NUMERATOR = "m"  # output_1 is better
ALPACA_EVAL_TOKENS = ("m", "M")
ALPACA_EVAL_TOP_LOGPROBS = 5
ALPACA_EVAL_SEED = 0  # PairwiseAnnotator's default seed (seeds the per-instruction order switch)


def prompt_files() -> dict[str, str]:
    """``{file: sha256}`` of the bundled judge prompt files (part of every judge run's identity)."""
    return {
        Path(p["file"]).name: p["sha256"]
        for p in (FASTCHAT_PROMPTS, FASTCHAT_REFERENCES, ALPACA_EVAL_TEMPLATE)
    }


def _bundled(pinned: Mapping[str, Any]) -> Path:
    """The checked path of a bundled file (raises ``ChecksumError`` / ``DatasetUnavailableError``)."""
    return fetch_pinned_file(pinned)


@functools.cache
def fastchat_prompts() -> dict[str, dict[str, str]]:
    """FastChat's judge prompts by name (``single-v1``, ``single-math-v1``, ``pair-v2``, ``pair-math-v1``, ...)."""
    path = _bundled(FASTCHAT_PROMPTS)
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out[str(row["name"])] = row
    return out


@functools.cache
def fastchat_references() -> dict[int, list[str]]:
    """FastChat's GPT-4 reference answers: ``{question_id: [turn 1, turn 2]}``."""
    path = _bundled(FASTCHAT_REFERENCES)
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out[int(row["question_id"])] = [str(t) for t in row["choices"][0]["turns"]]
    return out


@functools.cache
def alpaca_eval_template() -> str:
    return _bundled(ALPACA_EVAL_TEMPLATE).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Question:
    """One judged question (first turn).

    Attributes:
        sample_id: the decode record's sample id.
        question_id: the benchmark's id (MT-Bench 81..160, KoMT-Bench likewise, Alpaca 0..79).
        category: the benchmark category (MT-Bench: writing, ..., math, coding); "" when the set has none.
        text: ``turns[0]``, the prompt the model answered.
        reference: the reference answer's first turn for reference-guided grading, or None.
        reference_source: where ``reference`` came from (a line of every judgment record), or None.
    """

    sample_id: str
    question_id: int
    category: str
    text: str
    reference: str | None = None
    reference_source: str | None = None


def needs_reference(q: Question) -> bool:
    """FastChat grades math, reasoning and coding questions against a reference answer."""
    return q.category in NEED_REF_CATS


def reference_for(
    question_id: int, category: str, own: list[str] | None, dataset: str
) -> tuple[str | None, str | None]:
    """The reference answer (first turn) a reference-guided prompt shows, and its source.

    MT-Bench: FastChat's GPT-4 reference answers. A set with its own ``reference`` field (KoMT-Bench's Korean
    references) uses that first; where it has none, the MT-Bench GPT-4 answer of the same question id (KoMT-Bench
    translates MT-Bench and keeps its ids). Categories outside :data:`NEED_REF_CATS`: (None, None).

    Raises:
        KeyError: a category that needs a reference has none in either source (FastChat's ``check_data``
            refuses such a question too).
    """
    if category not in NEED_REF_CATS:
        return None, None
    if dataset != "mt_bench" and own:
        return str(own[0]), f"{dataset} question file"
    refs = fastchat_references()
    if question_id in refs:
        return refs[question_id][0], "FastChat MT-Bench reference_answer/gpt-4.jsonl"
    raise KeyError(
        f"question {question_id} ({dataset}, category {category!r}) needs a reference answer and has none "
        f"(FastChat's reference_answer/gpt-4.jsonl covers MT-Bench 101-130)"
    )


def single_prompt_name(q: Question) -> str:
    return "single-math-v1" if needs_reference(q) else "single-v1"


def pair_prompt_name(q: Question) -> str:
    return "pair-math-v1" if needs_reference(q) else "pair-v2"


def single_messages(q: Question, answer: str) -> tuple[str, list[dict[str, str]]]:
    """FastChat single-answer grading, first turn: ``(prompt name, [system, user])``.

    Raises:
        ValueError: a reference-guided question without a reference.
    """
    name = single_prompt_name(q)
    p = fastchat_prompts()[name]
    kwargs = {"question": q.text, "answer": answer}
    if needs_reference(q):
        if q.reference is None:
            raise ValueError(f"{q.sample_id}: prompt {name} needs a reference answer")
        kwargs["ref_answer_1"] = q.reference
    return name, [
        {"role": "system", "content": p["system_prompt"]},
        {"role": "user", "content": p["prompt_template"].format(**kwargs)},
    ]


def pair_messages(q: Question, answer_a: str, answer_b: str) -> tuple[str, list[dict[str, str]]]:
    """FastChat pairwise comparison, first turn, assistant A = ``answer_a``: ``(prompt name, [system, user])``.

    Raises:
        ValueError: a reference-guided question without a reference.
    """
    name = pair_prompt_name(q)
    p = fastchat_prompts()[name]
    kwargs = {"question": q.text, "answer_a": answer_a, "answer_b": answer_b}
    if needs_reference(q):
        if q.reference is None:
            raise ValueError(f"{q.sample_id}: prompt {name} needs a reference answer")
        kwargs["ref_answer_1"] = q.reference
    return name, [
        {"role": "system", "content": p["system_prompt"]},
        {"role": "user", "content": p["prompt_template"].format(**kwargs)},
    ]


_PLACEHOLDER = re.compile(r"\{(instruction|output_1|output_2)\}")


def alpaca_messages(instruction: str, output_1: str, output_2: str) -> list[dict[str, str]]:
    """AlpacaEval's annotator prompt as chat messages (``[system, user]``).

    Each placeholder of the template is filled once, in one pass over the template (an output that itself
    contains ``{output_2}`` is left as written), then the ChatML-style text becomes messages.
    """
    values = {"instruction": instruction, "output_1": output_1, "output_2": output_2}
    seen: set[str] = set()

    def fill(m: re.Match) -> str:
        key = m.group(1)
        if key in seen:  # AlpacaEval replaces only the first occurrence of each placeholder
            return m.group(0)
        seen.add(key)
        return values[key]

    text = _PLACEHOLDER.sub(fill, alpaca_eval_template()).strip()
    messages = []
    for part in text.split("<|im_start|>")[1:]:
        role, _, rest = part.partition("\n")
        messages.append({"role": role.strip(), "content": rest.split("<|im_end|>", 1)[0].strip()})
    return messages


def alpaca_switched(instruction: str, seed: int = ALPACA_EVAL_SEED) -> bool:
    """Whether AlpacaEval shows this instruction's outputs in swapped order (output_2 first).

    AlpacaEval randomises the order per instruction with a string-seeded choice (``RandomSwitchTwoColumnsProcessor``:
    seed ``"is_switched_outputs" + instruction + str(seed)``, choices ``[False, True]``); the same rule here
    swaps the same instructions.
    """
    import random

    return bool(random.Random(f"is_switched_outputs{instruction}{seed}").choices([False, True])[0])
