"""VLLMBackend reuses the process's engine across runs with the same models, L and settings (no vLLM needed)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.own_engine]  # may start building an engine


class FakeLLM:
    def __init__(self):
        self.resets = 0

    def reset_prefix_cache(self):
        self.resets += 1

    def get_tokenizer(self):
        return "tok"


def test_same_key_reuses_engine_and_resets_prefix_cache(monkeypatch):
    from runners.backends import vllm_engine
    from runners.backends.vllm_engine import VLLMBackend

    fake = FakeLLM()
    a = VLLMBackend({"target_dir": "/t", "draft_dir": "/d"}, batch_size=1)
    key = (
        a.target_dir,
        a.draft_dir,
        a.spec_method,
        (10, False),
        tuple(sorted(a.engine_kwargs.items())),
    )
    monkeypatch.setattr(vllm_engine, "_SHARED", {"key": key, "llm": fake})
    b = VLLMBackend(
        {"target_dir": "/t", "draft_dir": "/d"}, batch_size=4
    )  # batch size is not engine config
    assert b.engine(10, False) is fake and fake.resets == 1 and b.tokenizer == "tok"
    c = VLLMBackend({"target_dir": "/t", "draft_dir": "/d"}, spec_method="eagle3")
    # a different spec_method builds a new engine, which fails (/t is no model; vLLM's error type varies by
    # version): what matters is that the shared engine was released first
    with pytest.raises(Exception):  # noqa: B017
        c.engine(10, False)
    assert vllm_engine._SHARED == {}
