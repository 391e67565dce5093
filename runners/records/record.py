"""Run records: ``results/runs/<run_id>/`` with config, meta, an append-only ``samples.jsonl`` and a summary.

The run id is :func:`runners.records.run_id.run_id_of` the resolved config.

Crash safety (``kill -9`` at any instant loses nothing already reported and duplicates nothing):
each finished sample is one complete JSON line written by a single ``os.write`` on an ``O_APPEND``
descriptor, then fsync'd; the sample counts as reported once ``append`` returns. On open, a torn last
line (a kill mid-write) is cut off. ``config.json``, ``meta.json`` and ``summary.json`` are written to a
temp file, fsync'd and renamed (then the directory is fsync'd). A run directory is locked
(``fcntl.flock``, released by the kernel when the holder dies) while a process writes it, so two
processes never append to the same run; a rerun skips sample ids already present. Every line is read
through :func:`runners.records.schema.read_samples` (the one reader): checked against the record's line
schema, the first line per sample id kept (a record copied together by hand never double-counts), a torn
last line dropped; any other damage raises :class:`~runners.records.schema.RecordError` naming the file, the
line and the field, before a run is skipped as finished or resumed.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from runners.records.io import atomic_write_json, dumps, fsync_dir
from runners.records.run_id import run_id_of
from runners.records.schema import RecordError, line_schema, read_json_object, read_samples

__all__ = ["RecordError", "RunLockedError", "RunRecord", "iter_runs", "read_samples"]

_logger = logging.getLogger(__name__)


class RunLockedError(RuntimeError):
    """Another live process is writing this run directory."""


class RunRecord:
    """The on-disk record of one run.

    Args:
        root: ``results/runs`` (or another root, e.g. ``results/autojudge/mining``).
        cfg: the resolved run config (plain dict); its hash is the run id.
        kind: what log lines call it (``[run <id>] ...``, ``[mine <id>] ...``).
    """

    def __init__(self, root: Path, cfg: Mapping[str, Any], kind: str = "run") -> None:
        self.cfg = dict(cfg)
        self.kind = kind
        self.run_id = run_id_of(self.cfg)
        self.dir = Path(root) / self.run_id
        self.samples_path = self.dir / "samples.jsonl"
        self.summary_path = self.dir / "summary.json"
        self._lock_fd: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self, meta: Mapping[str, Any]) -> None:
        """Create the directory, take the writer lock, write config/meta, repair a torn last line.

        ``meta.json`` keeps the provenance of the session that started the run; every later session
        (a resume) is appended to its ``sessions`` list with the number of samples already done.

        Raises:
            RunLockedError: another process holds the lock.
        """
        fd: int | None
        try:
            fd = self._try_lock()
        except RunLockedError:
            holder = (self.dir / ".lock").read_text().strip() or "unknown"
            raise RunLockedError(
                f"run {self.run_id} is being written by another process ({holder}; {self.dir})"
            ) from None
        except (
            OSError
        ) as e:  # e.g. Lustre mounted without -o flock: no locking, rely on first-line-wins readers
            warnings.warn(
                f"no file locking on {self.dir} ({e}); do not run the same run twice at once",
                stacklevel=2,
            )
            fd = None
        self._lock_fd = fd
        if fd is not None:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        if not (self.dir / "config.json").exists():
            atomic_write_json(self.dir / "config.json", self.cfg)
        self._repair()
        session = {
            **dict(meta),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "num_done_at_start": len(self.done_ids()),
        }
        meta_path = self.dir / "meta.json"
        try:
            old = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            old = None
        if old is None:
            atomic_write_json(meta_path, {**session, "sessions": [session]})
        else:
            old.setdefault("sessions", []).append(session)
            atomic_write_json(meta_path, old)

    def open_or_skip(
        self,
        meta: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
        *,
        num_expected: int,
        tag: str,
        log: Callable[[str], None],
        reuse: Callable[[dict | None], dict | None] | None = None,
    ) -> dict | None:
        """Open the record for this session, or return why there is nothing to do here.

        Call it inside ``with record:`` (which releases the lock). Runs, measurements and Auto-Judge mining all
        start this way.

        Args:
            meta: what ``meta.json`` keeps of this session, or a function making it (called only on opening).
            num_expected: items a finished record has; a record finished with another count continues.
            tag: what the log lines say after ``[<kind> <run id>]``.
            log: where those lines go.
            reuse: applied to the finished summary (None: unfinished) first; returns the summary to reuse or
                None to run (a decode run's policy for records of other decision code, :mod:`runners.records.reuse`).

        Returns:
            None when the caller goes on writing (the record is open and locked); else the stored summary of a
            finished run, or ``{"run_id", "complete": False, "running_elsewhere": True}`` when another live
            process holds the record (that process finishes it). A finished record holding fewer lines than its
            summary counts (lines lost after it was written) is resumed.

        Raises:
            runners.records.schema.RecordError: a line of the record breaks its schema (file, line, field), before
                anything is skipped, opened or decoded.
        """
        head = f"[{self.kind} {self.run_id}] {tag}"
        finished = self.finished(num_expected)
        done = (
            self.samples()
        )  # every line checked (RecordError) before the record is skipped or resumed
        reported = finished.get("num_samples") if finished is not None else None
        if (
            isinstance(reported, int) and len(done) < reported
        ):  # lines lost after the summary: resume
            log(
                f"{head}: summary.json counts {reported} samples but {self.samples_path} holds "
                f"{len(done)} complete lines; the missing ones are decoded again"
            )
            finished = None
        if reuse is not None:
            finished = reuse(finished)
        if finished is not None:
            if not finished.get("stale_decision_code"):  # (reuse said so itself)
                log(f"{head}: finished earlier, skipped ({self.dir})")
            return finished
        try:
            self.open(meta() if callable(meta) else meta)
        except (
            RunLockedError
        ) as e:  # e.g. two points of one parallel sweep are one run (AR at L=5, 10)
            log(f"{head}: skipped here, {e}; that process finishes it")
            return {"run_id": self.run_id, "complete": False, "running_elsewhere": True}
        return None

    def finished(self, num_expected: int) -> dict | None:
        """The stored summary if the run finished with ``num_expected`` items, else None."""
        summary = self.existing_summary()
        return (
            summary if summary is not None and summary.get("num_expected") == num_expected else None
        )

    def read_meta(self) -> dict:
        """``meta.json`` ({} when absent or unreadable). Reads without the lock."""
        try:
            return json.loads((self.dir / "meta.json").read_text())
        except (OSError, ValueError):
            return {}

    def _try_lock(self) -> int:
        """Take the writer lock without waiting; returns its descriptor.

        Raises:
            RunLockedError: another process holds it.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / ".lock", os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLockedError(
                    f"run {self.run_id} is being written by another process ({self.dir})"
                ) from None
            raise
        return fd

    def retire(self, dest: Path) -> Path:
        """Move the whole record to ``dest`` (kept, never deleted; out of ``runs/``, so no table reads it), so the
        run starts again from nothing. Returns ``dest``.

        Raises:
            RunLockedError: another process holds the lock (nothing is moved).
        """
        fd = self._try_lock()
        try:
            dest = Path(dest)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(self.dir, dest)
            fsync_dir(dest.parent)
            fsync_dir(self.dir.parent)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        return dest

    def close(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def existing_summary(self) -> dict | None:
        """The stored summary if the run is finished (``complete``), else None. Reads without the lock."""
        try:
            summary = json.loads(self.summary_path.read_text())
        except (OSError, ValueError):
            return None
        return summary if summary.get("complete") else None

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- samples ---------------------------------------------------------------------------------
    def _repair(self) -> None:
        """Truncate the file after the last complete line (drops a line torn by a kill), and say so on the log (the
        torn line's sample is decoded again)."""
        if not self.samples_path.exists():
            return
        data = self.samples_path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            with open(self.samples_path, "r+b") as f:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())
            _logger.warning(
                "[%s %s] dropped a torn last line of samples.jsonl (%d bytes, a write cut by a kill): its sample "
                "is decoded again",
                self.kind,
                self.run_id,
                len(data) - keep,
            )

    def samples(self) -> list[dict]:
        """All complete sample lines (first occurrence per sample id), checked against the record's schema.

        Raises:
            runners.records.schema.RecordError: a line breaks the schema.
        """
        return read_samples(self.samples_path, line_schema(self.cfg))

    def done_ids(self) -> set[str]:
        return {s["sample_id"] for s in self.samples()}

    def append(self, sample: Mapping[str, Any]) -> None:
        """Append one sample as one line; durable (fsync'd) when this returns.

        A single ``os.write`` on an ``O_APPEND`` descriptor: a kill leaves either nothing or a prefix of
        the line without its newline, which the next :meth:`open` cuts off.
        """
        # strict JSON: a non-finite number is written as null (runners.records.io)
        data = (dumps(sample, sort_keys=True, default=str) + "\n").encode()
        created = not self.samples_path.exists()
        fd = os.open(self.samples_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # regular files write everything at once; loop in case of a short write
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(self.dir)

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        atomic_write_json(self.summary_path, dict(summary))


def iter_runs(root: Path) -> Iterable[tuple[dict, dict, Path]]:
    """Yield ``(config, summary, run_dir)`` for every run with a summary under ``root``.

    Raises:
        RecordError: a ``config.json`` or ``summary.json`` that is not a JSON object (the file and why).
    """
    for d in sorted(Path(root).glob("*/")):
        cfg_p, sum_p = d / "config.json", d / "summary.json"
        if cfg_p.exists() and sum_p.exists():
            yield read_json_object(cfg_p), read_json_object(sum_p), d
