"""Fixtures for scorer tests: the real benchmark files of ``shared/data`` and config-built datasets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from runners.paths import REPO_ROOT

DATA_FILES = {
    "gsm8k": "gsm8k/test.jsonl",
    "mmlu": "mmlu/mmlu.jsonl",
    "ifeval": "ifeval/input_data.jsonl",
    "humaneval": "humaneval/HumanEval.jsonl.gz",
}


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``shared/data`` beside the repository (override: DROPMATCH_TEST_DATA)."""
    path = Path(os.environ.get("DROPMATCH_TEST_DATA") or REPO_ROOT.parent / "shared" / "data")
    if not (path / "gsm8k" / "test.jsonl").is_file():
        pytest.skip(f"benchmark test data not found at {path} (set DROPMATCH_TEST_DATA)")
    return path


def dataset_cfg(name: str) -> dict[str, Any]:
    with open(REPO_ROOT / "conf" / "dataset" / f"{name}.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="session")
def data_files(shared_data: Path) -> dict[str, Path]:
    """``{dataset key: its file under shared/data}``."""
    return {name: shared_data / rel for name, rel in DATA_FILES.items()}


@pytest.fixture(scope="session")
def dataset_config() -> Callable[[str], dict[str, Any]]:
    """``dataset_config(name)``: a fresh dict of ``conf/dataset/<name>.yaml``."""
    return dataset_cfg


@pytest.fixture(scope="session")
def make_dataset(shared_data: Path) -> Callable[..., Any]:
    """``make_dataset(name, **overrides)``: the dataset of ``conf/dataset/<name>.yaml`` reading ``shared/data``."""
    import runners.datasets  # noqa: F401  (registration)
    from runners.registry import DATASETS, build

    def make(name: str, **overrides: Any) -> Any:
        cfg = dataset_cfg(name)
        cfg["source"] = {**cfg["source"], "local_path": str(shared_data / DATA_FILES[name])}
        cfg.update(overrides)
        return build(DATASETS, cfg)

    return make


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
