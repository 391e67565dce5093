"""lm-evaluation-harness tasks, built by lm-eval itself and fed with this project's pinned offline docs.

lm-eval is the single source of the GSM8K / MMLU / IFEval prompts, stop strings, generation caps,
filters, metrics and aggregations: this module only asks lm-eval's public API for them.

* :func:`load_tasks` builds the registered tasks with ``lm_eval.tasks.TaskManager.load`` (inline group,
  one ``{"task": <registered name>, ...overrides}`` entry per task, as lm-eval's group YAMLs override
  their members). The only overrides are the data: ``custom_dataset`` (lm-eval's hook for a dataset the
  caller supplies) returns our docs as the ``test`` split, so lm-eval never downloads; plus any
  documented deviation (``num_fewshot`` where the few-shot split is not available offline).
* :func:`chat_messages` is ``task.fewshot_context(..., apply_chat_template=True,
  fewshot_as_multiturn=True)`` (what ``lm_eval --apply_chat_template --fewshot_as_multiturn`` sends a
  chat model) with a chat template that hands back the messages instead of rendering them; a task's
  ``gen_prefix`` arrives as a final, partial assistant message (continued, not closed: see
  :func:`runners.datasets.base.prompt_token_ids`).
* :func:`generation_limits` is the task's ``generation_kwargs`` (``until``, ``max_gen_toks``).

``lm_eval`` is imported lazily, so ``import runners.datasets`` stays light. The code is tested against
lm-eval :data:`LM_EVAL_VERSION` (pinned exactly in ``pyproject.toml``).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from runners.datasets.nltk_punkt import ensure_punkt_tab

log = logging.getLogger(__name__)

LM_EVAL_VERSION = "0.4.13"
DEFAULT_MAX_GEN_TOKS = 256  # lm-eval's HFLM default when a task sets no max_gen_toks
GROUP = "dropmatch"  # name of the inline group that carries our docs (not a results row)
SPLIT = "test"


class _CustomDatasetNotice(logging.Filter):
    """Drops lm-eval's per-task hint about ``--metadata`` that every ``custom_dataset`` task logs as a warning
    (our docs always come through ``custom_dataset``; the hint concerns CLI users of such tasks)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Custom kwargs can be passed to `--metadata`" not in record.getMessage()


@functools.lru_cache(maxsize=1)
def task_manager() -> Any:
    """One ``lm_eval.tasks.TaskManager`` per process (it indexes every lm-eval task YAML when built)."""
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval.api.task").addFilter(_CustomDatasetNotice())
    return TaskManager()


def _docs_provider(docs: Sequence[Mapping[str, Any]]):
    """lm-eval ``custom_dataset`` callable: our docs as the ``test`` split (called with task metadata)."""
    rows = [dict(d) for d in docs]

    def custom_dataset(**_metadata: Any) -> Any:
        import datasets

        return datasets.DatasetDict({SPLIT: datasets.Dataset.from_list(rows)})

    return custom_dataset


def task_spec(
    name: str, docs: Sequence[Mapping[str, Any]], overrides: Mapping[str, Any] | None = None
) -> dict:
    """The ``TaskManager.load`` member entry for registered task ``name`` over ``docs``."""
    return {
        "task": name,
        "custom_dataset": _docs_provider(docs),
        "test_split": SPLIT,
        "validation_split": None,
        "training_split": None,
        "fewshot_split": None,
        **dict(overrides or {}),
    }


def load_tasks(
    docs_by_task: Mapping[str, Sequence[Mapping[str, Any]]],
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Registered lm-eval tasks whose test split is the given docs.

    Args:
        docs_by_task: ``{registered task name: docs}`` (each non-empty, in the order wanted).
        overrides: task config fields set on every task (e.g. ``{"num_fewshot": 0}``).

    Returns:
        ``{task name: lm_eval.api.task.ConfigurableTask}``; ``task.eval_docs[i]`` is the i-th doc.

    Raises:
        KeyError: a name lm-eval does not register (the message lists close names).
        ValueError: an empty doc list.
    """
    tm = task_manager()
    for name, docs in docs_by_task.items():
        if name not in tm.all_subtasks:
            close = [t for t in tm.all_subtasks if name.split("_")[0] in t][:8]
            raise KeyError(f"lm-eval {LM_EVAL_VERSION} has no task {name!r}; similar: {close}")
        if not docs:
            raise ValueError(f"no docs for lm-eval task {name!r}")
    if any(name.startswith("ifeval") for name in docs_by_task):
        ensure_punkt_tab()  # before lm-eval's IFEval utils import NLTK (which would download punkt_tab)
    members = [task_spec(name, docs, overrides) for name, docs in docs_by_task.items()]
    loaded = tm.load([{"group": GROUP, "task": members}])
    return {name: loaded["tasks"][name] for name in docs_by_task}


def _capture(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """Stands in for a chat template: returns the messages lm-eval would render (JSON)."""
    return json.dumps({"messages": messages, "add_generation_prompt": add_generation_prompt})


def chat_messages(
    task: Any, doc: Mapping[str, Any], num_fewshot: int | None = None
) -> list[dict[str, str]]:
    """The chat messages lm-eval sends a chat model for ``doc`` (multiturn few-shot, chat template applied).

    Returns:
        ``[{"role", "content"}, ...]``; when the task has a ``gen_prefix`` the last message is the
        assistant's unfinished turn (lm-eval then renders with ``add_generation_prompt=False``,
        ``continue_final_message=True``).
    """
    shots = task.config.num_fewshot if num_fewshot is None else num_fewshot
    ctx = task.fewshot_context(
        doc,
        int(shots or 0),
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        chat_template=_capture,
        gen_prefix=task.doc_to_prefix(doc),
    )
    out = json.loads(ctx)
    messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in out["messages"]]
    if out["add_generation_prompt"] == (messages[-1]["role"] == "assistant"):
        raise ValueError(
            f"{task.task_name}: unexpected chat layout from lm-eval (add_generation_prompt="
            f"{out['add_generation_prompt']} with a final {messages[-1]['role']} turn)"
        )
    return messages


def generation_limits(task: Any) -> tuple[list[str], int]:
    """``(until, max_gen_toks)`` of the task's ``generation_kwargs`` (lm-eval's HFLM default cap if unset)."""
    kwargs = dict(task.config.generation_kwargs or {})
    until = kwargs.get("until") or []
    until = [until] if isinstance(until, str) else [str(s) for s in until]
    return until, int(kwargs.get("max_gen_toks") or DEFAULT_MAX_GEN_TOKS)


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")
