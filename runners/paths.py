"""Project paths: the cache directory (models, data) and the results directory.

Both come from the environment or Hydra's ``paths`` group, never from code constants:
``DROPMATCH_CACHE`` (default ``$XDG_CACHE_HOME/dropmatch-bench`` or ``~/.cache/dropmatch-bench``)
and ``DROPMATCH_RESULTS`` (default ``<repo>/results``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from runners.config.isa import isa_cap

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Cache for prepared models and pinned datasets."""
    env = os.environ.get("DROPMATCH_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dropmatch-bench"


def results_dir() -> Path:
    """Root of ``runs/`` and the per-artefact folders."""
    return Path(os.environ.get("DROPMATCH_RESULTS") or REPO_ROOT / "results").expanduser()


def cpu_threads() -> int:
    """CPU threads per process: ``DROPMATCH_THREADS``, else (unset or empty) every core. The value is checked
    before anything loads (:func:`directory_env_errors`)."""
    threads = (os.environ.get("DROPMATCH_THREADS") or "").strip()
    return int(threads) if threads else os.cpu_count() or 1


def directory_env_errors() -> list[str]:
    """Why ``DROPMATCH_RESULTS`` / ``DROPMATCH_CACHE`` cannot be used as directories (empty: both can).

    A path can be used when it is a directory or its nearest existing parent is one (it is created on first
    write); the results must also be writable there (a cache may be read-only: what it lacks is then not
    remembered). Checked before anything loads, so a path naming a file is an error naming the variable, not a
    ``NotADirectoryError`` from deep inside a run.
    """
    out = []
    threads = (
        os.environ.get("DROPMATCH_THREADS") or ""
    ).strip()  # set but empty: unset (every core)
    if threads and not (threads.isdigit() and int(threads) >= 1):
        out.append(
            f"DROPMATCH_THREADS={threads} is invalid; allowed: an integer >= 1 (CPU threads)"
        )
    try:
        isa_cap()
    except ValueError as e:
        out.append(str(e))
    for var, path in (("DROPMATCH_RESULTS", results_dir()), ("DROPMATCH_CACHE", cache_dir())):
        why = not_a_directory(path, writable=var == "DROPMATCH_RESULTS")
        if why:
            shown = os.environ.get(var) or str(path)
            out.append(
                f"{var}={shown} is invalid: {why}; allowed: a directory (created if missing) "
                f"{'holding runs/ and the artefacts' if var == 'DROPMATCH_RESULTS' else 'for models and data'}"
            )
    return out


def not_a_directory(path: Path, writable: bool) -> str | None:
    """Why ``path`` cannot be used as a directory (None: it can): it or its nearest existing parent is a file,
    or (``writable``) that parent is not writable, or the path is missing and its parent refuses a new directory.
    A missing path whose nearest existing parent is a directory that takes one can: it is created on first
    write."""
    p = path.absolute()
    for parent in (p, *p.parents):
        if parent.exists():
            if not parent.is_dir():
                return (
                    f"{parent} is a file" if parent == p else f"{parent} (a parent of it) is a file"
                )
            if writable and not os.access(parent, os.W_OK):
                return f"{parent} is not writable"
            if (
                parent != p
            ):  # missing: made on first write, so it must be creatable, read-only cache or not
                return _cannot_create_in(parent)
            return None
    return None


def _cannot_create_in(parent: Path) -> str | None:
    """Why no directory can be made in ``parent`` (None: one can), found by making one and removing it: a
    permission check passes for root where the filesystem refuses (``/proc``, ``/sys``)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dropmatch-check-", dir=parent))
    except OSError as e:
        return f"no directory can be created in {parent} ({e.strerror or e})"
    return None
