"""Check a resolved run config before any model or data loads.

Every error names the field and the allowed values, e.g.
``L=-1 is invalid; allowed: an integer >= 1 (0 only with method=ar)``.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Mapping


class ConfigError(ValueError):
    """A run config field has a value outside its allowed set."""


def _gpu_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        return False


# Backends whose engine is an optional package (imported only when generating): checked up front.
BACKEND_PACKAGES = {"vllm": "vllm"}
LOGGERS = {"none": (), "wandb": ("online", "offline", "disabled")}


def _installed(package: str) -> bool:
    """True if ``package`` is importable as a real package (a bare directory of that name does not count)."""
    spec = importlib.util.find_spec(package)
    return spec is not None and spec.origin is not None


def _validate_logger(logger: Mapping[str, Any]) -> None:
    name = logger.get("name", "none")
    if name not in LOGGERS:
        raise ConfigError(f"logger={name!r} is unknown; allowed: {', '.join(LOGGERS)}")
    modes = LOGGERS[name]
    if modes and logger.get("mode", modes[0]) not in modes:
        raise ConfigError(f"logger.mode={logger.get('mode')!r} is invalid; allowed: {', '.join(modes)}")
    if name == "wandb" and logger.get("mode") != "disabled" and not _installed("wandb"):
        raise ConfigError("logger=wandb needs the 'wandb' package (pip install wandb); allowed here: logger=none")


def validate(cfg: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for the first invalid field.

    Checks: L, dropmatch.p_drop, dropmatch.K, decoding.temperature, method/criterion, backend and
    dataset names against their registries, that an optional backend package is installed, the logger
    and its mode, and that a GPU-only pair/profile/backend has a GPU.
    """
    import criteria.rules  # noqa: F401  (fills CRITERIA)
    import runners.backends  # noqa: F401
    import runners.datasets  # noqa: F401
    from runners.registry import BACKENDS, CRITERIA, DATASETS

    method = cfg["method"]
    L = cfg.get("L")
    if method.get("autoregressive"):
        if L != 0:
            raise ConfigError(f"L={L} with method={method['name']}; autoregressive methods have no drafts (L is set to 0)")
    elif not isinstance(L, int) or isinstance(L, bool) or L < 1:
        raise ConfigError(f"L={L!r} is invalid; allowed: an integer >= 1 (draft tokens per round; "
                          f"method=ar for the autoregressive baseline)")
    dm = cfg.get("dropmatch") or {}
    p = dm.get("p_drop")
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= float(p) < 1.0:
        raise ConfigError(f"dropmatch.p_drop={p!r} is invalid; allowed: a number in [0, 1)")
    K = dm.get("K")
    if not isinstance(K, int) or isinstance(K, bool) or K < 1:
        raise ConfigError(f"dropmatch.K={K!r} is invalid; allowed: an integer >= 1 (MC-dropout heads)")
    top_n = dm.get("sparse_top_n")
    if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
        raise ConfigError(f"dropmatch.sparse_top_n={top_n!r} is invalid; allowed: null (exact) or an integer >= 1")
    T = cfg["decoding"].get("temperature")
    if not isinstance(T, (int, float)) or T < 0:
        raise ConfigError(f"decoding.temperature={T!r} is invalid; allowed: a number >= 0 (0 = greedy)")
    if method.get("criterion") is not None and method["criterion"] not in CRITERIA:
        raise ConfigError(f"method.criterion={method['criterion']!r} is unknown; allowed: {', '.join(CRITERIA.names())}")
    if cfg["backend"]["name"] not in BACKENDS:
        raise ConfigError(f"backend={cfg['backend']['name']!r} is unknown; allowed: {', '.join(BACKENDS.names())}")
    if cfg["dataset"]["name"] not in DATASETS:
        raise ConfigError(f"dataset={cfg['dataset']['name']!r} is unknown; allowed: {', '.join(DATASETS.names())}")
    needs_gpu = [f"{k}={cfg[k]['name']}" for k in ("pair", "profile", "backend") if (cfg.get(k) or {}).get("requires_gpu")]
    if needs_gpu and not _gpu_available():
        raise ConfigError(
            f"{', '.join(needs_gpu)} needs a CUDA GPU and none is visible; allowed here: profile=default with "
            f"pair=qwen25coder_0.5b_1.5b (the embedded CPU pair)"
        )
    package = BACKEND_PACKAGES.get(cfg["backend"]["name"])
    if package and not _installed(package):
        raise ConfigError(
            f"backend={cfg['backend']['name']} needs the {package!r} package, which this interpreter "
            f"({sys.executable}) lacks; allowed here: backend=hf, or run with the venv from "
            f"runners/backends/install_vllm.sh (.venv-vllm/bin/python -m runners.main ...)"
        )
    _validate_logger(cfg.get("logger") or {})
    from runners.models.dtype import resolve_dtype

    try:
        resolve_dtype(cfg.get("pair") or {})
    except ValueError as e:
        raise ConfigError(str(e)) from None
