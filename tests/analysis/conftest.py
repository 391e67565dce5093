"""Fixtures for the analysis tests (helpers live in ``analysis_fixtures.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    """An empty results root (DROPMATCH_RESULTS) for records written by a test."""
    d = tmp_path / "results"
    d.mkdir()
    monkeypatch.setenv("DROPMATCH_RESULTS", str(d))
    return d
