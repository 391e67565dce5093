"""The user-settable numeric fields of a run config: type, allowed range, and their canonical value.

One table (:data:`NUMERIC`) serves two places:

- :func:`runners.config.validate.validate` refuses a value outside its range (message: the field, the value and
  the allowed values, e.g. ``decoding.max_new_tokens=0 is invalid; allowed: an integer >= 1 or null``);
- :func:`canonical` gives the value the run id hashes and ``config.json`` stores: a float field holds a
  float (``decoding.temperature=0`` -> ``0.0``), an int field an int (``dropmatch.K=5.0`` -> ``5``), so
  ``0`` and ``0.0`` are one run. Numbers outside this table are normalised by
  :func:`runners.records.run_id.identity_of` (an integral float hashes as the int).

A path ``a.*`` covers every key of mapping ``a`` (e.g. ``profile.limit.*``: one cap per benchmark).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any


class FieldError(ValueError):
    """A numeric field is outside its allowed values (validation turns it into a ConfigError)."""


@dataclass(frozen=True)
class Field:
    """One numeric field.

    Attributes:
        path: dotted path in the resolved run config (``*`` = every key of that mapping).
        kind: ``int`` or ``float``.
        low / high: bounds (None: unbounded); ``low_open`` / ``high_open``: the bound itself is excluded.
        nullable: null is allowed (it means: the profile's or the dataset's value).
        note: what the value means, appended to the allowed values in an error.
    """

    path: str
    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    note: str = ""

    def allowed(self) -> str:
        """The allowed values in words, e.g. ``an integer >= 1 or null``."""
        what = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            rng = f" in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"
        elif self.low is not None:
            rng = f" {'>' if self.low_open else '>='} {_num(self.low)}"
        elif self.high is not None:
            rng = f" {'<' if self.high_open else '<='} {_num(self.high)}"
        else:
            rng = ""
        return f"{what}{rng}{' or null' if self.nullable else ''}{f' ({self.note})' if self.note else ''}"

    def check(self, value: Any) -> int | float | None:
        """The canonical value of ``value`` (see the module docstring).

        Raises:
            FieldError: not a number of this kind (bools are not numbers), or out of range.
        """
        if value is None and self.nullable:
            return None
        ok = (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        )
        if ok and self.kind is int:
            ok = float(value).is_integer()
        if ok:
            v = float(value)
            ok = (self.low is None or (v > self.low if self.low_open else v >= self.low)) and (
                self.high is None or (v < self.high if self.high_open else v <= self.high)
            )
        if not ok:
            raise FieldError(f"{self.path}={value!r} is invalid; allowed: {self.allowed()}")
        return int(value) if self.kind is int else float(value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# Draft length cap. Each round drafts L tokens one by one and verifies L + 1 positions; DropMatch's heads hold
# K x L x V probabilities (float32, K = 5, V = 152k: 195 MB at L = 64, 3 GB at L = 1000). The tokens a round
# keeps are at most 1 / (1 - alpha) on average for a per-token acceptance rate alpha (Leviathan et al. 2023,
# Eq. 1: 10 at alpha = 0.9, 20 at 0.95), so drafts far beyond that only add draft passes. The paper's longest
# draft is L = 32 (its Auto-Judge runs).
MAX_L = 64
MAX_L_REASON = (
    f"why {MAX_L}: a round drafts L tokens one by one and DropMatch's heads hold K x L x vocabulary "
    "probabilities, while a round keeps on average at most 1/(1 - acceptance rate) tokens (10 at 0.9); "
    "the paper's longest draft is L=32"
)

# Dropout heads cap. The paper runs K = 5 (the sensitivity sweep here K = 1 and 5). Each head is a row of the LM
# head over the whole vocabulary per verified position (exact rule: B x (L + 1) x K x V logits, 36 MB per head at
# B = 10, L = 5, V = 152k in float32), so far more heads only fill memory: K = 1e9 asked for 36 PB.
MAX_K = 64

# Fields of run.yaml, dataset/, decoding, profile/ (and the backend's and pair's sizes). L is checked by
# runners.config.validate itself (0 is allowed only for autoregressive methods).
NUMERIC: tuple[Field, ...] = (
    Field(
        "L",
        int,
        low=0,
        high=MAX_L,
        note="draft tokens per round; 0 only with an autoregressive method",
    ),
    Field("dropmatch.p_drop", float, low=0, high=1, high_open=True),
    # 0 is a valid value for the methods that read no heads (ar, sd, ...): a sweep may cross dropmatch.K=0,5 with
    # them; runners.config.validate refuses it for the methods that read them
    Field(
        "dropmatch.K",
        int,
        low=0,
        high=MAX_K,
        note="MC-dropout heads; 0 only with a method that reads none; the paper's is 5",
    ),
    Field("dropmatch.path", int, low=0, note="which single dropout path decodes"),
    Field("dropmatch.sparse_top_n", int, low=1, nullable=True, note="null = the exact rule"),
    Field(
        "dropmatch.sparse_check_top_n",
        int,
        low=1,
        nullable=True,
        note="null = no check; N = also decide with the sparse top-N variant and trace both (needs trace=true)",
    ),
    Field(
        "dropmatch.audit_share",
        float,
        low=0,
        high=1,
        nullable=True,
        note="share of a sparse run's rounds also decided by the exact rule; 0 or null = no audit",
    ),
    Field("decoding.temperature", float, low=0, note="0 = greedy"),
    Field("decoding.top_p", float, low=0, high=1, low_open=True, note="1 = off"),
    Field("decoding.seed", int, low=0),
    Field(
        "decoding.max_new_tokens",
        int,
        low=1,
        nullable=True,
        note="tokens; null = the profile's cap, else the dataset's or its task's",
    ),
    Field(
        "dataset.limit", int, low=1, nullable=True, note="items; null = the profile's n, else all"
    ),
    Field("dataset.offset", int, low=0, note="items skipped"),
    Field(
        "dataset.max_new_tokens",
        int,
        low=1,
        nullable=True,
        note="tokens; null = the lm-eval task's cap",
    ),
    Field("repeats", int, low=1, nullable=True, note="throughput repeats; null = the profile's"),
    Field("profile.repeats", int, low=1),
    Field("profile.limit.*", int, low=1, nullable=True, note="items"),
    Field("profile.max_new_tokens.*", int, low=1, nullable=True, note="tokens"),
    Field("pair.tensor_parallel_size", int, low=1),
    Field("backend.tensor_parallel_size", int, low=1),
    Field("backend.batch_size", int, low=1, note="samples per generate call"),
    Field("backend.max_model_len", int, low=1, note="tokens"),
    Field("backend.kvcache_space_gib", int, low=1),
    Field("backend.gpu_memory_utilization", float, low=0, high=1, low_open=True),
    Field("backend.n_ctx", int, low=1, note="KV cells per llama.cpp sequence"),
    Field("backend.n_batch", int, low=1, note="tokens per llama_decode call"),
    Field(
        "backend.n_threads",
        int,
        low=1,
        nullable=True,
        note="null = DROPMATCH_THREADS, else every core",
    ),
    Field("backend.kept_prompts", int, low=0, note="prompts kept per llama.cpp context for reuse"),
)
FLOAT_PATHS = frozenset(f.path for f in NUMERIC if f.kind is float)


def _lookup(
    cfg: Mapping[str, Any], parts: list[str], prefix: str = ""
) -> Iterator[tuple[str, Mapping, str]]:
    """``(full path, parent mapping, key)`` for every existing node matching ``parts`` (``*`` = any key)."""
    head, rest = parts[0], parts[1:]
    keys = list(cfg) if head == "*" else [head] if head in cfg else []
    for k in keys:
        path = f"{prefix}{k}"
        if not rest:
            yield path, cfg, k
        elif isinstance(cfg[k], Mapping):
            yield from _lookup(cfg[k], rest, path + ".")


def canonical(cfg: dict, fields: tuple[Field, ...] = NUMERIC) -> dict:
    """Check every field of ``fields`` present in ``cfg`` and store its canonical value, in place.

    Returns ``cfg``. A field absent from ``cfg`` is not an error (a backend without ``batch_size`` ...).

    Raises:
        FieldError: the first invalid field (message: field, value, allowed values).
    """
    for f in fields:
        for path, parent, key in list(_lookup(cfg, f.path.split("."))):
            v = Field(
                path, f.kind, f.low, f.high, f.low_open, f.high_open, f.nullable, f.note
            ).check(parent[key])
            if isinstance(parent, dict):
                parent[key] = v
    return cfg
