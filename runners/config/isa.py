"""The CPU instruction set a run uses: the host's own, or capped at AVX2 to stand in for an AVX2-only laptop.

Why: the default engine and dtype follow the CPU (native bf16: transformers in bfloat16; otherwise llama.cpp or
float32, :mod:`runners.backends.select`), and most laptops are AVX2-only. ``DROPMATCH_ISA_CAP=avx2`` sends an
AVX512 host down that path end to end: the flags every choice reads lose everything above AVX2
(:func:`capped`), torch dispatches its AVX2 kernels and oneDNN stops at AVX2 (:data:`TORCH_ENV`, which
``reproduce.sh`` exports), and ``reproduce.sh`` builds llama.cpp for AVX2 alone. It is a stand-in, not such a
machine: the cores, caches and memory stay the host's. Every run records what it used (:func:`isa_record`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping

CAP_ENV = "DROPMATCH_ISA_CAP"
CAPS = ("native", "avx2")
# flags of instructions beyond AVX2 + FMA that change a kernel's speed: AVX512 (incl. BF16 / VNNI), AMX, AVX-VNNI
ABOVE_AVX2 = re.compile(r"^(avx512|amx|avx_vnni|avx_ifma|avx_ne_convert|avx10)")
# set before torch is imported: ATen's dispatch level and oneDNN's ISA ceiling (both read once per process)
TORCH_ENV = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}}
# torch.backends.cpu.get_cpu_capability() values a cap admits
TORCH_LEVELS = {"avx2": ("AVX2", "DEFAULT")}
# the instruction sets named in a record (the ones that decide an engine's speed here)
NAMED = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_bf16",
    "avx_vnni",
    "asimd",
    "sve",
)
# llama.cpp system-info keys that are instruction sets (it also prints OPENMP, REPACK, ...)
LLAMA_ISA = (
    "SSE3",
    "SSSE3",
    "AVX",
    "AVX2",
    "F16C",
    "FMA",
    "BMI2",
    "AVX_VNNI",
    "AVX512",
    "AVX512_VBMI",
    "AVX512_VNNI",
    "AVX512_BF16",
    "AMX_INT8",
    "NEON",
    "ARM_FMA",
    "SVE",
)


def isa_cap(environ: Mapping[str, str] = os.environ) -> str:
    """``DROPMATCH_ISA_CAP`` (``native`` when unset or empty).

    Raises:
        ValueError: a value other than those in :data:`CAPS` (the message names the variable and lists them).
    """
    cap = environ.get(CAP_ENV) or "native"
    if cap not in CAPS:
        raise ValueError(f"{CAP_ENV}={cap!r} is invalid; allowed: {', '.join(CAPS)}")
    return cap


def host_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The host CPU's feature flags (first core of Linux ``/proc/cpuinfo``); empty when not readable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def capped(flags: Iterable[str], cap: str) -> set[str]:
    """``flags`` without those above ``cap`` (``native``: all of them)."""
    return set(flags) if cap == "native" else {f for f in flags if not ABOVE_AVX2.match(f)}


def check_torch(cap: str | None = None) -> None:
    """Under a cap, that torch dispatches no kernel above it (:data:`TORCH_LEVELS`); imports torch.

    Raises:
        RuntimeError: torch runs at a higher level (its environment was not set before torch was imported);
            the message names the variables ``reproduce.sh`` sets.
    """
    cap = isa_cap() if cap is None else cap
    if cap == "native":
        return
    import torch

    level = torch.backends.cpu.get_cpu_capability()
    if level not in TORCH_LEVELS[cap]:
        env = " ".join(f"{k}={v}" for k, v in TORCH_ENV[cap].items())
        raise RuntimeError(
            f"{CAP_ENV}={cap} but torch dispatches {level} kernels: set {env} before Python starts "
            "(./reproduce.sh does)"
        )


def llama_levels(system_info: str) -> list[str]:
    """The instruction sets a llama.cpp build uses, from ``llama_print_system_info()`` (``'AVX2 = 1 | ...'``)."""
    return [k.strip() for k, v in re.findall(r"([A-Z0-9_]+) = (\d)", system_info) if v == "1"]


def check_llama(system_info: str, cap: str | None = None) -> None:
    """Under a cap, that the llama.cpp build uses no instruction set above it.

    Raises:
        RuntimeError: the build uses AVX512 / AMX / AVX-VNNI (built natively on this host); the message says
            how to rebuild it for the cap.
    """
    cap = isa_cap() if cap is None else cap
    above = [lv for lv in llama_levels(system_info) if ABOVE_AVX2.match(lv.lower())]
    if cap != "native" and above:
        raise RuntimeError(
            f"{CAP_ENV}={cap} but llama.cpp was built with {', '.join(above)}: rebuild it for the cap with "
            f"`.venv/bin/pip uninstall -y llama-cpp-python && {CAP_ENV}={cap} ./reproduce.sh setup`"
        )


def isa_record(flags: set[str] | None = None, cap: str | None = None) -> str:
    """What a run computed with, for its record: the named flags in use, the cap and what it hid, and the levels
    of the engines loaded in this process (torch's dispatch level; llama.cpp's build), e.g.
    ``'avx2 fma (DROPMATCH_ISA_CAP=avx2; host also avx512f avx512_bf16); torch AVX2; llama.cpp AVX AVX2 FMA'``."""
    flags = host_flags() if flags is None else flags
    cap = isa_cap() if cap is None else cap
    used = capped(flags, cap)
    text = " ".join(f for f in NAMED if f in used) or "none of " + "/".join(NAMED)
    hidden = [f for f in NAMED if f in flags and f not in used]
    if cap != "native":
        text += f" ({CAP_ENV}={cap}" + (f"; host also {' '.join(hidden)})" if hidden else ")")
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "backends"):
        text += f"; torch {torch.backends.cpu.get_cpu_capability()}"
    llama = sys.modules.get("llama_cpp")
    if llama is not None and hasattr(llama, "llama_print_system_info"):
        info = llama.llama_print_system_info()
        levels = llama_levels(info.decode() if isinstance(info, bytes) else str(info))
        text += f"; llama.cpp {' '.join(lv for lv in levels if lv in LLAMA_ISA) or 'no SIMD'}"
    return text
