"""``method.judge.mining`` checked before anything loads: the Auto-Judge miner's settings and their ranges."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runners.config.errors import ConfigError
from runners.config.numeric_fields import Field, FieldError

# important iff the extracted final answer changes (the authors' GSM8K rule), or iff correctness changes
LABELS = ("answer", "correctness")


def _int_field(
    m: Mapping[str, Any], key: str, lo: int, hi: int | None, null: bool, meaning: str
) -> int | None:
    """``m[key]`` checked as a run config's numeric fields are (:class:`runners.config.numeric_fields.Field`): an
    integer in ``[lo, hi]`` (``hi`` None: no upper end; an integral float is taken as its integer), or None where
    ``null``.

    Raises:
        runners.config.validate.ConfigError: naming ``method.judge.mining.<key>`` and the allowed values.
    """
    field = Field(f"method.judge.mining.{key}", int, low=lo, high=hi, nullable=null, note=meaning)
    try:
        return field.check(m.get(key))
    except FieldError as e:
        raise ConfigError(str(e)) from None


def check_mining(judge_cfg: Mapping[str, Any]) -> dict:
    """``method.judge.mining`` as a dict, its ``label``, ``features`` and integer fields checked (``batch_size``,
    ``lookahead``, ``offset``, ``limit``, ``max_new_tokens``, ``max_mismatches``).

    Raises:
        runners.config.validate.ConfigError: a value outside :data:`LABELS` / ``dd_dt, dt``, or an integer field
            out of its range (the message names the field and the allowed values).
    """
    m = dict(judge_cfg["mining"])
    if m.get("label") not in LABELS:
        raise ConfigError(
            f"method.judge.mining.label={m.get('label')!r} is invalid; allowed: {', '.join(LABELS)}"
        )
    if m.get("features") not in ("dd_dt", "dt"):
        raise ConfigError(
            f"method.judge.mining.features={m.get('features')!r} is invalid; allowed: dd_dt, dt"
        )
    m.setdefault("batch_size", 1)
    m.setdefault("lookahead", 0)
    m["batch_size"] = _int_field(
        m,
        "batch_size",
        1,
        None,
        False,
        "prompts whose searches are decoded together; 1: one prompt at a time",
    )
    m["lookahead"] = _int_field(
        m,
        "lookahead",
        0,
        64,
        False,
        "tokens guessed per continuation and forward from the prompt's earlier continuations; 0: none",
    )
    m.setdefault("offset", 0)
    for key, lo, null, meaning in (
        ("offset", 0, False, "the first item mined"),
        ("limit", 1, True, "prompts mined; null: every item from offset"),
        ("max_new_tokens", 1, True, "the target's cap per prompt; null: the dataset's"),
        ("max_mismatches", 1, True, "mismatches per prompt; null: all"),
    ):
        value = _int_field(m, key, lo, None, null, meaning)
        if key in m:  # an absent key stays absent (the mining artefact's identity hashes this dict)
            m[key] = value
    return m
