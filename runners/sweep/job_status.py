"""A multirun job's status file (``<job output dir>/.dropmatch_status.json``), which
:class:`runners.sweep.callbacks.SweepSummary` writes and reads, and the one status the job itself writes: its
refusal (:func:`write_refused`, called by ``runners.main``, which the callbacks module imports)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hydra.core.hydra_config import HydraConfig

STATUS_FILE = ".dropmatch_status.json"
STARTED = "started"  # written when a job starts, replaced by its end status (on_job_end)


def save_status(out_dir: Path, entry: dict) -> None:
    """Write ``entry`` as the job's status file in ``out_dir`` (made if absent) through a temporary file, so a
    reader never sees a half-written status.

    Raises:
        OSError: the directory or the file cannot be written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f"{STATUS_FILE}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(entry))
    os.replace(tmp, out_dir / STATUS_FILE)


def write_refused(error: str) -> None:
    """In a multirun job that refuses its config once it runs (``runners.main``): its status ``refused`` with the
    error, in place of ``started``, so the sweep's last lines say so instead of asking for a rerun. Nothing outside
    a multirun job."""
    try:
        hc = HydraConfig.get()
    except ValueError:  # not inside a Hydra job
        return
    if not str(hc.mode).endswith("MULTIRUN"):
        return
    out_dir = Path(str(hc.runtime.output_dir))
    try:
        previous = json.loads((out_dir / STATUS_FILE).read_text())
    except (OSError, ValueError):
        previous = {}
    try:
        save_status(out_dir, {**previous, "status": "refused", "error": error[:2000]})
    except OSError:
        pass  # the sweep then counts the job by its record (unreported); the error is on stderr either way
