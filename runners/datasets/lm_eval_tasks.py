"""Read prompt templates, few-shot examples, filters and metrics from lm-evaluation-harness task YAMLs.

The installed ``lm_eval`` package is the single source of the GSM8K / MMLU / IFEval task definitions:
nothing here copies its few-shot examples or regexes. Paths are relative to ``lm_eval/tasks/``
(e.g. ``"gsm8k/gsm8k-cot-llama.yaml"``). ``lm_eval`` is imported lazily, only when a prompt or a
scorer needs it, so ``import runners.datasets`` stays fast.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any


def lm_eval_tasks_dir() -> Path:
    """``lm_eval/tasks`` of the installed lm-evaluation-harness (found without importing it)."""
    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("lm-eval is not installed; `pip install lm-eval==0.4.13` (see the README)")
    return Path(list(spec.submodule_search_locations)[0]) / "tasks"


@functools.lru_cache(maxsize=None)
def task_config(relpath: str) -> dict[str, Any]:
    """The task YAML at ``lm_eval/tasks/<relpath>`` with its ``include:`` chain merged.

    ``!function`` tags are left as path strings (not imported). Callers must not mutate the result.
    """
    from lm_eval.tasks._yaml_loader import load_yaml

    return load_yaml(lm_eval_tasks_dir() / relpath, resolve_func=False)


@functools.lru_cache(maxsize=256)
def _compiled(template: str) -> Any:
    from lm_eval.utils import env  # the Jinja environment behind lm_eval.utils.apply_template

    return env.from_string(template)


def render(template: str, doc: dict[str, Any]) -> str:
    """Render a Jinja ``doc_to_text`` / ``doc_to_target`` template as ``lm_eval.utils.apply_template``
    does (same environment), compiling each template once."""
    return _compiled(template).render(**doc)


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")
