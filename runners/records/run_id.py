"""The run id: a short hash of the resolved config.

It hashes the resolved config without the fields that do not change what is computed
(:data:`IDENTITY_EXCLUDE` at the top level, :data:`IDENTITY_EXCLUDE_ANYWHERE` at any depth: where a model or
data set was read from, not what it is), so the same sweep point run on a laptop or a cluster node, from
any sweep or artefact, is one run. Numbers are hashed in a canonical form, so ``0`` and ``0.0`` are one
run: a field declared in :data:`runners.config.numeric_fields.NUMERIC` as a float hashes as a float
(``decoding.temperature=0`` -> ``0.0``, ``dropmatch.p_drop=0`` -> ``0.0``), every other number with an
integral value as an int (``2.0`` -> ``2``); bools stay bools. This keeps the ids of records made before
the rule (their configs held ``0.0`` / ``1.0`` only in declared float fields). An empty mapping is hashed as
absent (it adds no setting), so declaring an option block with its default ``{}`` (``pair.chat_template_kwargs``)
keeps the ids of runs made before the block existed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from runners.config.numeric_fields import FLOAT_PATHS

# Top-level fields that do not change what a run computes; excluded from the run id.
# ``artefact`` is informational (analysis selects runs by config fields), so artefacts share runs; ``reuse``
# says what to do with a record made by other code (runners.run), not what to compute.
IDENTITY_EXCLUDE = ("hydra", "logger", "paths", "launcher", "progress", "artefact", "reuse")
# Keys excluded at any depth: where a source was found on this machine, not what it is (the pair/dataset
# name, hub id and pinned sha256 stay in the id); and a pinned GGUF's declared ``file_type``, which its sha256
# already fixes (llama.cpp runs record it in ``model_identity``); a pair's ``setup_hint`` (how to provide its
# weights: text for an error message).
IDENTITY_EXCLUDE_ANYWHERE = ("local_path", "file_type", "setup_hint")
# Top-level fields of which only these keys count. A profile's caps (``limit``, ``max_new_tokens``,
# ``repeats``, ``artefacts``) are already copied into ``dataset`` / ``decoding`` / ``repeats`` by
# ``runners.config.resolve.resolve_run_config``, so editing the cap of one benchmark changes only that benchmark's runs;
# the name stays because tables select runs by profile.
IDENTITY_ONLY = {"profile": ("name",)}
# The resolved weights of the pair (runners.config.resolve.resolve_run_config adds it; see identity_of).
MODEL_IDENTITY = "model_identity"


def hashed_form(node: Any, path: str = "") -> Any:
    """Drop :data:`IDENTITY_EXCLUDE_ANYWHERE` keys and put every number in its canonical form."""
    if isinstance(
        node, Mapping
    ):  # an empty mapping (e.g. chat_template_kwargs: {}) is hashed as absent
        return {
            k: hashed_form(v, f"{path}.{k}" if path else str(k))
            for k, v in node.items()
            if k not in IDENTITY_EXCLUDE_ANYWHERE and not (isinstance(v, Mapping) and not v)
        }
    if isinstance(node, (list, tuple)):
        return [hashed_form(v, path) for v in node]
    return canonical_number(node, path)


def canonical_number(value: Any, path: str = "") -> Any:
    """The hashed form of a number at ``path`` (see the module docstring); anything else unchanged."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if path in FLOAT_PATHS:
        return float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def identity_of(cfg: Mapping[str, Any]) -> dict:
    """The part of a resolved config that the run id hashes.

    ``model_identity`` (the resolved weights, :func:`runners.models.identity.model_identity`) counts only where
    the config does not already fix the weights (:func:`unfixed`): a local directory,
    a hub revision, a resolved ``auto`` dtype. Runs on different weights get different ids; runs on the
    configured pinned weights keep the ids they had before the identity was recorded.
    """
    out = {}
    for k, v in cfg.items():
        if k in IDENTITY_EXCLUDE:
            continue
        if k == MODEL_IDENTITY:
            v = unfixed(v or {}, cfg.get("pair") or {})
            if not v:
                continue
        if k in IDENTITY_ONLY and isinstance(v, Mapping):
            v = {kk: v[kk] for kk in IDENTITY_ONLY[k] if kk in v}
        out[k] = v
    return hashed_form(out)


def run_id_of(cfg: Mapping[str, Any]) -> str:
    """Short hash (12 hex) of :func:`identity_of` the resolved config."""
    blob = json.dumps(identity_of(cfg), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def unfixed(identity: Mapping[str, Any], pair_cfg: Mapping[str, Any]) -> dict:
    """The part of ``identity`` the pair config does not already fix (what the run id adds to the config).

    A model whose weights are the pinned source named in the config (same sha256) or a built source (its
    builder and seed are in the config), loaded in the configured dtype, adds nothing: records made before
    the identity existed (all on such sources) keep their ids. Anything else (a local directory, the hub, an
    unavailable source, a dtype resolved from ``auto``) enters the id in full.
    """
    out = {}
    for role, ident in identity.items():
        spec = pair_cfg.get(role) or {}
        pinned = spec.get("pinned") if isinstance(spec.get("pinned"), Mapping) else {}
        fixed = (
            (
                ident.get("source") == "pinned"
                and ident.get("sha256") == str((pinned or {}).get("sha256"))
            )
            or ident.get("source") == "built"
        ) and ident.get("dtype") == str(pair_cfg.get("dtype"))
        if not fixed:  # (an unavailable source's reason names a path: not part of the identity)
            out[role] = {k: v for k, v in ident.items() if k != "reason"}
    return out
