"""Fingerprints of records made before the current fingerprint scheme, translated to it.

Records made before scheme 2 hold a scheme-1 fingerprint (all of ``criteria/``, ``runners/backends/``,
``runners/counters.py`` and ``runners/run.py``, hashed with their paths). :data:`LEGACY_FILE` maps each scheme-1
value found in the committed records to the scheme-2 value of the same code, computed at the commit that made
them (``python -m runners.records.fingerprint --legacy <fingerprint>=<commit> ...``), so those records keep their
status. Reading it needs no project code (analysis reads it).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

LEGACY_FILE = Path(__file__).with_name("legacy_decision_codes.json")


@functools.lru_cache(maxsize=1)
def legacy_table() -> dict:
    return json.loads(LEGACY_FILE.read_text()) if LEGACY_FILE.is_file() else {}


def current_value(recorded: str | None, criterion: str | None, backend: str | None) -> str | None:
    """A recorded fingerprint in scheme 2: a scheme-1 value through :data:`LEGACY_FILE` (None if unmapped)."""
    if recorded is None:
        return None
    legacy = legacy_table().get(recorded)
    if legacy is None:
        return recorded
    return legacy.get(f"{criterion}@{backend}")
