"""Precision by hardware: ``pair.dtype: auto`` resolution, validation and the record."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from runners.config.errors import ConfigError
from runners.config.resolve import resolve_run_config
from runners.models.dtype import cpu_flags, cpu_has_fast_bf16, resolve_dtype
from runners.models.loader import load_pair
from runners.paths import REPO_ROOT

YES, NO = (lambda: True), (lambda: False)


@pytest.mark.parametrize(
    "device,cpu,cuda,want",
    [
        ("cpu", YES, NO, "bfloat16"),
        ("cpu", NO, YES, "float32"),
        ("cuda", NO, YES, "bfloat16"),
        ("cuda:1", YES, NO, "float32"),  # a GPU without bf16: float32, whatever the CPU has
        ("meta", YES, YES, "float32"),
    ],
)
def test_auto_picks_bf16_only_on_bf16_hardware(device, cpu, cuda, want):
    assert resolve_dtype({"dtype": "auto", "device": device}, cpu_bf16=cpu, cuda_bf16=cuda) == want


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_explicit_dtype_is_kept(dtype):
    assert resolve_dtype({"dtype": dtype, "device": "cpu"}, cpu_bf16=YES) == dtype
    assert resolve_dtype({"dtype": "auto", "dtype_resolved": dtype}, cpu_bf16=NO) == dtype


def test_missing_dtype_means_float32():
    assert resolve_dtype({"device": "cpu"}, cpu_bf16=YES) == "float32"


@pytest.mark.parametrize("bad", ["fp32", "bf16", "Auto", 32, None])
def test_bad_dtype_names_the_field(bad):
    with pytest.raises(
        ValueError, match=r"pair\.dtype=.*allowed: auto, float32, bfloat16, float16"
    ):
        resolve_dtype({"dtype": bad})


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 fma\n\nflags\t: fpu\n")
    flags = cpu_flags(str(f))
    assert flags == {"fpu", "sse", "avx512f", "avx512_bf16", "fma"}
    assert (
        cpu_has_fast_bf16(flags)
        and cpu_has_fast_bf16({"amx_bf16"})
        and not cpu_has_fast_bf16({"avx512f", "fma"})
    )


def test_this_machine_resolves_by_its_flags():
    flags = cpu_flags()
    if not flags:
        pytest.skip("no /proc/cpuinfo flags on this machine")
    want = "bfloat16" if ({"amx_bf16", "avx512_bf16"} & flags) else "float32"
    assert resolve_dtype({"dtype": "auto", "device": "cpu"}) == want


def _cfg(*overrides):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return compose(
            config_name="run", overrides=["profile=smoke", "method=sd", "L=3", *overrides]
        )


def test_run_config_records_the_resolved_dtype():
    """The resolved dtype is in config.json's model identity and in the run id (bf16 and fp32 never share an id)."""
    from runners.records.run_id import run_id_of

    auto = resolve_run_config(_cfg())
    want = resolve_dtype({"dtype": "auto", "device": "cpu"})
    assert auto["pair"]["dtype"] == "auto"
    assert {m["dtype"] for m in auto["model_identity"].values()} == {want}
    f32 = resolve_run_config(_cfg("pair.dtype=float32"))
    assert {m["dtype"] for m in f32["model_identity"].values()} == {"float32"}
    assert run_id_of(resolve_run_config(_cfg("pair.dtype=bfloat16"))) != run_id_of(f32)


def test_bad_dtype_is_a_config_error_before_loading():
    with pytest.raises(ConfigError, match=r"pair\.dtype='fp16'"):
        resolve_run_config(_cfg("pair.dtype=fp16"))


@pytest.mark.parametrize(
    "backend", ["hf"]
)  # (llamacpp is checked for its package first: not on every machine)
def test_float16_refused_on_a_cpu_before_loading(backend):
    """PyTorch emulates half precision on a CPU: refused naming the field, the backend and what a CPU allows."""
    with pytest.raises(
        ConfigError,
        match=rf"pair\.dtype=float16 is invalid with backend={backend} on pair\.device=cpu; allowed on a CPU: auto",
    ):
        resolve_run_config(_cfg("pair.dtype=float16", f"backend={backend}"))


@pytest.mark.parametrize(
    "device,match",
    [
        (
            "tpu",
            r"pair\.device='tpu' is invalid; allowed: cpu, cuda, cuda:N \(or another torch device type\)",
        ),
        ("cuda:x", r"pair\.device='cuda:x' is invalid; allowed: cpu, cuda, cuda:N"),
        ("cuda:01", r"pair\.device='cuda:01' is invalid; allowed: cpu, cuda, cuda:N"),
        (
            "cuda:7",
            r"pair\.device=cuda:7 is invalid here: torch sees \d+ CUDA device\(s\); allowed here: cpu",
        ),
    ],
)
def test_device_refused_before_loading(device, match):
    """A device torch cannot use is refused at validation (no record, no load), naming the allowed values."""
    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has eight CUDA devices")
    with pytest.raises(ConfigError, match=match):
        resolve_run_config(_cfg(f"pair.device={device}"))


def test_other_torch_devices_pass_the_spelling_check():
    """``mps`` / ``xpu`` are torch device types the loader moves models to: not refused here (their availability
    is the loader's), unlike a name torch cannot parse."""
    for device in ("cpu", "mps", "xpu"):
        resolve_run_config(_cfg(f"pair.device={device}"), identify_models=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_cuda_refused_where_torch_sees_none():
    with pytest.raises(
        ConfigError,
        match=r"pair\.device=cuda is invalid here: torch sees 0 CUDA device\(s\); allowed here: cpu$",
    ):
        resolve_run_config(_cfg("pair.device=cuda"))


def test_loader_loads_in_the_resolved_dtype(tiny_pair_dir):
    spec = lambda role: {"name": role, "local_path": str(tiny_pair_dir / role), "order": ["local"]}  # noqa: E731
    p = load_pair(
        {"name": "tiny", "dtype": "bfloat16", "target": spec("target"), "draft": spec("draft")}
    )
    assert p.dtype == "bfloat16" and p.target.get_output_embeddings().weight.dtype == torch.bfloat16
    assert p.draft.get_output_embeddings().weight.dtype == torch.bfloat16
