"""Common part of the benchmarks whose prompts lm-evaluation-harness builds (GSM8K, MMLU, IFEval).

A subclass names the registered lm-eval task of each doc (:meth:`LmEvalDataset.task_of`); ``load()``
reads the docs from the project's pinned offline source, hands the selected window to lm-eval
(:func:`runners.datasets.lm_eval_tasks.load_tasks`) and asks each task for the prompt of each doc.
What a :class:`~runners.datasets.base.Sample` carries therefore comes from lm-eval:

* ``messages``: ``task.fewshot_context`` with the chat template applied, few-shot as multiturn (a task's
  ``gen_prefix`` is a final, partial assistant message that the backend continues);
* ``reference``: the doc exactly as lm-eval's task holds it (``task.eval_docs[i]``), which the scorer
  grades with the same task's filters and ``process_results``;
* ``meta["lm_eval_task"]`` (the task name) and ``meta["target"]`` (``task.doc_to_target``).

The dataset's ``stop`` and default ``max_new_tokens`` are the task's ``generation_kwargs`` (``until``,
``max_gen_toks``) unless the config overrides them (a documented deviation when it does).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from runners.datasets.base import BenchmarkDataset, Sample
from runners.datasets.lm_eval_tasks import chat_messages, generation_limits, load_tasks


class LmEvalDataset(BenchmarkDataset):
    """A :class:`BenchmarkDataset` whose samples lm-eval builds.

    Args:
        lm_eval_task: registered lm-eval task name (a ``{subject}`` placeholder is filled per doc by
            :meth:`task_of`).
        num_fewshot: ``None`` keeps the task's own ``num_fewshot``; an int overrides it.
        max_new_tokens: ``None``: the task's ``max_gen_toks``.
        stop: ``None``: the task's ``generation_kwargs.until``.
        **common: see :class:`BenchmarkDataset`.

    Attributes:
        tasks: after ``load()``, ``{task name: lm_eval ConfigurableTask}`` of the loaded window.
    """

    default_task: str = ""

    def __init__(
        self,
        *,
        lm_eval_task: str | None = None,
        num_fewshot: int | None = None,
        max_new_tokens: int | None = None,
        **common: Any,
    ) -> None:
        super().__init__(max_new_tokens=int(max_new_tokens or 1), **common)
        self._max_new_tokens_set = max_new_tokens is not None
        if num_fewshot is not None and int(num_fewshot) < 0:
            raise ValueError(f"dataset.num_fewshot must be null or >= 0, got {num_fewshot}")
        self.lm_eval_task = str(lm_eval_task or self.default_task)
        self.num_fewshot = None if num_fewshot is None else int(num_fewshot)
        self.tasks: dict[str, Any] = {}

    def task_of(self, doc: dict[str, Any]) -> str:
        """Registered lm-eval task that holds ``doc``."""
        return self.lm_eval_task

    def task_overrides(self) -> dict[str, Any]:
        return {} if self.num_fewshot is None else {"num_fewshot": self.num_fewshot}

    def sample_meta(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Extra ``meta`` fields of a sample (subclasses add e.g. the subject)."""
        return {}

    def load(self) -> list[Sample]:

        selected = self.selected_docs()
        if not selected:
            return []
        by_task: dict[str, list[int]] = defaultdict(list)
        for i, (_, doc) in enumerate(selected):
            by_task[self.task_of(doc)].append(i)
        self.tasks = load_tasks(
            {name: [selected[i][1] for i in idx] for name, idx in by_task.items()},
            self.task_overrides(),
        )
        until, max_gen_toks = generation_limits(next(iter(self.tasks.values())))
        if self.stop is None:
            self.stop = until
        if not self._max_new_tokens_set:
            self.max_new_tokens = max_gen_toks
        samples: list[Sample | None] = [None] * len(selected)
        for name, idx in by_task.items():
            task = self.tasks[name]
            for j, i in enumerate(idx):
                doc = dict(task.eval_docs[j])
                samples[i] = Sample(
                    sample_id=selected[i][0],
                    messages=chat_messages(task, doc),
                    reference=doc,
                    meta={
                        "lm_eval_task": name,
                        "target": str(task.doc_to_target(doc)),
                        **self.sample_meta(doc),
                    },
                )
        return [s for s in samples if s is not None]
