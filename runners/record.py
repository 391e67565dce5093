"""Run records: ``results/runs/<run_id>/`` with config, meta, an append-only ``samples.jsonl`` and a summary.

Identity: the run id hashes the resolved config without the fields that do not change what is computed
(:data:`IDENTITY_EXCLUDE` at the top level, :data:`IDENTITY_EXCLUDE_ANYWHERE` at any depth: where a model or
data set was read from, not what it is), so the same sweep point run on a laptop or a cluster node, from
any sweep or artefact, is one run. Numbers are hashed in a canonical form, so ``0`` and ``0.0`` are one
run: a field declared in :data:`runners.fields.NUMERIC` as a float hashes as a float
(``decoding.temperature=0`` -> ``0.0``, ``dropmatch.p_drop=0`` -> ``0.0``), every other number with an
integral value as an int (``2.0`` -> ``2``); bools stay bools. This keeps the ids of records made before
the rule (their configs held ``0.0`` / ``1.0`` only in declared float fields). An empty mapping is hashed as
absent (it adds no setting), so declaring an option block with its default ``{}`` (``pair.chat_template_kwargs``)
keeps the ids of runs made before the block existed.

Crash safety (``kill -9`` at any instant loses nothing already reported and duplicates nothing):
each finished sample is one complete JSON line written by a single ``os.write`` on an ``O_APPEND``
descriptor, then fsync'd; the sample counts as reported once ``append`` returns. On open, a torn last
line (a kill mid-write) is cut off. ``config.json``, ``meta.json`` and ``summary.json`` are written to a
temp file, fsync'd and renamed (then the directory is fsync'd). A run directory is locked
(``fcntl.flock``, released by the kernel when the holder dies) while a process writes it, so two
processes never append to the same run; a rerun skips sample ids already present. Readers still keep
only the first line per sample id, so even a record copied together by hand never double-counts.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

# Top-level fields that do not change what a run computes; excluded from the run id.
# ``artefact`` is informational (analysis selects runs by config fields), so artefacts share runs; ``reuse``
# says what to do with a record made by other code (runners.run), not what to compute.
IDENTITY_EXCLUDE = ("hydra", "logger", "paths", "launcher", "progress", "artefact", "reuse")
# Keys excluded at any depth: where a source was found on this machine, not what it is (the pair/dataset
# name, hub id and pinned sha256 stay in the id); and a pinned GGUF's declared ``file_type``, which its sha256
# already fixes (llama.cpp runs record it in ``model_identity``).
IDENTITY_EXCLUDE_ANYWHERE = ("local_path", "file_type")
# Top-level fields of which only these keys count. A profile's caps (``limit``, ``max_new_tokens``,
# ``repeats``, ``artefacts``) are already copied into ``dataset`` / ``decoding`` / ``repeats`` by
# ``runners.run.resolve_run_config``, so editing the cap of one benchmark changes only that benchmark's runs;
# the name stays because tables select runs by profile.
IDENTITY_ONLY = {"profile": ("name",)}
# The resolved weights of the pair (runners.run.resolve_run_config adds it; see identity_of).
MODEL_IDENTITY = "model_identity"


class RunLockedError(RuntimeError):
    """Another live process is writing this run directory."""


def _strip(node: Any, path: str = "") -> Any:
    """Drop :data:`IDENTITY_EXCLUDE_ANYWHERE` keys and put every number in its canonical form."""
    if isinstance(
        node, Mapping
    ):  # an empty mapping (e.g. chat_template_kwargs: {}) is hashed as absent
        return {
            k: _strip(v, f"{path}.{k}" if path else str(k))
            for k, v in node.items()
            if k not in IDENTITY_EXCLUDE_ANYWHERE and not (isinstance(v, Mapping) and not v)
        }
    if isinstance(node, (list, tuple)):
        return [_strip(v, path) for v in node]
    return canonical_number(node, path)


def canonical_number(value: Any, path: str = "") -> Any:
    """The hashed form of a number at ``path`` (see the module docstring); anything else unchanged."""
    from runners.fields import FLOAT_PATHS

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if path in FLOAT_PATHS:
        return float(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def identity_of(cfg: Mapping[str, Any]) -> dict:
    """The part of a resolved config that the run id hashes.

    ``model_identity`` (the resolved weights, :func:`runners.models.identity.model_identity`) counts only where
    the config does not already fix the weights (:func:`runners.models.identity.unfixed`): a local directory,
    a hub revision, a resolved ``auto`` dtype. Runs on different weights get different ids; runs on the
    configured pinned weights keep the ids they had before the identity was recorded.
    """
    out = {}
    for k, v in cfg.items():
        if k in IDENTITY_EXCLUDE:
            continue
        if k == MODEL_IDENTITY:
            from runners.models.identity import unfixed

            v = unfixed(v or {}, cfg.get("pair") or {})
            if not v:
                continue
        if k in IDENTITY_ONLY and isinstance(v, Mapping):
            v = {kk: v[kk] for kk in IDENTITY_ONLY[k] if kk in v}
        out[k] = v
    return _strip(out)


def run_id_of(cfg: Mapping[str, Any]) -> str:
    """Short hash (12 hex) of :func:`identity_of` the resolved config."""
    blob = json.dumps(identity_of(cfg), sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` via temp file + fsync + rename (readers see old or new, never half)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.{socket.gethostname()}")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


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
                f"no file locking on {self.dir} ({e}); do not run the same run twice at once"
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

    def note(self, key: str, entry: Mapping[str, Any]) -> None:
        """Append ``entry`` to the list ``meta.json[key]`` (under the writer lock; e.g. a reuse of a stale run).

        Raises:
            RunLockedError: another process holds the lock.
        """
        fd = self._try_lock()
        try:
            meta = self.read_meta()
            meta.setdefault(key, []).append(dict(entry))
            atomic_write_json(self.dir / "meta.json", meta)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

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
            _fsync_dir(dest.parent)
            _fsync_dir(self.dir.parent)
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
        """Append one sample as one line; durable (fsync'd) when this returns.

        A single ``os.write`` on an ``O_APPEND`` descriptor: a kill leaves either nothing or a prefix of
        the line without its newline, which the next :meth:`open` cuts off.
        """
        data = (json.dumps(sample, sort_keys=True, default=str) + "\n").encode()
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
            _fsync_dir(self.dir)

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
