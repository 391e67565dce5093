"""Fixtures for the judging tests: the judge=api environment pointed at a localhost endpoint (the results root
is the ``results`` fixture of tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def api_env(monkeypatch):
    """``api_env(url, model)``: point judge=api at ``url`` (no other judge variables leak in)."""
    for v in (
        "DROPMATCH_JUDGE_BASE_URL",
        "DROPMATCH_JUDGE_MODEL",
        "DROPMATCH_JUDGE_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_MODEL",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(v, raising=False)

    def set_env(url: str, model: str = "judge-model", key: str = "sk-test") -> None:
        monkeypatch.setenv("DROPMATCH_JUDGE_BASE_URL", url)
        monkeypatch.setenv("DROPMATCH_JUDGE_MODEL", model)
        monkeypatch.setenv("DROPMATCH_JUDGE_API_KEY", key)

    return set_env
