"""What a decode run hands its backend, built from the resolved config: the acceptance rule, its heads and the
decoding settings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import criteria.rules  # noqa: F401  (fills CRITERIA)
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.autojudge.artefact import judge_dir
from runners.backends.base import DecodingConfig

DROPMATCH_RULE_FIELDS = (
    "majority",
    "include_target",
)  # dropmatch.* fields that are the rule's own settings


def build_rule(c: Mapping[str, Any]) -> Any:
    """The acceptance rule ``method.criterion`` built from its own settings only.

    DropMatch rules take ``dropmatch.majority`` / ``dropmatch.include_target``; any rule takes
    ``method.kwargs``; Auto-Judge rules (``method.judge``) take ``method.threshold`` and their built judge head
    (``judge.pt`` of ``method.judge.key``). K and p_drop are not rule settings: see :func:`head_spec`.
    """
    kwargs = dict(c["method"].get("kwargs") or {})
    if c["method"].get("uses_dropmatch"):
        kwargs.update({k: c["dropmatch"][k] for k in DROPMATCH_RULE_FIELDS if k in c["dropmatch"]})
    judge = c["method"].get("judge")
    if isinstance(judge, Mapping):
        kwargs.update(
            threshold=float(c["method"]["threshold"]),
            judge=str(judge_dir(judge["key"]) / "judge.pt"),
        )
    return CRITERIA.get(c["method"]["criterion"])(**kwargs)


def head_spec(c: Mapping[str, Any]) -> Any:
    """The run's MC-dropout heads (:class:`criteria.dropout_heads.HeadSpec`), built once from the config."""
    if c["method"].get("uses_dropmatch") or c["method"].get("ar_dropout_path"):
        top_n = c["dropmatch"].get("sparse_top_n")
        check = (
            c["dropmatch"].get("sparse_check_top_n") if c["method"].get("uses_dropmatch") else None
        )
        return HeadSpec(
            K=int(c["dropmatch"]["K"]),
            p_drop=float(c["dropmatch"]["p_drop"]),
            top_n=None if top_n is None else int(top_n),
            check_top_n=None if check is None else int(check),
            audit_share=float(c["dropmatch"].get("audit_share") or 0.0),
            escape=bool(c["dropmatch"].get("sparse_escape", False)),
        )
    return HeadSpec()


def needs_draft(c: Mapping[str, Any]) -> bool:
    """True when the run loads the draft model: it drafts (L > 0) or the draft decodes alone (Table 1)."""
    return int(c["L"]) > 0 or c["method"].get("ar_model") == "draft"


def decoding_config(c: Mapping[str, Any], dataset: Any) -> DecodingConfig:
    """The run's :class:`~runners.backends.base.DecodingConfig`; ``dataset`` supplies the stop strings and, when
    ``decoding.max_new_tokens`` is null, the cap (lm-eval's ``max_gen_toks``)."""
    method = c["method"]
    return DecodingConfig(
        num_speculative_tokens=int(c["L"]),
        temperature=float(c["decoding"]["temperature"]),
        top_p=float(c["decoding"].get("top_p", 1.0)),
        max_new_tokens=int(c["decoding"]["max_new_tokens"] or dataset.max_new_tokens),
        stop=list(dataset.stop or []),
        seed=int(c["decoding"]["seed"]),
        trace=bool(c.get("trace")),
        ar_model=str(method.get("ar_model", "target")),
        seed_stream=int(c["dropmatch"].get("path") or 0) if method.get("ar_dropout_path") else 0,
    )
