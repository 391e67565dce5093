"""Shared fixtures: a tiny random pair, an isolated results directory, the benchmark files of shared/data."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from runners.paths import REPO_ROOT

# Tiny models run far faster single-threaded (and OpenMP spinning on a busy 2-core box is ruinous);
# tests that load the real pair raise this themselves.
os.environ.setdefault("DROPMATCH_THREADS", "1")

@pytest.fixture(scope="session")
def tiny_pair_dir(tmp_path_factory):
    """Directory with ``target/`` and ``draft/``: tiny random Qwen2 models + a BPE tokenizer."""
    from runners.models.tiny import build_tiny_pair

    out = tmp_path_factory.mktemp("tiny_pair")
    build_tiny_pair(out)
    return out


@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """Point DROPMATCH_RESULTS at a fresh temp dir for the test."""
    d = tmp_path / "results"
    monkeypatch.setenv("DROPMATCH_RESULTS", str(d))
    return d


# Benchmark files of ``shared/data`` (beside the repository in CI) and config-built datasets.
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
