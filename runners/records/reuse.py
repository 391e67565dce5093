"""What a rerun does with a record that was made by other decision code (config ``reuse: warn | strict``).

Every session that writes to a run record stores :func:`runners.records.fingerprint.decision_code` in ``meta.json``
(``decision_code``, also per entry of ``sessions``), and the summary stores the fingerprints of all of them
(``decision_codes``) plus the one that wrote it (``decision_code``). A record is *stale* when any of its sessions
ran other code than this checkout (or predates fingerprints). A stale record is never reused silently:

- ``reuse=warn`` (default): a warning ``[run <id>] ... finished by other decision code ...`` (logged at WARNING, so
  on stderr); a finished run is returned as is and its record is not touched (rebuilding a table from committed
  records leaves them as committed; the tables' footers print the records' fingerprints); an unfinished one
  resumes (its sessions then show both codes);
- ``reuse=strict``: the record is moved to ``<results>/stale/<run id>-<date>/`` (kept, out of ``runs/``, so no
  table reads it) and the run is made again from its first sample.

Why ``warn`` is the default: resuming is the common case after a code change (a sweep stopped by a bug is fixed
and rerun: strict would redo every finished run of it), and the fingerprint also moves on refactors that change
no decision. Rebuilding results after a change that does alter decisions: ``reuse=strict``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from runners.paths import results_dir
from runners.records.fingerprint import run_decision_code
from runners.records.legacy_fingerprints import current_value

_logger = logging.getLogger(__name__)

POLICIES = ("warn", "strict")
_WARNED: set[str] = set()  # run ids whose stale reuse this process has reported


def recorded_codes(record: Any) -> list[str | None]:
    """Fingerprints of every session of ``record`` in the current scheme (None for a session from before
    fingerprints or with an unmapped scheme-1 value: :func:`runners.records.legacy_fingerprints.current_value`), sorted."""
    meta = record.read_meta()
    sessions = meta.get("sessions") or ([meta] if meta else [])
    method, backend = dict(record.cfg.get("method") or {}), dict(record.cfg.get("backend") or {})
    return sorted(
        {
            current_value(
                (s.get("decision_code") or {}).get("fingerprint"),
                method.get("criterion"),
                backend.get("name"),
            )
            for s in sessions
        },
        key=lambda x: (x is None, x),
    )


def stale_codes(record: Any) -> list[str | None]:
    """The recorded fingerprints when they are not all this checkout's (empty: current or no record yet)."""
    codes = recorded_codes(record)
    return codes if codes and codes != [run_decision_code(record.cfg)["fingerprint"]] else []


def will_reuse(record: Any, policy: str) -> bool:
    """True if :func:`run` will return ``record``'s finished summary without running (no model loads)."""
    return record.existing_summary() is not None and (policy != "strict" or not stale_codes(record))


def _short(codes: list[str | None]) -> str:
    return ", ".join((c or "unrecorded")[:12] for c in codes)


def check(
    record: Any,
    policy: str,
    finished: dict | None,
    tag: str,
    warn: Callable[[str], None] = _logger.warning,
) -> dict | None:
    """Apply ``policy`` to a stale ``record`` before the run; returns the summary to reuse, or None to run.

    ``finished``: the record's complete summary for this sample count (None: not finished). A current record
    is reused when finished, resumed otherwise, without a word; a stale one is reported through ``warn``
    (default: this module's logger at WARNING, which the console sends to stderr with the other warnings).
    """
    stale = stale_codes(record)
    if not stale:
        return finished
    now = run_decision_code(record.cfg)["fingerprint"]
    what = (
        f"[run {record.run_id}] {tag}: {'finished' if finished else 'started'} by other decision code "
        f"({_short(stale)}; this checkout: {now[:12]})"
    )
    if policy == "strict":
        when = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        dest = record.retire(results_dir() / "stale" / f"{record.run_id}-{when}")
        warn(f"{what}; moved to {dest} and run again (reuse=strict)")
        return None
    if finished is None:
        warn(f"{what}; resuming it with this code (reuse=warn; reuse=strict starts it again)")
        return None
    if (
        record.run_id not in _WARNED
    ):  # sweep points that share a run (SD beside a p_drop sweep) say it once
        _WARNED.add(record.run_id)
        warn(f"{what}; reused as is (reuse=warn; rerun with reuse=strict to recompute)")
    return {**finished, "stale_decision_code": True}
