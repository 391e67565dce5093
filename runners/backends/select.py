"""``backend: auto``: the engine that finishes a run fastest on this machine, decided before anything loads.

The default profile asks for ``auto`` (``conf/profile/default.yaml``); ``backend=hf`` or ``backend=llamacpp`` on
the command line picks one. The rule, from measurements on the embedded pair (README "Engines"):

- where the CPU has native bf16 (AMX-BF16 or AVX512-BF16), the transformers loop in bfloat16 (``hf``, with
  ``pair.dtype: auto`` -> bfloat16): a verify pass over L+1 tokens costs about one decode step there;
- elsewhere (AVX2-only x86, ARM), the transformers loop falls back to float32, which streams every weight as
  4 bytes per decode step; llama.cpp runs the shipped GGUF at its own precision (the Q4_K_M target: ~0.6 bytes
  per weight), several times faster per token. There ``auto`` is ``llamacpp`` when it can run the run:
  ``llama-cpp-python`` is installed, both models have a GGUF (a pinned GGUF source or a local directory with one
  ``*.gguf``), the pair runs on the CPU in ``pair.dtype: auto`` (an explicit dtype asks for transformers in that
  dtype) and the run's decoding modes are llama.cpp's (:data:`runners.backends.modes.LLAMACPP_MODES`: not
  Auto-Judge). Measurement runs (Table 4, Fig. 3, bench) time the transformers loop itself: ``hf``.

The resolved backend is the chosen ``conf/backend/<name>.yaml`` with the settings given to ``auto`` (e.g. an
artefact's ``backend.batch_size``) applied, so ``auto`` resolved to ``hf`` is exactly ``backend=hf``: same config,
same run id. The choice and its reason are logged once per process.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from runners.backends.modes import LLAMACPP_MODES, modes_of
from runners.models import dtype
from runners.models.sources import ModelUnavailableError, pick_source
from runners.paths import REPO_ROOT

logger = logging.getLogger(__name__)

AUTO = "auto"
_SAID: set[tuple[str, str]] = set()


def llama_cpp_installed() -> bool:
    """True when ``llama_cpp`` is importable (checked without importing it)."""
    return importlib.util.find_spec("llama_cpp") is not None


def has_gguf(spec: Mapping[str, Any]) -> bool:
    """Whether a model spec's source provides a GGUF file, decided without preparing anything."""
    try:
        source, where = pick_source(spec)
    except ModelUnavailableError:
        return False
    if source == "pinned":
        return str((spec.get("pinned") or {}).get("kind")) == "pip_chunk_gguf"
    if source == "local":
        return len(list(Path(str(where)).glob("*.gguf"))) == 1
    return False


def choose(cfg: Mapping[str, Any]) -> tuple[str, str]:
    """``(backend name, reason)`` for ``backend: auto`` on this machine (module docstring)."""
    method = cfg.get("method") or {}
    pair = cfg.get("pair") or {}
    if method.get("measure"):
        return "hf", "a measurement run times the transformers loop"
    if str(pair.get("device", "cpu")) != "cpu":
        return "hf", f"pair.device={pair.get('device')}"
    if str(pair.get("dtype", "auto")) != "auto":
        return "hf", f"pair.dtype={pair.get('dtype')} asks for transformers in that dtype"
    if dtype.cpu_has_fast_bf16():
        return "hf", "the CPU has native bf16 (AMX-BF16 / AVX512-BF16): transformers in bfloat16"
    isa = (
        "/".join(f for f in ("avx512f", "avx2", "fma", "asimd") if f in dtype.cpu_flags())
        or "unknown ISA"
    )
    why = f"the CPU has no native bf16 ({isa}), so transformers would run in float32"
    if not llama_cpp_installed():
        return (
            "hf",
            f"{why}, but llama-cpp-python is not installed (./reproduce.sh setup builds it)",
        )
    L = cfg.get(
        "L"
    )  # validated after the choice: any value other than 0 / None means a draft model runs
    roles = ["target"] + (
        ["draft"] if L not in (0, None) or method.get("ar_model") == "draft" else []
    )
    lacking = [r for r in roles if not has_gguf(pair.get(r) or {})]
    if lacking:
        return "hf", f"{why}, but pair.{lacking[0]} has no GGUF source for llama.cpp"
    missing = [m for m in modes_of(cfg) if m not in LLAMACPP_MODES]
    if missing:
        return "hf", f"{why}, but llama.cpp's loop has no {', '.join(missing)} mode"
    return "llamacpp", f"{why}; llama.cpp runs the GGUF at its own precision"


def backend_defaults(name: str) -> dict:
    """``conf/backend/<name>.yaml`` as a plain dict (a backend's settings before any override)."""
    path = REPO_ROOT / "conf" / "backend" / f"{name}.yaml"
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def _check_profile_decision(cfg: Mapping[str, Any], name: str) -> None:
    """The DropMatch decision a profile gives ``auto`` (``profile.dropmatch.auto``, read by ``conf/run.yaml``
    before ``auto`` is resolved) must be the one it gives the chosen backend, else ``auto`` resolved to ``name``
    would not be ``backend=<name>``.

    Raises:
        ValueError: the two entries differ (names both).
    """
    per_backend = (cfg.get("profile") or {}).get("dropmatch") or {}
    mine, theirs = per_backend.get(AUTO), per_backend.get(name)
    if (mine or {}) != (theirs or {}):
        raise ValueError(
            f"profile.dropmatch.auto={mine} differs from profile.dropmatch.{name}={theirs} (backend=auto chose "
            f"{name}); allowed: equal entries, or backend={name} on the command line"
        )


def resolve_backend(cfg: Mapping[str, Any], log=logger.info) -> dict:
    """The run's backend config with ``auto`` resolved (any other backend is returned unchanged).

    Raises:
        ValueError: the profile gives ``auto`` another DropMatch decision than the chosen backend.
    """
    backend = dict(cfg["backend"])
    if backend.get("name") != AUTO:
        return backend
    name, reason = choose(cfg)
    _check_profile_decision(cfg, name)
    chosen = backend_defaults(name)
    # a setting the chosen backend lacks is kept, so that validation refuses it by name like any backend's
    chosen.update({k: v for k, v in backend.items() if k not in ("name", "version")})
    if (name, reason) not in _SAID:
        _SAID.add((name, reason))
        log(f"[backend] auto -> {name}: {reason}")
    return chosen
