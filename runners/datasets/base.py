"""The dataset seam: a benchmark turns into a list of :class:`Sample` prompts plus generation limits.

:class:`TaskDataset` is the protocol; :class:`BenchmarkDataset` the base class of the benchmarks (constructor,
``offset`` / ``limit`` windowing, source resolution): each subclass sets ``name`` / ``local_filename`` and
implements ``read_file`` (local or pinned file -> rows), ``docs`` (rows -> ``(sample_id, doc)`` in the
canonical order) and ``to_sample``. The prompt functions turn a sample's messages into what a backend sends
(:func:`prompt_token_ids`) and what a record stores (:func:`prompt_record`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from runners.datasets.sources import load_rows, read_jsonl

logger = logging.getLogger(__name__)


@dataclass
class Sample:
    """One benchmark item, ready for a backend.

    Attributes:
        sample_id: stable id within the dataset (e.g. ``"gsm8k/test/17"``); resumption keys on it.
        messages: the prompt as chat messages ``[{"role": ..., "content": ...}, ...]``; backends encode
            them with :func:`prompt_token_ids` (the target tokenizer's chat template, generation prompt
            added; a final assistant message is an unfinished turn that the model continues, as
            lm-eval's ``gen_prefix``). Few-shot examples are earlier turns, so every item of a dataset
            shares the same token prefix.
        reference: what the scorer needs (gold answer, test code, instruction ids ...); JSON-serialisable.
        meta: free-form JSON-serialisable extras (topic, task_id ...).
    """

    sample_id: str
    messages: list[dict[str, str]]
    reference: Any = None
    meta: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TaskDataset(Protocol):
    """A benchmark. Constructed from ``conf/dataset/<name>.yaml`` by ``runners.registry.build``.

    Attributes:
        name: registry key.
        scorer: registry key of the scorer in ``runners.registry.SCORERS`` that grades it.
        stop: stop strings; generation ends when the decoded output contains one (it is cut there).
        max_new_tokens: generation limit in tokens.
    """

    name: str
    scorer: str
    stop: list[str]
    max_new_tokens: int

    def load(self) -> list[Sample]:
        """Return the selected items (after ``offset`` / ``limit``), in a fixed order."""
        ...


class BenchmarkDataset:
    """Common part of the ``TaskDataset`` implementations.

    Args:
        source: ``{local_path, hub_id, hub_config?, pinned?, order?}``; see ``runners.datasets.sources``.
        split: split name (the hub split; also part of every ``sample_id``).
        limit: number of items after ``offset`` (``None``: all).
        offset: items skipped at the start of the canonical order.
        max_new_tokens: generation limit in tokens.
        stop: stop strings (``None``: none, or for an lm-eval task its ``generation_kwargs.until``).
        scorer: key in ``runners.registry.SCORERS``.

    Attributes:
        provenance: after ``load()``, which source supplied the data (``local:...``, ``hub:...``,
            ``pinned:...``).
    """

    name: str = ""
    local_filename: str | None = None

    def __init__(
        self,
        *,
        source: Mapping[str, Any],
        split: str,
        max_new_tokens: int,
        scorer: str,
        stop: list[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        log: Callable[[str], None] = logger.info,
    ) -> None:
        if limit is not None and int(limit) < 0:
            raise ValueError(f"dataset.limit must be null or >= 0, got {limit}")
        if int(offset) < 0:
            raise ValueError(f"dataset.offset must be >= 0, got {offset}")
        if int(max_new_tokens) <= 0:
            raise ValueError(f"dataset.max_new_tokens must be > 0, got {max_new_tokens}")
        if stop is not None and not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"dataset.stop must be a list of non-empty strings, got {stop!r}")
        self.source = dict(source)
        self.split = str(split)
        self.limit = None if limit is None else int(limit)
        self.offset = int(offset)
        self.max_new_tokens = int(max_new_tokens)
        self.stop = None if stop is None else list(stop)
        self.scorer = str(scorer)
        self.provenance: str | None = None
        self._log = log

    # --- per-benchmark hooks -------------------------------------------------------------------
    def read_file(self, path: Path) -> list[dict[str, Any]]:
        return read_jsonl(path)

    def docs(self, rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
        """``(sample_id, doc)`` pairs in the canonical order that ``offset`` / ``limit`` index."""
        raise NotImplementedError

    def to_sample(self, sample_id: str, doc: dict[str, Any]) -> Sample:
        raise NotImplementedError

    # --- TaskDataset -----------------------------------------------------------------------------
    def selected_docs(self) -> list[tuple[str, dict[str, Any]]]:
        """``(sample_id, doc)`` of the selected items (after ``offset`` / ``limit``), canonical order."""
        rows, self.provenance = load_rows(
            self.name,
            self.source,
            self.split,
            self.read_file,
            local_filename=self.local_filename,
            log=self._log,
        )
        docs = self.docs(rows)
        end = None if self.limit is None else self.offset + self.limit
        return docs[self.offset : end]

    def load(self) -> list[Sample]:
        """The selected items (after ``offset`` / ``limit``), in the canonical order."""
        if self.stop is None:
            self.stop = []
        return [self.to_sample(sample_id, doc) for sample_id, doc in self.selected_docs()]


def continues_final_message(messages: list[dict[str, str]]) -> bool:
    """True when the last message is the assistant's unfinished turn (a pre-filled answer start)."""
    return bool(messages) and messages[-1].get("role") == "assistant"


# apply_chat_template arguments the prompt functions set themselves (a pair's chat_template_kwargs may not)
FIXED_CHAT_KWARGS = ("add_generation_prompt", "continue_final_message", "tokenize", "conversation")
# marks where a continued final message ends in the rendered chat (EvalPlus's make_raw_chat_prompt method)
CONTINUE_SPLITTER = "-[[]]-dropmatch-continue-here-[[]]-"


def _extra_kwargs(chat_template_kwargs: Mapping[str, Any] | None) -> dict:
    # the pair's template variables (conf/pair/*.yaml chat_template_kwargs, e.g. Qwen3's enable_thinking: false)
    if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, Mapping):
        raise TypeError(
            f"chat_template_kwargs must be a mapping, got {type(chat_template_kwargs).__name__}"
        )
    extra = dict(chat_template_kwargs or {})
    fixed = sorted(set(FIXED_CHAT_KWARGS) & set(extra))
    if fixed:
        raise TypeError(f"chat_template_kwargs may not set {fixed} (the prompt functions set them)")
    return extra


