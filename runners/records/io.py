"""File helpers of the records: strict JSON (no NaN / Infinity), atomic JSON writes, directory fsync, file sha256.

Every JSON or JSON-lines file this project writes is strict JSON (RFC 8259), so jq, JavaScript, Go and pandas'
strict readers read it: a non-finite float (NaN, +-Infinity, numpy's too) is written as ``null`` (:func:`strict`,
:func:`dumps`), and ``allow_nan=False`` makes any value that slips past raise instead of writing invalid JSON.
A reader meets ``null`` where a number is missing (not scored, no rate) and treats it as NaN
(:func:`get_number`). Older records hold a bare ``NaN`` there; ``json.loads`` still reads them, and
``python -m runners.records.strict_json`` rewrites them in place (:mod:`runners.records.strict_json`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def strict(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None``, inside dicts, lists and tuples at any depth.

    numpy scalars and arrays become Python numbers and lists first (a ``float32`` NaN too); dict key order is
    kept; anything else (strings, ints, objects a writer's ``default`` turns into text) is returned as is.
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    np = sys.modules.get("numpy")  # numpy values exist only where numpy was imported
    if np is not None and isinstance(obj, (np.generic, np.ndarray)):
        return strict(obj.tolist())
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` of :func:`strict` ``(obj)`` with ``allow_nan=False``: strict JSON, non-finite floats as null.

    Raises:
        ValueError: a non-finite float remains (e.g. a float dict key).
    """
    return json.dumps(strict(obj), allow_nan=False, **kwargs)


def get_number(record: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``record[key]`` for a key that holds a number: present as ``null`` (how a non-finite float is written)
    it reads as NaN, as the record's writer had it; absent it is ``default``."""
    value = record.get(key, default)
    return math.nan if key in record and value is None else value


def fsync_dir(path: Path) -> None:
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


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via temp file + fsync + rename (readers see old or new, never half)."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.{socket.gethostname()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as strict JSON (:func:`dumps`; indented, keys sorted) to ``path`` atomically
    (:func:`atomic_write_text`)."""
    atomic_write_text(path, dumps(obj, indent=2, sort_keys=True, default=str))


def sha256_file(path: Path) -> str:
    """sha256 (hex) of a file's bytes, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
