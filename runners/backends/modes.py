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
dropmatch  L >= 1 with a DropMatch rule (``method.uses_dropmatch``: ``dropmatch_js``, ``dropmatch_naive``)
trace      ``trace=true`` on a speculative run: per-round criterion traces (Tables 2-3)
========== ======================================================================================

:func:`supported_modes` is each backend's declaration; :func:`runners.validate.validate` refuses a run
that needs a mode its backend lacks, before anything loads (a backend that ignored a mode would decode
something else and record it under the requested method: vLLM has no draft-alone or single-dropout-path
decoding, so it would run the target's AR baseline under those names).

Why a table in this light module, not a ``modes:`` list in ``conf/backend/*.yaml``: support is a fact
about the code, not a setting. A YAML list could be overridden on the command line (claiming a mode the
code does not have) and would enter the run id; here validation reads it without importing vLLM, and a
test checks it names exactly the registered backends. A backend class may point a ``modes`` attribute
at its entry.
"""

from __future__ import annotations

from typing import Any, Mapping

MODES = ("ar", "draft_only", "dropout_path", "sd", "dropmatch", "trace")

# Backend name -> modes it supports. vLLM: the target (and its drafter) in one engine; the verify step
# runs the project rule through runners/backends/vllm_dropmatch_hook.py, which also records traces.
BACKEND_MODES: dict[str, frozenset[str]] = {
    "hf": frozenset(MODES),
    "vllm": frozenset({"ar", "sd", "dropmatch", "trace"}),
}
# backend.native_verify=true: vLLM's own RejectionSampler decides (no hook: no DropMatch, no traces).
VLLM_NATIVE_MODES = frozenset({"ar", "sd"})


def supported_modes(backend: Mapping[str, Any]) -> frozenset[str]:
    """Modes the backend configured by ``backend`` (a ``conf/backend/*.yaml`` mapping) can run.

    Raises:
        KeyError: the backend declares no modes (a new backend must add itself to :data:`BACKEND_MODES`).
    """
    name = str(backend.get("name"))
    if name == "vllm" and backend.get("native_verify"):
        return VLLM_NATIVE_MODES
    return BACKEND_MODES[name]


def modes_of(cfg: Mapping[str, Any]) -> list[str]:
    """The modes a resolved run config needs (see the module docstring), in :data:`MODES` order."""
    method = cfg.get("method") or {}
    need: set[str] = set()
    if method.get("autoregressive") or not int(cfg.get("L") or 0):
        if method.get("ar_dropout_path"):
            need.add("dropout_path")
        elif str(method.get("ar_model", "target")) == "draft":
            need.add("draft_only")
        else:
            need.add("ar")
    else:
        need.add("dropmatch" if method.get("uses_dropmatch") else "sd")
        if cfg.get("trace"):
            need.add("trace")
    return [m for m in MODES if m in need]


def unsupported(cfg: Mapping[str, Any]) -> list[str]:
    """Modes ``cfg`` needs that its backend does not support (empty: the run is possible)."""
    have = supported_modes(cfg["backend"])
    return [m for m in modes_of(cfg) if m not in have]
