"""Fixtures for scorer tests: lm-eval's own evaluator over fixed outputs (shared data fixtures: tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


class _FixedLM:
    """Factory of an lm-eval ``LM`` that answers each chat prompt with a fixed output.

    Its chat template renders the messages as JSON, so a prompt lm-eval builds is found in
    ``answers`` only if it equals our ``Sample.messages`` exactly.
    """

    @staticmethod
    def make(answers: dict[str, str]) -> Any:
        import json

        from lm_eval.api.model import LM

        class FixedLM(LM):
            def loglikelihood(self, requests):
                raise NotImplementedError

            def loglikelihood_rolling(self, requests):
                raise NotImplementedError

            def generate_until(self, requests):
                return [
                    answers[r.args[0]] for r in requests
                ]  # KeyError: lm-eval built another prompt

            def apply_chat_template(self, chat_history, add_generation_prompt=True):
                return json.dumps(chat_history)

            @property
            def tokenizer_name(self) -> str:
                return "fixed"

            def chat_template(self, chat_template=False):
                return "fixed"

        return FixedLM()


def _lm_eval_user_task(
    name: str, docs: list[dict[str, Any]], data_dir: Any, **overrides: Any
) -> Any:
    """lm-eval's own task ``name`` loaded the way a user loads one: ``TaskManager`` + a local JSON file as
    its test split (lm-eval's documented ``dataset_path: json``), independent of our ``custom_dataset`` hook."""
    import json

    from lm_eval.tasks import TaskManager

    data = data_dir / f"{name}.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    spec = {
        "task": name,
        "dataset_path": "json",
        "dataset_name": None,
        "test_split": "test",
        "validation_split": None,
        "fewshot_split": None,
        "dataset_kwargs": {"data_files": {"test": str(data)}, "cache_dir": str(data_dir / "hf")},
        **overrides,
    }
    return TaskManager().load([{"group": "user", "task": [spec]}])["tasks"][name]


@pytest.fixture(scope="session")
def lm_eval_user_task() -> Callable[..., Any]:
    """``lm_eval_user_task(name, docs, data_dir, **overrides)``: see :func:`_lm_eval_user_task`."""
    return _lm_eval_user_task


@pytest.fixture(scope="session")
def lm_eval_evaluate() -> Callable[..., dict[str, Any]]:
    """``lm_eval_evaluate(tasks, samples, outputs)``: lm-eval's own ``evaluator.evaluate`` over fixed outputs.

    Args:
        tasks: ``{task_name: lm-eval task}`` (e.g. from the ``lm_eval_user_task`` fixture), docs in our samples' order.
        samples, outputs: our samples and the fixed model outputs for them.

    Returns:
        lm-eval's ``results`` dict (``{task_name: {"exact_match,strict-match": ..., ...}}``).
    """
    import json

    def run(tasks: dict[str, Any], samples: list[Any], outputs: list[str]) -> dict[str, Any]:
        from lm_eval import evaluator

        for task in tasks.values():
            task.set_fewshot_seed(seed=1234)
        answers = {json.dumps(s.messages): o for s, o in zip(samples, outputs)}
        out = evaluator.evaluate(
            _FixedLM.make(answers),
            {"tasks": tasks, "groups": {}, "group_map": {}},
            apply_chat_template=True,
            fewshot_as_multiturn=True,
            bootstrap_iters=10,
            log_samples=False,
        )
        return out["results"]

    return run
