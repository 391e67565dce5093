"""Resolve a composed Hydra config into the plain dict a run is: what the run id hashes and ``config.json`` stores."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from omegaconf import OmegaConf

import criteria.rules  # noqa: F401  (fills CRITERIA)
from criteria.registry import CRITERIA
from runners.autojudge.artefact import attach_judge
from runners.backends.select import resolve_backend
from runners.config.errors import ConfigError
from runners.config.numeric_fields import canonical
from runners.config.validate import validate, validate_L
from runners.models.identity import label_own_weights, model_identity

_logger = logging.getLogger(__name__)


def resolve_run_config(
    cfg: Any,
    identify_models: bool = True,
    check: Callable[[dict], None] | None = None,
    precheck: Callable[[dict], None] | None = None,
) -> dict:
    """Validate, then normalise to the plain dict the run id hashes and ``config.json`` stores.

    Normalisation: numeric fields take their declared type (:func:`runners.config.numeric_fields.canonical`); the
    profile's per-dataset ``limit`` / ``max_new_tokens`` fill unset fields;
    autoregressive methods get ``L = 0``; ``backend: auto`` becomes the chosen backend's config
    (:mod:`runners.backends.select`); DropMatch fields a method does not use are fixed (so a sweep
    over ``dropmatch.p_drop`` runs SD once, not once per value), ``dropmatch.audit_share`` is dropped where
    nothing is audited (an exact run, or a share of 0) and ``dropmatch.sparse_escape`` where it changes nothing
    (false, an exact run, or a rule without Eq. 6: :func:`_reads_js`); ``model_identity`` records the weights
    each model will be loaded from (:func:`runners.models.identity.model_identity`; skipped with
    ``identify_models=False``, for validation only); a model whose ``local_path`` replaces the weights its built-in
    pair names is labelled by those weights, not the built-in name (:func:`runners.models.identity.label_own_weights`:
    the config, the run id, the tables and the footers name what ran). ``method.threshold`` is dropped from methods without a judge (a sweep
    ``++method.threshold=...`` runs SD once); Auto-Judge methods get ``method.judge.key``
    (:func:`runners.autojudge.artefact.attach_judge`). ``check`` (a measurement's own field checks,
    :func:`runners.measure.base.check`) sees the validated, canonical config before the profile fills it;
    ``precheck`` (:func:`runners.measure.base.check_backend`) sees the config once its backend is chosen, before
    the backend's own keys are validated: a measurement that runs on named backends refuses another by its own
    message, not by a key the measurement's experiment sets that the other backend lacks.

    Raises:
        runners.config.validate.ConfigError: an invalid field, or a missing judge artefact (nothing has been loaded yet).
    """
    if OmegaConf.is_config(cfg):  # a DictConfig is a Mapping too: resolve it into plain containers
        cfg = OmegaConf.to_container(cfg, resolve=True)
    c = {k: v for k, v in dict(cfg).items() if k != "hydra"}
    c["dataset"], c["decoding"], c["method"] = (
        dict(c["dataset"]),
        dict(c["decoding"]),
        dict(c["method"]),
    )
    c["dropmatch"] = dict(c.get("dropmatch") or {})
    method = c["method"]
    if method.get("autoregressive"):
        c["L"] = 0
    validate_L(c)  # before backend=auto reads L to know whether a draft model runs
    c["backend"] = _resolve_backend(c)  # backend=auto -> the engine this machine runs fastest
    if precheck is not None:
        precheck(c)
    validate(c)
    canonical(
        c
    )  # each numeric field as its declared type (temperature=0 -> 0.0), as config.json has it
    if check is not None:
        check(c)
    if isinstance(method.get("judge"), Mapping):
        _check_judge_method(c)
    else:
        method.pop("threshold", None)
    spec_method = (c.get("pair") or {}).get("spec_method")  # what the pair's draft is (eagle3 head)
    if spec_method and dict(c["backend"]).get("name") == "vllm":
        c["backend"] = {**dict(c["backend"]), "spec_method": str(spec_method)}
    _fill_from_profile(c)
    _fix_dropmatch(c)
    c["pair"] = label_own_weights(c["pair"])
    if isinstance(method.get("judge"), Mapping):
        attach_judge(c)
    if identify_models:
        c["model_identity"] = model_identity(c["pair"], c["backend"])
    return c


def _fill_from_profile(c: dict) -> None:
    """The profile's per-dataset ``limit`` and ``max_new_tokens`` and its ``repeats`` where the run leaves them unset
    (``max_new_tokens`` falls back to the dataset's own cap), in place."""
    profile = c.get("profile") or {}
    name = c["dataset"]["name"]
    if c["dataset"].get("limit") is None and (profile.get("limit") or {}).get(name) is not None:
        c["dataset"]["limit"] = int(profile["limit"][name])
    cap = (profile.get("max_new_tokens") or {}).get(name)
    if c["decoding"].get("max_new_tokens") is None:
        c["decoding"]["max_new_tokens"] = (
            int(cap) if cap is not None else c["dataset"].get("max_new_tokens")
        )
    if c.get("repeats") is None:
        c["repeats"] = int(profile.get("repeats") or 1)


def _fix_dropmatch(c: dict) -> None:
    """``dropmatch`` as the run id hashes it, in place: ``audit_share`` and ``sparse_escape`` dropped where they change
    nothing (:func:`_reads_js`), the fields a method does not use fixed (``path`` 0 for DropMatch rules and
    measurements, one path of K = 1 for ``ar_dropout_path``, ``{"unused": True}`` otherwise)."""
    dm, method = c["dropmatch"], c["method"]
    if dm.get("sparse_top_n") is None or not dm.get("audit_share"):
        # nothing audited: the config (and run id) of a run without the field
        dm.pop("audit_share", None)
    if not (dm.get("sparse_escape") and dm.get("sparse_top_n") is not None and _reads_js(method)):
        # likewise: runs the escape cannot change (none asked, an exact run, a rule without Eq. 6) keep their ids
        dm.pop("sparse_escape", None)
    if method.get("uses_dropmatch") or method.get("measure"):
        dm["path"] = 0
    elif method.get("ar_dropout_path"):  # one path: K = 1; the rule's settings do not apply
        c["dropmatch"] = {"K": 1, "p_drop": dm["p_drop"], "path": dm.get("path", 0)}
    else:
        c["dropmatch"] = {"unused": True}


def _reads_js(method: Mapping[str, Any]) -> bool:
    """Whether the method's rule computes Eq. (6), the only test ``dropmatch.sparse_escape`` changes: the DropMatch
    rules that read the draft's distribution (``dropmatch_js``, ``autojudge_dropmatch``; not ``dropmatch_naive``), or
    a measurement's DropMatch arm (bench's ``method.dm_criterion``)."""
    if method.get("uses_dropmatch"):
        name = method.get("criterion")
    elif method.get("measure"):
        name = method.get("dm_criterion")
    else:
        return False
    return name in CRITERIA and bool(getattr(CRITERIA.get(name), "needs_draft_probs", False))


def _resolve_backend(c: Mapping[str, Any]) -> dict:
    """``backend: auto`` resolved (:func:`runners.backends.select.resolve_backend`); any other backend as is.

    Raises:
        runners.config.errors.ConfigError: a profile whose DropMatch decision for ``auto`` differs from the chosen backend's.
    """
    try:
        return resolve_backend(c, log=_logger.info)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_judge_method(c: Mapping[str, Any]) -> None:
    """An Auto-Judge method's own fields (its backend is checked by validation: ``autojudge`` mode)."""
    thr = c["method"].get("threshold")
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not 0.0 <= float(thr) <= 1.0:
        raise ConfigError(
            f"method.threshold={thr!r} is invalid; allowed: a number in [0, 1] (accept a mismatch iff "
            f"the judge's p_important < threshold)"
        )
    if float(c["decoding"]["temperature"]) != 0.0:
        raise ConfigError(
            f"decoding.temperature={c['decoding']['temperature']} with method={c['method']['name']}; "
            f"allowed: 0 (Auto-Judge is greedy)"
        )
