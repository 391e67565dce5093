"""``DROPMATCH_ISA_CAP=avx2``: an AVX512 host takes an AVX2-only CPU's path (flags, dtype, engine, kernels, record)."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

import runners.backends.select as select
import runners.config.isa as isa
from analysis.footer import recorded_lines
from runners.config.errors import ConfigError
from runners.config.resolve import resolve_run_config
from runners.models.dtype import cpu_flags, cpu_has_fast_bf16, resolve_dtype
from runners.paths import REPO_ROOT, directory_env_errors

HOST = "processor\t: 0\nflags\t\t: fpu sse avx avx2 fma avx512f avx512bw avx512_bf16 avx512_vnni amx_bf16 avx_vnni\n"
AVX2_BUILD = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | OPENMP = 1 | REPACK = 1 |"
NATIVE_BUILD = AVX2_BUILD.replace("BMI2 = 1", "BMI2 = 1 | AVX512 = 1 | AVX512_BF16 = 1")


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A host with AVX512-BF16 and AMX (its ``/proc/cpuinfo`` written to a file every reader is pointed at)."""
    f = tmp_path / "cpuinfo"
    f.write_text(HOST)
    real = isa.host_flags
    monkeypatch.setattr(isa, "host_flags", lambda path=None: real(str(f)))
    return f


def test_the_cap_hides_every_flag_above_avx2(host, monkeypatch):
    monkeypatch.delenv(isa.CAP_ENV, raising=False)
    assert cpu_has_fast_bf16() and "amx_bf16" in cpu_flags()
    monkeypatch.setenv(isa.CAP_ENV, "avx2")
    assert cpu_flags() == {"fpu", "sse", "avx", "avx2", "fma"}
    assert not cpu_has_fast_bf16()
    # so pair.dtype auto is float32 there, as on an AVX2-only laptop
    assert resolve_dtype({"dtype": "auto", "device": "cpu"}) == "float32"


@pytest.mark.parametrize(
    "value,cap", [(None, "native"), ("", "native"), ("native", "native"), ("avx2", "avx2")]
)
def test_cap_values(monkeypatch, value, cap):
    if value is None:
        monkeypatch.delenv(isa.CAP_ENV, raising=False)
    else:
        monkeypatch.setenv(isa.CAP_ENV, value)
    assert isa.isa_cap() == cap


@pytest.mark.parametrize("bad", ["AVX2", "sse", "avx512"])
def test_a_bad_cap_is_named_before_anything_loads(monkeypatch, bad):
    monkeypatch.setenv(isa.CAP_ENV, bad)
    errors = directory_env_errors()
    assert errors == [f"DROPMATCH_ISA_CAP={bad!r} is invalid; allowed: native, avx2"]
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="run", overrides=["method=sd"])
    with pytest.raises(
        ConfigError, match="DROPMATCH_ISA_CAP='.*' is invalid; allowed: native, avx2"
    ):
        resolve_run_config(cfg, identify_models=False)


@pytest.mark.subprocess
def test_reproduce_refuses_a_bad_cap_before_setup():
    env = {**os.environ, isa.CAP_ENV: "avx1024", "DROPMATCH_VENV": "/nonexistent/venv"}
    p = subprocess.run(
        ["./reproduce.sh", "table6"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert "DROPMATCH_ISA_CAP=avx1024 is invalid; allowed: native, avx2" in p.stderr
    assert "[setup]" not in p.stderr  # nothing installed, nothing created


def test_the_engine_choice_follows_the_cap(host, monkeypatch):
    monkeypatch.setattr(select, "llama_cpp_installed", lambda: True)
    monkeypatch.setenv(isa.CAP_ENV, "avx2")
    name, why = select.choose(
        {"method": {}, "pair": {"device": "cpu", "dtype": "auto", "target": {}}, "L": 0}
    )
    assert "no native bf16 (avx2/fma)" in why
    monkeypatch.setenv(isa.CAP_ENV, "native")
    assert select.choose({"method": {}, "pair": {"device": "cpu", "dtype": "auto"}})[0] == "hf"


def test_a_build_above_the_cap_is_refused_with_the_rebuild_command():
    isa.check_llama(AVX2_BUILD, "avx2")
    isa.check_llama(NATIVE_BUILD, "native")
    with pytest.raises(
        RuntimeError,
        match=r"built with AVX512, AVX512_BF16: rebuild .*DROPMATCH_ISA_CAP=avx2 ./reproduce.sh setup",
    ):
        isa.check_llama(NATIVE_BUILD, "avx2")


def test_the_record_names_the_cap_and_what_it_hid():
    host = {"avx2", "fma", "avx512f", "avx512_bf16"}
    assert isa.isa_record(host, "native").startswith("avx2 fma avx512f avx512_bf16")
    capped = isa.isa_record(host, "avx2")
    assert capped.startswith("avx2 fma (DROPMATCH_ISA_CAP=avx2; host also avx512f avx512_bf16)")
    if "torch" in sys.modules:
        assert "; torch " in capped


def _torch_level(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = (
        "from runners.config.isa import check_torch, isa_record; check_torch(); "
        "import torch; print(torch.backends.cpu.get_cpu_capability()); print(isa_record())"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.subprocess
@pytest.mark.skipif(
    not any(isa.ABOVE_AVX2.match(f) for f in isa.host_flags()),
    reason="the host has nothing above AVX2 to cap",
)
def test_torch_runs_avx2_kernels_under_the_cap_and_refuses_without_its_environment():
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
    }
    ok = _torch_level({**base, isa.CAP_ENV: "avx2", **isa.TORCH_ENV["avx2"]})
    assert ok.returncode == 0, ok.stderr
    level, record = ok.stdout.split("\n")[:2]
    assert (
        level == "AVX2" and record.endswith("; torch AVX2") and "DROPMATCH_ISA_CAP=avx2" in record
    )
    bad = _torch_level({**base, isa.CAP_ENV: "avx2"})
    assert bad.returncode != 0
    assert "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2" in bad.stderr


def test_footers_count_the_instruction_sets_the_runs_recorded():
    runs = pd.DataFrame({"cpu_isa": ["avx2 fma; torch AVX2", "avx2 fma; torch AVX2", None]})
    assert recorded_lines(runs, "cpu_isa", "instruction set") == [
        "instruction set: avx2 fma; torch AVX2 (2 runs); not recorded in 1 run"
    ]
    assert recorded_lines(pd.DataFrame({"cpu_isa": [None]}), "cpu_isa", "instruction set") == []
    assert recorded_lines(pd.DataFrame({"x": [1]}), "cpu_isa", "instruction set") == []