def prompt_text(
    tokenizer: Any,
    messages: list[dict[str, str]],
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt string: ``tokenizer.apply_chat_template`` with the pair's ``chat_template_kwargs`` (template
    variables, e.g. ``{"enable_thinking": False}``; None = ``{}``).

    * Last message from the user: rendered with the generation prompt, as lm-eval's HFLM renders a chat model's
      context.
    * Last message from the assistant (a pre-filled answer start that the model continues): the whole chat is
      rendered with a splitter appended to that message and cut at the splitter, EvalPlus's
      ``make_raw_chat_prompt`` method. The message's content is thus continued exactly as written, also under
      templates that trim message content (Llama 3.x: ``message['content'] | trim``), where transformers'
      ``continue_final_message`` would cut its trailing whitespace (EvalPlus's "```python\n" would end in
      "```python"). For content without trailing whitespace (lm-eval's ``gen_prefix`` of every task used here,
      e.g. MMLU's "The best answer is") both methods give the same text.

    Raises:
        TypeError: ``chat_template_kwargs`` is not a mapping or sets one of :data:`FIXED_CHAT_KWARGS`.
        ValueError: the chat template drops or repeats the final message's content (no single splitter).
    """
    extra = _extra_kwargs(chat_template_kwargs)
    if not continues_final_message(messages):
        return tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **extra
        )
    last = dict(messages[-1])
    last["content"] = f"{last['content']}{CONTINUE_SPLITTER}"
    text = tokenizer.apply_chat_template(
        [*messages[:-1], last], tokenize=False, add_generation_prompt=False, **extra
    )
    if text.count(CONTINUE_SPLITTER) != 1:
        raise ValueError(
            f"the chat template rendered the final assistant message {text.count(CONTINUE_SPLITTER)} times "
            "(expected once); it cannot be continued"
        )
    return text.split(CONTINUE_SPLITTER)[0]


def prompt_token_ids(
    tokenizer: Any,
    messages: list[dict[str, str]],
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Prompt token ids a backend sends: :func:`prompt_text` tokenized without added special tokens
    (the chat template already holds them, as ``apply_chat_template(tokenize=True)`` and lm-eval's HFLM
    tokenize a rendered chat).

    Raises:
        TypeError, ValueError: as :func:`prompt_text`.
    """
    ids = tokenizer(
        prompt_text(tokenizer, messages, chat_template_kwargs), add_special_tokens=False
    )["input_ids"]
    return [int(i) for i in ids]


def prompt_record(
    tokenizer: Any,
    messages: list[dict[str, str]],
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a run record stores of the prompt: the text (a few kB), its token count and the sha256 of the
    token ids (``"<id> <id> ..."``); the ids themselves are re-derivable from the text and tokenizer."""
    ids = prompt_token_ids(tokenizer, messages, chat_template_kwargs)
    return {
        "text": prompt_text(tokenizer, messages, chat_template_kwargs),
        "num_tokens": len(ids),
        "token_ids_sha256": hashlib.sha256(" ".join(map(str, ids)).encode()).hexdigest(),
    }
