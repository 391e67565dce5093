"""Run records: ``results/runs/<run_id>/`` with config, meta, an append-only ``samples.jsonl`` and a summary.

Crash safety: each finished sample is one complete JSON line, written with flush + fsync; on open a torn
last line (a kill mid-write) is dropped. ``summary.json`` and ``meta.json`` are written to a temp file and
renamed. A run directory is locked (``fcntl.flock``) while a process writes it, so two processes never
append to the same run; a rerun skips sample ids already present, so nothing is redone or duplicated.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

# Fields that do not change what a run computes; excluded from the run id.
IDENTITY_EXCLUDE = ("hydra", "logger", "paths", "launcher", "progress")


class RunLockedError(RuntimeError):
    """Another live process is writing this run directory."""


def run_id_of(cfg: Mapping[str, Any]) -> str:
    """Short hash of the resolved config without launcher, logger and output-path fields."""
    ident = {k: v for k, v in cfg.items() if k not in IDENTITY_EXCLUDE}
    blob = json.dumps(ident, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def atomic_write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RunRecord:
    """The on-disk record of one run.

    Args:
        root: ``results/runs``.
        cfg: the resolved run config (plain dict); its hash is the run id.
    """

    def __init__(self, root: Path, cfg: Mapping[str, Any]) -> None:
        self.cfg = dict(cfg)
        self.run_id = run_id_of(self.cfg)
        self.dir = Path(root) / self.run_id
        self.samples_path = self.dir / "samples.jsonl"
        self.summary_path = self.dir / "summary.json"
        self._lock_fd: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self, meta: Mapping[str, Any]) -> None:
        """Create the directory, take the writer lock, write config/meta, repair a torn last line.

        Raises:
            RunLockedError: another process holds the lock.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / ".lock", os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLockedError(f"run {self.run_id} is being written by another process ({self.dir})")
        self._lock_fd = fd
        if not (self.dir / "config.json").exists():
            atomic_write_json(self.dir / "config.json", self.cfg)
        atomic_write_json(self.dir / "meta.json", dict(meta))
        self._repair()

    def close(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "RunRecord":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- samples ---------------------------------------------------------------------------------
    def _repair(self) -> None:
        """Truncate the file after the last complete line (drops a line torn by a kill)."""
        if not self.samples_path.exists():
            return
        data = self.samples_path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep != len(data):
            with open(self.samples_path, "r+b") as f:
                f.truncate(keep)
                f.flush()
                os.fsync(f.fileno())

    def samples(self) -> list[dict]:
        """All complete sample lines (first occurrence per sample id)."""
        return read_samples(self.samples_path)

    def done_ids(self) -> set[str]:
        return {s["sample_id"] for s in self.samples()}

    def append(self, sample: Mapping[str, Any]) -> None:
        line = json.dumps(sample, sort_keys=True, default=str) + "\n"
        with open(self.samples_path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        atomic_write_json(self.summary_path, dict(summary))


def read_samples(path: Path) -> list[dict]:
    """Parse ``samples.jsonl``; ignores a torn last line and duplicate sample ids (first wins)."""
    out, seen = [], set()
    if not Path(path).exists():
        return out
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("sample_id") in seen:
                continue
            seen.add(rec.get("sample_id"))
            out.append(rec)
    return out


def iter_runs(root: Path) -> Iterable[tuple[dict, dict, Path]]:
    """Yield ``(config, summary, run_dir)`` for every run with a summary under ``root``."""
    for d in sorted(Path(root).glob("*/")):
        cfg_p, sum_p = d / "config.json", d / "summary.json"
        if cfg_p.exists() and sum_p.exists():
            yield json.loads(cfg_p.read_text()), json.loads(sum_p.read_text()), d
