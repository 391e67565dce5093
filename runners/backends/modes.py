"""What each backend can run: the decoding modes it supports, declared here and checked by validation.

A run needs a set of modes (:func:`modes_of`), read from the resolved config only:

========== ======================================================================================
mode       when a run needs it
========== ======================================================================================
ar         ``method.autoregressive`` and ``method.ar_model == "target"`` (the AR baseline, L = 0)
draft_only ``method.ar_model == "draft"``: the draft model decodes alone (Table 1's draft row)
dropout_path ``method.ar_dropout_path``: one MC-dropout path of the target decodes alone (Table 1, Fig. 3)
sd         L >= 1 with a rule that is not DropMatch (``greedy_match`` / ``rejection``: greedy match at
           T = 0, lossless rejection sampling at T > 0)
lossy      L >= 1 with one of the field's training-free rules (:data:`criteria.rules.FIELD_RULES`: ``fly``,
           ``fsd``, ``typical``, ``relaxed_topk``, ``prob_threshold``, ``static_ensemble``, ``bild``,
           ``block_verify``); pure rules, so any backend that runs a project rule in its verify step can run them
dropmatch  L >= 1 with a DropMatch rule (``method.uses_dropmatch``: ``dropmatch_js``, ``dropmatch_naive``)
autojudge  L >= 1 with an Auto-Judge rule (``autojudge``, ``autojudge_dropmatch``: the judge reads the draft's
           and the target's hidden states in the verify step); with ``method.uses_dropmatch`` also ``dropmatch``
trace      ``trace=true`` on a speculative run: per-round criterion traces (Tables 2-3)
nucleus    ``decoding.top_p < 1`` (no backend: the project's rules do not apply nucleus sampling)
========== ======================================================================================

:func:`supported_modes` is each backend's declaration; :func:`runners.config.validate.validate` refuses a run
that needs a mode its backend lacks, before anything loads (a backend that ignored a mode would decode
something else and record it under the requested method: vLLM has no draft-alone or single-dropout-path
decoding, so it would run the target's AR baseline under those names).

Why in code, not a ``modes:`` list in ``conf/backend/*.yaml``: support is a fact about the code, not a
setting. A YAML list could be overridden on the command line (claiming a mode the code does not have) and
would enter the run id. vLLM's entry is read from ``VLLMBackend``'s class attributes (its own declaration,
which its ``check`` enforces again at generation) without importing vLLM; the HF loop runs every mode but
``nucleus``, the llama.cpp loop also not ``autojudge``. A test checks the table names exactly the registered backends.
"""

from __future__ import annotations

from typing import Any, Mapping

from criteria.rules import FIELD_RULES
from runners.backends.vllm_engine import NATIVE_RULES, VLLMBackend

MODES = (
    "ar",
    "draft_only",
    "dropout_path",
    "sd",
    "lossy",
    "dropmatch",
    "autojudge",
    "trace",
    "nucleus",
)
JUDGE_RULES = ("autojudge", "autojudge_dropmatch")  # the "autojudge" mode's rules
SD_RULES = (
    "greedy_match",
    "rejection",
)  # the "sd" mode's rules; "dropmatch": dropmatch_js, dropmatch_naive
LOSSY_RULES = FIELD_RULES  # the "lossy" mode's rules

# The HF loop runs every decoding mode; no backend applies nucleus sampling in the project's rules.
HF_MODES = frozenset(MODES) - {"nucleus"}
# llama.cpp's loop: every mode but Auto-Judge (its judge reads the draft's hidden state at each draft token, which
# the draft context does not extract) and the draft decoding alone (the loop's first token is decided from the
# target context's hidden states, which only the target context extracts); backend=auto runs those on hf.
LLAMACPP_MODES = HF_MODES - {"autojudge", "draft_only"}


def _vllm_modes(native_verify: bool) -> frozenset[str]:
    """vLLM's modes, read from ``VLLMBackend``'s own declaration (``SUPPORTED_RULES``, ``SUPPORTS_AR_DRAFT_MODEL``,
    ``SUPPORTS_DROPOUT_PATH``; ``NATIVE_RULES`` with ``backend.native_verify``: no hook, so no DropMatch and no
    traces). The module is light: vLLM itself is imported only when an engine is built."""

    rules = set(NATIVE_RULES if native_verify else VLLMBackend.SUPPORTED_RULES)
    modes = {"ar"} if "autoregressive" in VLLMBackend.SUPPORTED_RULES else set()
    modes |= {"draft_only"} if VLLMBackend.SUPPORTS_AR_DRAFT_MODEL else set()
    modes |= {"dropout_path"} if VLLMBackend.SUPPORTS_DROPOUT_PATH else set()
    modes |= {"sd"} if set(SD_RULES) <= rules else set()
    modes |= {"lossy"} if set(LOSSY_RULES) <= rules and not native_verify else set()
    modes |= (
        {"dropmatch", "trace"}
        if {"dropmatch_js", "dropmatch_naive"} <= rules and not native_verify
        else set()
    )
    modes |= {"autojudge"} if set(JUDGE_RULES) <= rules and not native_verify else set()
    return frozenset(modes)


# Backend name -> modes it supports (``native_verify`` variants where a backend has them).
BACKEND_MODES: dict[str, Any] = {
    "hf": lambda backend: HF_MODES,
    "llamacpp": lambda backend: LLAMACPP_MODES,
    "vllm": lambda backend: _vllm_modes(bool(backend.get("native_verify"))),
}


def supported_modes(backend: Mapping[str, Any]) -> frozenset[str]:
    """Modes the backend configured by ``backend`` (a ``conf/backend/*.yaml`` mapping) can run.

    Raises:
        KeyError: the backend declares no modes (a new backend must add itself to :data:`BACKEND_MODES`).
    """
    return BACKEND_MODES[str(backend.get("name"))](backend)


def modes_of(cfg: Mapping[str, Any]) -> list[str]:
    """The modes a resolved run config needs (see the module docstring), in :data:`MODES` order.

    A measurement run (``method.measure``: Table 4 timings, Fig. 3 similarity, the benchmark) needs none: it
    runs its own code (``runners/measure/``), which checks its backend itself.
    """
    method = cfg.get("method") or {}
    if method.get("measure"):
        return []
    need: set[str] = set()
    if method.get("autoregressive") or not int(cfg.get("L") or 0):
        if method.get("ar_dropout_path"):
            need.add("dropout_path")
        elif str(method.get("ar_model", "target")) == "draft":
            need.add("draft_only")
        else:
            need.add("ar")
    else:
        judge = str(method.get("criterion")) in JUDGE_RULES
        if judge:
            need.add("autojudge")
        if method.get("uses_dropmatch"):
            need.add("dropmatch")
        elif not judge:
            need.add("lossy" if str(method.get("criterion")) in LOSSY_RULES else "sd")
        if cfg.get("trace"):
            need.add("trace")
    top_p = (cfg.get("decoding") or {}).get("top_p", 1.0)
    if isinstance(top_p, (int, float)) and float(top_p) != 1.0:
        need.add("nucleus")
    return [m for m in MODES if m in need]


def unsupported(cfg: Mapping[str, Any]) -> list[str]:
    """Modes ``cfg`` needs that its backend does not support (empty: the run is possible)."""
    have = supported_modes(cfg["backend"])
    return [m for m in modes_of(cfg) if m not in have]
