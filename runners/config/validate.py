"""Check a resolved run config before any model or data loads.

Every error names the field and the allowed values, e.g.
``L=-1 is invalid; allowed: an integer >= 1 (0 only with method=ar)``.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import Any

import torch
import yaml

import criteria.rules  # noqa: F401  (fills CRITERIA)
import runners.backends  # noqa: F401
import runners.datasets  # noqa: F401
import runners.scorers  # noqa: F401  (fills SCORERS)
from runners.backends.modes import BACKEND_MODES, modes_of, supported_modes
from runners.backends.select import backend_defaults
from runners.config.check_only import check_only
from runners.config.decode_spec import build_rule
from runners.config.errors import ConfigError
from runners.config.known_keys import unknown_key_message, unknown_keys
from runners.config.numeric_fields import MAX_L, MAX_L_REASON, FieldError, canonical
from runners.config.optional_deps import gpu_available, installed
from runners.config.overrides import rule_settings
from runners.datasets.base import FIXED_CHAT_KWARGS
from runners.datasets.sources import split_unservable
from runners.models.dtype import resolve_dtype
from runners.paths import REPO_ROOT, directory_env_errors
from runners.registry import BACKENDS, CRITERIA, DATASETS, SCORERS

# Backends whose engine is an optional package (imported only when generating): checked up front.
BACKEND_PACKAGES = {"vllm": "vllm", "llamacpp": "llama_cpp"}
# How to get a backend's package (the error when it is missing says so).
BACKEND_INSTALL = {
    "vllm": "run with the venv from runners/backends/install_vllm.sh (.venv-vllm/bin/python -m runners.main ...)",
    "llamacpp": "build llama-cpp-python into this venv: ./reproduce.sh setup (README 'Engines on a CPU')",
}
# Backends whose loop runs the exactness audit of the sparse variant (criteria.audit.audited_verify_round).
AUDIT_BACKENDS = ("hf", "llamacpp")
LOGGERS = {"none": (), "wandb": ("online", "offline", "disabled")}


def _validate_logger(logger: Mapping[str, Any]) -> None:
    name = logger.get("name", "none")
    if name not in LOGGERS:
        raise ConfigError(f"logger={name!r} is unknown; allowed: {', '.join(LOGGERS)}")
    modes = LOGGERS[name]
    if modes and logger.get("mode", modes[0]) not in modes:
        raise ConfigError(
            f"logger.mode={logger.get('mode')!r} is invalid; allowed: {', '.join(modes)}"
        )
    if name == "wandb" and logger.get("mode") != "disabled" and not installed("wandb"):
        raise ConfigError(
            "logger=wandb needs the 'wandb' package (pip install wandb); allowed here: logger=none"
        )


def _method_files() -> dict[str, dict]:
    """``{name: conf/method/<name>.yaml}`` (for the allowed values of ``method``)."""
    out = {}
    for path in sorted((REPO_ROOT / "conf" / "method").glob("*.yaml")):
        with open(path, encoding="utf-8") as f:
            out[path.stem] = yaml.safe_load(f) or {}
    return out


def _validate_modes(cfg: Mapping[str, Any]) -> None:
    """Refuse a method (or ``trace``) the backend cannot run (:mod:`runners.backends.modes`)."""

    backend = cfg["backend"]
    name = backend["name"]
    try:
        have = supported_modes(backend)
    except KeyError:
        raise ConfigError(
            f"backend={name!r} declares no supported modes (runners/backends/modes.py); "
            f"allowed: {', '.join(BACKEND_MODES)}"
        ) from None
    missing = [m for m in modes_of(cfg) if m not in have]
    if not missing:
        return
    where = f"backend={name}" + (
        " with backend.native_verify=true"
        if name == "vllm" and backend.get("native_verify")
        else ""
    )
    others = [
        b for b in BACKEND_MODES if b != name and set(missing) <= supported_modes({"name": b})
    ]
    alt = f"; or backend={', '.join(others)}" if others else ""
    if "nucleus" in missing:
        raise ConfigError(
            f"decoding.top_p={cfg['decoding'].get('top_p')} is not supported by {where} (the project's "
            f"rules do not apply nucleus sampling); allowed: 1.0"
        )
    if missing == ["trace"]:
        raise ConfigError(
            f"trace=true is not supported by {where} (no per-round criterion traces); "
            f"allowed: trace=false{alt}"
        )
    L = int(cfg.get("L") or 0) or 1
    ok = [
        m
        for m, spec in _method_files().items()
        if not spec.get("measure")
        and set(
            modes_of(
                {**cfg, "method": spec, "L": 0 if spec.get("autoregressive") else L, "trace": False}
            )
        )
        <= have
    ]
    raise ConfigError(
        f"method={cfg['method'].get('name')} is not supported by {where} (it has no "
        f"{'/'.join(missing)} decoding; it would record a different computation under this "
        f"method); allowed with {where}: method={', '.join(ok)}{alt}"
    )


def _validate_rule(cfg: Mapping[str, Any]) -> None:
    """Build the rule from its settings (``method.kwargs``) and let it check the run's L and temperature
    (``check_round``), so a knob out of range or a setting the rule does not define fails here, before loading.
    Auto-Judge rules are built later (their judge artefact is attached after validation)."""
    name = cfg["method"]["criterion"]
    try:
        rule = build_rule(cfg)
    except TypeError:  # a method.kwargs key the rule does not take
        params = rule_settings(cfg) or []
        unknown = sorted(set(cfg["method"].get("kwargs") or {}) - set(params))
        raise ConfigError(
            f"method.kwargs.{', method.kwargs.'.join(unknown) or '?'} is not a setting of method.criterion="
            f"{name!r}; allowed: {', '.join(f'method.kwargs.{p}' for p in params) or 'none'}"
        ) from None
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check = getattr(rule, "check_round", None)
    if check is not None:
        try:
            check(L=int(cfg.get("L") or 0), temperature=float(cfg["decoding"]["temperature"]))
        except ValueError as e:
            raise ConfigError(str(e)) from None


PROGRESS = ("auto", "bar", "log", "quiet")


def _validate_fields(cfg: Mapping[str, Any]) -> None:
    """Every numeric field of :data:`runners.config.numeric_fields.NUMERIC` (type and range), ``trace``, ``reuse``, ``progress``."""
    try:
        canonical(copy.deepcopy(dict(cfg)))
    except FieldError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(cfg.get("trace", False), bool):
        raise ConfigError(f"trace={cfg.get('trace')!r} is invalid; allowed: true, false")
    dm = cfg.get("dropmatch") or {}
    if dm.get("sparse_check_top_n") is not None:
        if not cfg.get("trace"):
            raise ConfigError(
                f"dropmatch.sparse_check_top_n={dm['sparse_check_top_n']} records the sparse variant's "
                "verdicts in the round traces; allowed: trace=true with it, or sparse_check_top_n=null"
            )
        if dm.get("sparse_top_n") is not None:
            raise ConfigError(
                f"dropmatch.sparse_check_top_n={dm['sparse_check_top_n']} compares the sparse variant "
                f"with the exact rule, but dropmatch.sparse_top_n={dm['sparse_top_n']} makes the run "
                "sparse; allowed: sparse_top_n=null with the check, or sparse_check_top_n=null"
            )
    _validate_heads(cfg)
    escape = dm.get("sparse_escape", False)
    if not isinstance(escape, bool):
        raise ConfigError(
            f"dropmatch.sparse_escape={escape!r} is invalid; allowed values: true, false"
        )
    backend = str((cfg.get("backend") or {}).get("name"))
    if (
        dm.get("audit_share")
        and dm.get("sparse_top_n") is not None
        and backend not in AUDIT_BACKENDS
    ):
        raise ConfigError(
            f"dropmatch.audit_share={dm['audit_share']} audits the sparse variant in the HF or llama.cpp "
            f"loop, but backend={backend}; allowed: backend={' or '.join(AUDIT_BACKENDS)} with the audit, or "
            "audit_share=0 (or sparse_top_n=null)"
        )
    if cfg.get("reuse", "warn") not in ("warn", "strict"):
        raise ConfigError(f"reuse={cfg.get('reuse')!r} is invalid; allowed: warn, strict")
    if cfg.get("progress", "auto") not in PROGRESS:
        raise ConfigError(
            f"progress={cfg.get('progress')!r} is invalid; allowed: {', '.join(PROGRESS)}"
        )


def _validate_heads(cfg: Mapping[str, Any]) -> None:
    """``dropmatch.K=0`` only with a method that reads no MC-dropout heads (AR, SD and the other rules ignore K)."""
    method = cfg.get("method") or {}
    K = (cfg.get("dropmatch") or {}).get("K")
    if K == 0 and (method.get("uses_dropmatch") or method.get("ar_dropout_path")):
        raise ConfigError(
            f"dropmatch.K=0 is invalid with method={method.get('name')} (its rule reads the MC-dropout heads); "
            "allowed: an integer >= 1 (method=sd decodes the same drafts without heads)"
        )


def validate(cfg: Mapping[str, Any]) -> None:
    """Raise :class:`ConfigError` for the first invalid field.

    Checks: no key that nothing reads (:mod:`runners.config.known_keys`, e.g. ``+dropmatch.pdrop=0.3``), L (1 ..
    :data:`~runners.config.numeric_fields.MAX_L`), every numeric field of :data:`runners.config.numeric_fields.NUMERIC` (dropmatch.p_drop / K / path,
    decoding.temperature / top_p / seed / max_new_tokens, dataset.limit / offset / max_new_tokens, repeats,
    the profile's caps, the backend's sizes: type and range), trace, progress, method/criterion, backend and
    dataset names against their registries, that the backend supports the run's modes
    (:mod:`runners.backends.modes`: e.g. ``method=draft_only`` with ``backend=vllm`` is refused), that an
    optional backend package is installed, the logger and its mode, and that a GPU-only
    pair/profile/backend has a GPU, and that ``DROPMATCH_RESULTS`` / ``DROPMATCH_CACHE`` can be directories.
    """

    unknown = unknown_keys(cfg)
    if unknown:
        raise ConfigError(unknown_key_message(*unknown[0]))
    validate_L(cfg)
    _validate_fields(cfg)
    _validate_names(cfg)
    ctk = (cfg.get("pair") or {}).get("chat_template_kwargs")
    if ctk is not None and (
        not isinstance(ctk, Mapping)
        or not all(isinstance(k, str) for k in ctk)
        or set(FIXED_CHAT_KWARGS) & set(ctk)
    ):
        raise ConfigError(
            f"pair.chat_template_kwargs={ctk!r} is invalid; allowed: a mapping of chat-template "
            f"variables, e.g. {{enable_thinking: false}} ({{}}: the template's defaults; not "
            f"{' / '.join(FIXED_CHAT_KWARGS)})"
        )
    _validate_modes(cfg)
    _validate_environment(cfg)
    _validate_logger(cfg.get("logger") or {})
    bad_dirs = directory_env_errors()
    if bad_dirs:
        raise ConfigError(bad_dirs[0])

    _validate_device(cfg)
    try:
        dtype = resolve_dtype(cfg.get("pair") or {})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    backend = (cfg.get("backend") or {}).get("name")
    if (
        dtype == "float16"
        and (cfg.get("pair") or {}).get("device", "cpu") == "cpu"
        and backend != "vllm"
    ):
        # PyTorch's CPU kernels emulate half precision (slower than float32), so no timing made in it means
        # anything; vLLM converts the weights itself
        raise ConfigError(
            f"pair.dtype=float16 is invalid with backend={backend} on pair.device=cpu; allowed on a CPU: auto, "
            "float32, bfloat16 (float16 with pair.device=cuda)"
        )


def _validate_device(cfg: Mapping[str, Any]) -> None:
    """``pair.device``: a device torch can name (``cpu``, ``cuda``, ``cuda:N``, ``mps``, ...), and a CUDA device only
    where torch sees it (vLLM picks its own device, so only the spelling is checked there)."""
    device = str((cfg.get("pair") or {}).get("device", "cpu"))
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(
            f"pair.device={device!r} is invalid; allowed: cpu, cuda, cuda:N (or another torch device type)"
        ) from None
    if dev.type != "cuda" or (cfg.get("backend") or {}).get("name") == "vllm":
        return
    # availability through gpu_available (the one place that asks torch whether a GPU is there); the index only when
    # one is named
    count = torch.cuda.device_count() if gpu_available() else 0
    if not gpu_available() or (dev.index is not None and dev.index >= count):
        raise ConfigError(
            f"pair.device={device} is invalid here: torch sees {count} CUDA device(s); allowed here: cpu"
            + (f", cuda, cuda:0..{count - 1}" if count else "")
        )


def validate_L(cfg: Mapping[str, Any]) -> None:
    """L: 0 for autoregressive methods, else an integer in 1 .. MAX_L (draft tokens per round)."""
    method = cfg["method"]
    L = cfg.get("L")
    if method.get("autoregressive"):
        if L != 0:
            raise ConfigError(
                f"L={L} with method={method['name']}; autoregressive methods have no drafts (L is set to 0)"
            )
    elif (
        not isinstance(L, (int, float))
        or isinstance(L, bool)
        or not float(L).is_integer()
        or not 1 <= L <= MAX_L
    ):
        too_long = isinstance(L, (int, float)) and not isinstance(L, bool) and L > MAX_L
        raise ConfigError(
            f"L={L!r} is invalid; allowed: an integer >= 1 and <= {MAX_L} (draft tokens per round; "
            f"method=ar for the autoregressive baseline){f'; {MAX_L_REASON}' if too_long else ''}"
        )


def _validate_names(cfg: Mapping[str, Any]) -> None:
    """method.criterion (and its knobs), backend, dataset and scorer names against their registries, and the
    dataset's split against the sources that could serve it."""
    method = cfg["method"]
    if method.get("criterion") is not None and method["criterion"] not in CRITERIA:
        raise ConfigError(
            f"method.criterion={method['criterion']!r} is unknown; allowed: {', '.join(CRITERIA.names())}"
        )
    if method.get("criterion") is not None and not isinstance(method.get("judge"), Mapping):
        _validate_rule(cfg)
    if cfg["backend"]["name"] not in BACKENDS:
        raise ConfigError(
            f"backend={cfg['backend']['name']!r} is unknown; allowed: {', '.join(BACKENDS.names())}"
        )
    _validate_backend_keys(cfg["backend"])
    profile = cfg.get("profile") or {}
    for table in ("limit", "max_new_tokens"):
        unknown = [k for k in profile.get(table) or {} if k not in DATASETS]
        if (
            unknown
        ):  # a typo'd benchmark would be read by nothing: the run would use the default n / cap
            raise ConfigError(
                f"profile.{table}.{unknown[0]} names no dataset; allowed: {', '.join(DATASETS.names())}"
            )
    if cfg["dataset"]["name"] not in DATASETS:
        raise ConfigError(
            f"dataset={cfg['dataset']['name']!r} is unknown; allowed: {', '.join(DATASETS.names())}"
        )
    scorer = cfg["dataset"].get("scorer")
    if scorer is not None and scorer not in SCORERS:
        raise ConfigError(
            f"dataset.scorer={scorer!r} is unknown; allowed: {', '.join(SCORERS.names())}"
        )
    source, split = cfg["dataset"].get("source"), cfg["dataset"].get("split")
    if isinstance(source, Mapping) and split is not None:
        why = split_unservable(cfg["dataset"]["name"], source, str(split))
        if why:
            raise ConfigError(why)


