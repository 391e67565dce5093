"""The tiny random pair (``tests/conftest.py``'s ``tiny_pair_dir``) loaded as a run loads a pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runners.models.loader import load_pair


def load_tiny_pair(pair_dir: Path, dtype: str = "float32") -> Any:
    """The tiny target and draft of ``pair_dir`` (``target/``, ``draft/``) in ``dtype``, from the local path only."""
    spec = lambda role: {"name": role, "local_path": str(pair_dir / role), "order": ["local"]}  # noqa: E731
    return load_pair(
        {"name": "tiny", "dtype": dtype, "target": spec("target"), "draft": spec("draft")}
    )
