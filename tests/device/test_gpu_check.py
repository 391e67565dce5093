"""The prepared device check (tests/device/gpu_check.py): on a CUDA GPU, and its logic on the CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("gpu_check.py")


def _check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch sees none on this machine)"
)
def test_gpu_check_on_cuda(capsys):
    assert _check().main(["--device", "cuda"]) == 0, capsys.readouterr().out


@pytest.mark.slow
def test_gpu_check_logic_on_cpu(capsys):
    rc = _check().main(["--device", "cpu", "--max-new", "24"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert out.count("[PASS]") >= 10 and "[FAIL]" not in out


def test_missing_cuda_is_exit_2(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _check().main(["--device", "cuda"]) == 2
