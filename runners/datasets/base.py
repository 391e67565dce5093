"""The dataset seam: a benchmark turns into a list of :class:`Sample` prompts plus generation limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class Sample:
    """One benchmark item, ready for a backend.

    Attributes:
        sample_id: stable id within the dataset (e.g. ``"gsm8k/test/17"``); resumption keys on it.
        messages: the prompt as chat messages ``[{"role": ..., "content": ...}, ...]``; backends apply
            the target tokenizer's chat template with ``add_generation_prompt=True``. Few-shot
            examples are earlier turns, so every item of a dataset shares the same token prefix.
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
