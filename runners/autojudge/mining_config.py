"""``method.judge.mining`` checked before anything loads: the Auto-Judge miner's settings and their ranges."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runners.config.errors import ConfigError

# important iff the extracted final answer changes (the authors' GSM8K rule), or iff correctness changes
LABELS = ("answer", "correctness")


def _int_field(
    m: Mapping[str, Any], key: str, lo: int, hi: int | None, null: bool, meaning: str
) -> int | None:
    """``m[key]`` checked: an integer in ``[lo, hi]`` (``hi`` None: no upper end), or None where ``null``.

    Raises:
        runners.config.validate.ConfigError: naming ``method.judge.mining.<key>`` and the allowed values.
    """
    v = m.get(key)
    if v is None and null:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        span = f">= {lo}" + (f" and <= {hi}" if hi is not None else "")
        raise ConfigError(
            f"method.judge.mining.{key}={v!r} is invalid; allowed: "
            + ("null or " if null else "")
            + f"an integer {span} ({meaning})"
        )
    return v


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
    _int_field(m, "offset", 0, None, False, "the first item mined")
    _int_field(m, "limit", 1, None, True, "prompts mined; null: every item from offset")
    _int_field(
        m, "max_new_tokens", 1, None, True, "the target's cap per prompt; null: the dataset's"
    )
    _int_field(m, "max_mismatches", 1, None, True, "mismatches per prompt; null: all")
    return m
