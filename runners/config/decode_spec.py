"""What a decode run hands its backend, built from the resolved config: the acceptance rule and its heads."""

from __future__ import annotations

from typing import Any, Mapping

import criteria.rules  # noqa: F401  (fills CRITERIA)
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.autojudge.artefact import judge_dir

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
        )
    return HeadSpec()
