"""Shared constructor, windowing and file reading of the benchmark datasets (GSM8K, MMLU, IFEval, HumanEval).

Each benchmark subclasses :class:`BenchmarkDataset`, sets ``name`` / ``local_filename``, and implements
``read_file`` (local or pinned file -> rows), ``docs`` (rows -> ``(sample_id, doc)`` in the
canonical order) and ``to_sample``. ``load()`` resolves the source, applies ``offset`` / ``limit``
to the canonical order, and builds :class:`~runners.datasets.base.Sample` objects.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from runners.datasets.base import Sample
from runners.datasets.sources import load_rows

logger = logging.getLogger(__name__)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``.jsonl`` or ``.jsonl.gz`` file (blank lines skipped)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


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