def _validate_environment(cfg: Mapping[str, Any]) -> None:
    """A GPU for GPU-only pairs / profiles / backends, and the optional package of the backend."""
    needs_gpu = [
        f"{k}={cfg[k]['name']}"
        for k in ("pair", "profile", "backend")
        if (cfg.get(k) or {}).get("requires_gpu")
    ]
    if needs_gpu and not gpu_available():
        raise ConfigError(
            f"{', '.join(needs_gpu)} needs a CUDA GPU and none is visible; allowed here: profile=default with "
            f"pair=qwen25coder_0.5b_1.5b (the embedded CPU pair)"
        )
    package = BACKEND_PACKAGES.get(cfg["backend"]["name"])
    # reproduce.sh checks a vLLM sweep from the core venv before it installs vLLM's own (DROPMATCH_CHECK_ONLY)
    deferred = package == "vllm" and check_only()
    if package and not installed(package) and not deferred:
        raise ConfigError(
            f"backend={cfg['backend']['name']} needs the {package!r} package, which this interpreter "
            f"({sys.executable}) lacks; allowed here: backend=hf, or "
            f"{BACKEND_INSTALL[cfg['backend']['name']]}"
        )


FLASH_ATTN = ("auto", "on", "off")  # llama.cpp's flash-attention switch


def _validate_backend_keys(backend: Mapping[str, Any]) -> None:
    """Every ``backend.*`` key is a setting of the chosen backend (``conf/backend/<name>.yaml``): a setting of another
    backend (``backend=hf +backend.n_ctx=4096``) would be ignored by the engine yet change the run id."""
    name = backend["name"]
    own = backend_defaults(name)
    extra = [k for k in backend if k not in own]
    if extra:
        raise ConfigError(
            f"backend.{extra[0]} is not a setting of backend={name}; allowed: "
            f"{', '.join(k for k in own if k not in ('name', 'version'))}"
        )
    for key, default in own.items():  # a switch given "maybe" would be read as true
        if isinstance(default, bool) and not isinstance(backend.get(key, default), bool):
            raise ConfigError(f"backend.{key}={backend[key]!r} is invalid; allowed: true or false")
    if "flash_attn" in backend and backend["flash_attn"] not in FLASH_ATTN:
        raise ConfigError(
            f"backend.flash_attn={backend['flash_attn']!r} is invalid; allowed: {', '.join(FLASH_ATTN)}"
        )
