"""Project paths: the cache directory (models, data) and the results directory.

Both come from the environment or Hydra's ``paths`` group, never from code constants:
``DROPMATCH_CACHE`` (default ``$XDG_CACHE_HOME/dropmatch-bench`` or ``~/.cache/dropmatch-bench``)
and ``DROPMATCH_RESULTS`` (default ``<repo>/results``).
"""

from __future__ import annotations

import os
from pathlib import Path

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
