"""One formatter and one linter for the whole tree: ``ruff format --check`` and ``ruff check`` (configured in
``pyproject.toml``; ruff is pinned in the ``test`` extra) pass, so style never shows up in a review."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runners.paths import REPO_ROOT


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.subprocess
def test_the_tree_is_formatted():
    p = ruff("format", "--check", ".")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]


@pytest.mark.subprocess
def test_the_tree_passes_the_linter():
    p = ruff("check", ".")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
