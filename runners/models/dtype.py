"""The compute dtype of a pair: ``pair.dtype: auto`` picks bfloat16 where the hardware has fast bf16.

Why: on a CPU with AMX-BF16 or AVX512-BF16 a verify pass over ``L + 1`` tokens costs about one decode step in
bfloat16 (the weights are read once, the extra tokens ride on bf16 matrix units), but several steps in float32
(Table 4 measures both). Speculative decoding relies on that flat cost.

``resolve_dtype(pair_cfg)`` is the one place the choice is made; the loader loads with it and the run config
records it in ``model_identity`` (so it is part of the run id and of ``config.json``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runners.config import isa

DTYPES = ("float32", "bfloat16", "float16")
ALLOWED = ("auto", *DTYPES)
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags a run may use: the host's (first core of Linux ``/proc/cpuinfo``) under the
    ``DROPMATCH_ISA_CAP`` cap (:mod:`runners.config.isa`); empty when not readable."""
    return isa.capped(isa.host_flags(path), isa.isa_cap())


def cpu_has_fast_bf16(flags: set[str] | None = None) -> bool:
    """True when the CPU has AMX-BF16 or AVX512-BF16 (``/proc/cpuinfo`` flags ``amx_bf16`` / ``avx512_bf16``).

    Without ``/proc/cpuinfo`` (not Linux), falls back to oneDNN's own check
    (``torch.ops.mkldnn._is_mkldnn_bf16_supported``), which is true from AVX512-BW/VL/DQ on: slower than the
    flags above, so only used when the flags cannot be read.
    """
    flags = cpu_flags() if flags is None else flags
    if flags:
        return any(f in flags for f in CPU_BF16_FLAGS)
    if isa.isa_cap() != "native":
        return False
    try:
        import torch

        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # pragma: no cover - exotic builds
        return False


def _cuda_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def resolve_dtype(
    pair_cfg: Mapping[str, Any],
    *,
    cpu_bf16: Callable[[], bool] = cpu_has_fast_bf16,
    cuda_bf16: Callable[[], bool] = _cuda_bf16,
) -> str:
    """The dtype a pair is loaded and computed in.

    ``pair.dtype``: ``float32`` / ``bfloat16`` / ``float16`` are taken as given; ``auto`` picks
    ``bfloat16`` on a CUDA device that supports it (``torch.cuda.is_bf16_supported()``) and on a CPU with
    AMX-BF16 or AVX512-BF16, ``float32`` elsewhere. A missing ``dtype`` key means ``float32`` (configs in
    ``conf/pair/`` always set it). An already resolved config (``pair.dtype_resolved``) is returned as is.

    Args:
        pair_cfg: the ``pair`` config (keys ``dtype``, ``device``: ``cpu``, ``cuda``, ``cuda:N``).
        cpu_bf16 / cuda_bf16: hardware probes (tests replace them).

    Returns:
        ``"float32"``, ``"bfloat16"`` or ``"float16"``.

    Raises:
        ValueError: ``pair.dtype`` (or ``pair.dtype_resolved``) is not one of the allowed values (the message
            names the field and lists them).
    """
    done = pair_cfg.get("dtype_resolved")
    if done is not None:
        if done not in DTYPES:
            raise ValueError(
                f"pair.dtype_resolved={done!r} is invalid; allowed: {', '.join(DTYPES)}"
            )
        return str(done)
    dtype = pair_cfg.get("dtype", "float32")
    if dtype not in ALLOWED:
        raise ValueError(f"pair.dtype={dtype!r} is invalid; allowed: {', '.join(ALLOWED)}")
    if dtype != "auto":
        return str(dtype)
    device = str(pair_cfg.get("device", "cpu"))
    if device.startswith("cuda"):
        return "bfloat16" if cuda_bf16() else "float32"
    if device == "cpu":
        return "bfloat16" if cpu_bf16() else "float32"
    return "float32"
