"""Fixtures for the runner tests: an environment for ``python -m runners.main`` subprocesses on the tiny pair."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runners.paths import REPO_ROOT


@pytest.fixture
def main_env(tiny_pair_dir, tmp_path) -> dict[str, str]:
    """Environment for ``runners.main`` subprocesses: tiny pair, fresh results dir, offline, 1 thread."""
    env = dict(os.environ)
    env.update(
        {
            "DROPMATCH_TINY_PAIR": str(tiny_pair_dir),
            "DROPMATCH_RESULTS": str(tmp_path / "results"),
            "DROPMATCH_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
            "HYDRA_FULL_ERROR": "1",
        }
    )
    env.pop("WANDB_MODE", None)
    return env


@pytest.fixture
def run_main(main_env):
    """``run_main(*overrides, multirun=True)``: ``python -m runners.main`` on the tiny pair, profile=smoke."""

    def run(
        *overrides: str, multirun: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess:
        cmd = [
            sys.executable,
            "-m",
            "runners.main",
            *(["-m"] if multirun else []),
            "pair=tiny",
            "profile=smoke",
            "progress=log",
            *overrides,
        ]
        return subprocess.run(
            cmd, cwd=REPO_ROOT, env=main_env, capture_output=True, text=True, timeout=timeout
        )

    return run


@pytest.fixture
def runs_root(main_env) -> Path:
    """``results/runs`` of the subprocesses' results directory."""
    return Path(main_env["DROPMATCH_RESULTS"]) / "runs"
