"""Shared fixtures: a tiny random pair (built once per session) and an isolated results directory."""

from __future__ import annotations

import os

import pytest

# Tiny models run far faster single-threaded (and OpenMP spinning on a busy 2-core box is ruinous);
# tests that load the real pair raise this themselves.
os.environ.setdefault("DROPMATCH_THREADS", "1")

SHARED_DATA = "/work/shared/data"


def shared_data(*parts: str) -> str:
    """Path into the repo's sibling ``shared/data`` (tests and CI only; users pass their own paths)."""
    here = os.path.dirname(os.path.abspath(__file__))
    for base in (os.path.join(here, "..", "..", "shared", "data"), SHARED_DATA):
        p = os.path.join(base, *parts)
        if os.path.exists(p):
            return os.path.abspath(p)
    pytest.skip(f"benchmark data {'/'.join(parts)} not found next to the repo (../shared/data)")


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
