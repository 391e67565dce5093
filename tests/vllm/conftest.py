"""Fixtures for the vLLM backend tests: a tiny random Qwen2 pair and one shared engine (L = 3).

Run with the vLLM venv: ``.venv-vllm/bin/python -m pytest tests/vllm -q -m vllm``.

Engine order. Every ``vllm.LLM`` built in a process unregisters the previous engines' collectors from
prometheus_client's global registry (``vllm.v1.metrics.prometheus.unregister_vllm_metrics``), so
``llm.get_metrics()`` then reads the newest engine's counters whatever engine it is called on. Engines are
never torn down mid-session (that destroys vLLM's process-wide parallel groups), so
:func:`pytest_collection_modifyitems` runs the tests on the shared ``llm`` engine (the only ones that read
``get_metrics()``: the metrics-API test and ``VLLMBackend``'s counter cross-check) before any test that builds
another engine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tests.helpers.vllm import L  # noqa: E402

OTHER_ENGINE_FIXTURES = {"ar_llm", "ar_ids", "eagle3_llm", "eagle3_aux_llm"}


def _builds_other_engine(item) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    return bool(names & OTHER_ENGINE_FIXTURES) or item.get_closest_marker("own_engine") is not None


def pytest_collection_modifyitems(config, items):
    """Shared-engine tests first, then the ones that build their own engine (stable within each group)."""
    items[:] = [i for i in items if not _builds_other_engine(i)] + [
        i for i in items if _builds_other_engine(i)
    ]


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory):
    """``runners.models.tiny`` pair sized for vLLM's CPU attention (head_dim 32); partial acceptance."""
    pytest.importorskip("vllm.entrypoints.llm")
    from runners.models.tiny import build_tiny_pair

    return build_tiny_pair(tmp_path_factory.mktemp("tiny_pair"), hidden_size=128, noise=0.3)


@pytest.fixture(scope="session")
def llm(tiny_pair):
    """One engine for the tiny pair with the hook extension; tests install / uninstall rules on it."""
    pytest.importorskip("vllm.entrypoints.llm")
    import vllm

    target, draft = tiny_pair
    engine = vllm.LLM(
        model=str(target),
        enforce_eager=True,
        dtype="float32",
        max_model_len=512,
        seed=0,
        disable_log_stats=False,
        per_request_spec_decode_metrics="detailed",
        worker_extension_cls="runners.backends.vllm_dropmatch_hook.DropMatchWorkerExtension",
        speculative_config={
            "method": "draft_model",
            "model": str(draft),
            "num_speculative_tokens": L,
        },
    )
    return engine  # never torn down mid-session (vLLM's parallel groups are process-wide)


@pytest.fixture(scope="session")
def hf_pair(tiny_pair):
    """The tiny pair loaded with transformers (float32), shaped as the HF backend's ``LoadedPair``."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target, draft = tiny_pair
    load = lambda p: AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval()  # noqa: E731
    return SimpleNamespace(
        tokenizer=AutoTokenizer.from_pretrained(target),
        target=load(target),
        draft=load(draft),
        target_dir=str(target),
        draft_dir=str(draft),
    )


@pytest.fixture
def backends(hf_pair, llm):
    """``(hf, vllm)`` backends on the tiny pair; the vLLM one reuses the session engine (L = 3, greedy drafts)."""
    from runners.backends.hf_loop import HFLoopBackend
    from runners.backends.vllm_engine import VLLMBackend

    vb = VLLMBackend(hf_pair, max_model_len=512)
    vb._llm, vb._llm_key = llm, (L, False)
    return HFLoopBackend(hf_pair, prefix_caching=False), vb
