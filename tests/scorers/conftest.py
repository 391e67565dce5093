"""Fixtures for scorer tests: lm-eval's own evaluator over fixed outputs (shared data fixtures: tests/conftest.py)."""

from __future__ import annotations

from typing import Any, Callable

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
                return [answers[r.args[0]] for r in requests]  # KeyError: lm-eval built another prompt

            def apply_chat_template(self, chat_history, add_generation_prompt=True):
                return json.dumps(chat_history)

            @property
            def tokenizer_name(self) -> str:
                return "fixed"

            def chat_template(self, chat_template=False):
                return "fixed"

        return FixedLM()


@pytest.fixture(scope="session")
def lm_eval_evaluate(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., dict[str, Any]]:
    """``lm_eval_evaluate(configs, samples, outputs, doc_ids)``: lm-eval's own ``evaluator.evaluate``.

    Args:
        configs: ``{task_name: lm-eval task config dict}`` (dataset fields already pointing at local files).
        samples, outputs: our samples and the fixed model outputs for them.
        doc_ids: ``{task_name: [doc indices]}`` selecting the same items in lm-eval's test split.

    Returns:
        lm-eval's ``results`` dict (``{task_name: {"exact_match,strict-match": ..., ...}}``).
    """
    import json

    def run(configs: dict[str, dict[str, Any]], samples: list[Any], outputs: list[str],
            doc_ids: dict[str, list[int]], fewshot_as_multiturn: bool = True) -> dict[str, Any]:
        from lm_eval import evaluator
        from lm_eval.api.task import ConfigurableTask

        tasks = {}
        for name, cfg in configs.items():
            cfg = dict(cfg)
            kwargs = dict(cfg.get("dataset_kwargs") or {})
            kwargs["cache_dir"] = str(tmp_path_factory.mktemp("hf_datasets"))
            cfg["dataset_kwargs"] = kwargs
            task = ConfigurableTask(config=cfg)
            task.set_fewshot_seed(seed=1234)
            tasks[name] = task
        answers = {json.dumps(s.messages): o for s, o in zip(samples, outputs)}
        out = evaluator.evaluate(_FixedLM.make(answers), {"tasks": tasks, "groups": {}, "group_map": {}},
                                 samples=doc_ids, apply_chat_template=True,
                                 fewshot_as_multiturn=fewshot_as_multiturn, bootstrap_iters=10, log_samples=False)
        return out["results"]

    return run
