""".gitignore keeps the virtual environments out of git whether they are directories or symlinks to one (a
worktree's ``.venv`` linking to a shared venv): a ``.venv/`` pattern matches only a directory, so a ``.venv``
symlink showed as untracked."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from runners.paths import REPO_ROOT


def test_venvs_are_ignored_as_symlinks_and_directories(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo, venv = tmp_path / "repo", tmp_path / "shared-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    repo.mkdir()
    shutil.copy(REPO_ROOT / ".gitignore", repo / ".gitignore")
    (repo / ".venv").symlink_to(venv)  # a worktree's venv: a symlink
    (repo / ".venv-vllm").symlink_to(venv)
    (repo / ".venv-cuda" / "bin").mkdir(parents=True)  # a venv directory
    (repo / ".venv-cuda" / "bin" / "python").write_text("")
    (repo / "kept.py").write_text("")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    p = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    assert sorted(p.stdout.split()) == [".gitignore", "kept.py"]
