"""``python -m runners.main`` in a subprocess on the tiny pair, and readers of the records it writes (the
environment: the ``main_env`` fixture of tests/conftest.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runners.paths import REPO_ROOT

# Overrides every such run uses: tiny pair, smoke caps, one log line per step instead of a bar (the dataset is
# conf/run.yaml's default, the bundled GSM8K, unless a test or an experiment names another).
BASE = ["pair=tiny", "profile=smoke", "progress=log"]


def main_cmd(*overrides: str, multirun: bool = False) -> list[str]:
    """``python -m runners.main [-m] BASE overrides`` with this interpreter; a BASE key the test sets to another
    value (``pair=qwen25coder...``) is left out, as the command line refuses one key given two values; the same
    value twice stays, so the config echo keeps BASE's order."""
    own = {o.partition("=")[0].lstrip("+~"): o for o in overrides}
    base = [b for b in BASE if own.get(b.partition("=")[0], b) == b]
    return [sys.executable, "-m", "runners.main", *(["-m"] if multirun else []), *base, *overrides]


def run_main(
    env: dict, *overrides: str, multirun: bool = False, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run :func:`main_cmd` in the repository with ``env``; stdout and stderr captured as text."""
    return subprocess.run(
        main_cmd(*overrides, multirun=multirun),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_build(env: dict, *overrides: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m runners.autojudge.build overrides`` in the repository with ``env`` (no tiny-pair defaults);
    stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "runners.autojudge.build", *overrides],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def raw_sample_ids(run_dir: Path) -> list[str]:
    """Sample ids of every complete line in ``samples.jsonl`` (duplicates kept: the file as written)."""
    path = Path(run_dir) / "samples.jsonl"
    if not path.exists():
        return []
    data = path.read_text()
    lines = data.split("\n")[:-1]  # the part after the last newline is a torn line (if any)
    return [json.loads(line)["sample_id"] for line in lines]


def run_dirs(results: Path) -> list[Path]:
    """The run directories under ``<results>/runs``, sorted."""
    return sorted(p for p in (Path(results) / "runs").glob("*/") if p.is_dir())
