"""GPU readiness: the loop makes every tensor and generator on the model's device.

On a CPU machine a tensor made without a device lands on the CPU by default and nothing fails, so these tests
look at how tensors are made, not where they end up: every factory call (``torch.zeros``, ``torch.tensor``,
``torch.rand``, ...) made by the project's own code (``runners/``, ``criteria/``) during a decode must name a
device equal to the model's; every ``torch.Generator`` the backend makes must be on the model's device.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import criteria.rules  # noqa: F401
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.backends import hf_loop
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.datasets.base import Sample
from runners.paths import REPO_ROOT
from tests.helpers.tiny import load_tiny_pair

FACTORIES = {
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.arange,
    torch.linspace,
    torch.eye,
    torch.tensor,
    torch.as_tensor,
    torch.scalar_tensor,
}
OURS = tuple(str(REPO_ROOT / d) for d in ("runners", "criteria"))


class FactoryCalls(TorchFunctionMode):
    """Records ``(file:line, factory, device kwarg)`` of every factory call made from our own source files."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str, object]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FACTORIES:
            frame = sys._getframe(1)
            while frame is not None and "/torch/" in frame.f_code.co_filename:
                frame = frame.f_back
            if frame is not None and frame.f_code.co_filename.startswith(OURS):
                where = f"{Path(frame.f_code.co_filename).relative_to(REPO_ROOT)}:{frame.f_lineno}"
                self.calls.append((where, func.__name__, kwargs.get("device")))
        return func(*args, **kwargs)


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


SAMPLES = [
    Sample(f"dev/{i}", [{"role": "user", "content": p}])
    for i, p in enumerate(["def add(a, b):", "Janet has 3 apples.", "A B C D"])
]
CASES = [
    (0, "autoregressive", HeadSpec(), 0.0),
    (4, "greedy_match", HeadSpec(), 0.0),
    (4, "dropmatch_js", HeadSpec(5, 0.3), 0.0),
    (4, "dropmatch_naive", HeadSpec(5, 0.3), 1.0),
    (4, "rejection", HeadSpec(), 1.0),
    (0, "dropout_path", HeadSpec(1, 0.3), 1.0),
]


@pytest.mark.parametrize("L,crit,heads,T", CASES, ids=[f"{c[1]}-T{c[3]}" for c in CASES])
def test_every_factory_call_names_the_models_device(pair, L, crit, heads, T):
    """B = 2 over three samples (rows join, leave, refill, compact); traces on."""
    mode = FactoryCalls()
    dec = DecodingConfig(
        num_speculative_tokens=L, max_new_tokens=24, temperature=T, trace=True, stop=["xyz"]
    )
    with mode:
        out = list(
            HFLoopBackend(pair, batch_size=2).generate(SAMPLES, dec, CRITERIA.get(crit)(), heads)
        )
    assert len(out) == 3
    assert len(mode.calls) > 10, "the mode saw no factory calls: the check would pass vacuously"
    device = pair.target.get_output_embeddings().weight.device
    bad = [c for c in mode.calls if c[2] is None or torch.device(c[2]) != device]
    assert not bad, f"factory calls without the model's device ({device}): {sorted(set(bad))}"


def test_every_generator_is_on_the_models_device(pair, monkeypatch):
    made: list[tuple[torch.Generator, object]] = []
    real = hf_loop.make_generator

    def spy(seed, device="cpu"):
        g = real(seed, device)
        made.append((g, device))
        return g

    monkeypatch.setattr(hf_loop, "make_generator", spy)
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=16, temperature=1.0)
    list(
        HFLoopBackend(pair, batch_size=2).generate(
            SAMPLES, dec, CRITERIA.get("dropmatch_js")(), HeadSpec(5, 0.3)
        )
    )
    device = pair.target.get_output_embeddings().weight.device
    assert len(made) == len(SAMPLES)
    assert all(g.device == device and torch.device(d) == device for g, d in made)


def test_the_checker_catches_a_missing_device(pair):
    """The mode is not vacuous: a factory call without a device in our code is reported."""
    mode = FactoryCalls()
    with mode:
        exec(
            compile(
                "import torch\ntorch.zeros(3)\n", str(REPO_ROOT / "runners" / "probe.py"), "exec"
            ),
            {},
        )
    assert mode.calls == [("runners/probe.py:2", "zeros", None)]
