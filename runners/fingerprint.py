"""Fingerprint of the code that makes a run's decisions, so a record made by other code is not reused silently.

What is hashed: every ``.py`` file of :data:`DECISION_SOURCES` (the acceptance rules and dropout heads in
``criteria/``, the draft-verify loop, output cut, seeding and prompting of ``runners/backends/``, the counters,
and ``runners/run.py``, which builds the rule and the decoding settings), each as its syntax tree without
docstrings (``ast.unparse``), so comments, docstrings and formatting do not count and any change to code does.

Why a source hash and not a declared ``version:`` per method/backend config: a version is bumped by hand and is
forgotten exactly when a change looks harmless (the counter and stop-cut fixes of issue 10 changed tau without
touching a config). The hash cannot be forgotten; its cost is false alarms after refactors that change no
decision, which ``reuse=warn`` (the default, see :mod:`runners.run`) turns into a warning instead of a rerun.
Computed once per process (~20 files, milliseconds).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

from runners.paths import REPO_ROOT

DECISION_SOURCES = ("criteria", "runners/backends", "runners/counters.py", "runners/run.py")


def _code_only(source: str) -> str:
    """``source`` as its syntax tree without docstrings, unparsed (comments and layout gone)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(getattr(body[0], "value", None), ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def source_files(root: Path = REPO_ROOT) -> list[Path]:
    """The files :func:`decision_code` hashes, sorted by path relative to ``root``."""
    files: list[Path] = []
    for entry in DECISION_SOURCES:
        p = root / entry
        files.extend(sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.is_file() else [])
    return sorted(set(files), key=lambda f: f.relative_to(root).as_posix())


def fingerprint(root: Path = REPO_ROOT) -> str:
    """sha256 (hex) over ``<relative path>\\0<code without docstrings>\\n`` of every :func:`source_files` file."""
    h = hashlib.sha256()
    for f in source_files(root):
        h.update(
            f"{f.relative_to(root).as_posix()}\0{_code_only(f.read_text(encoding='utf-8'))}\n".encode()
        )
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def decision_code() -> dict:
    """``{"fingerprint": <64 hex>, "files": <count>, "sources": [...]}`` of this checkout (cached per process)."""
    return {
        "fingerprint": fingerprint(),
        "files": len(source_files()),
        "sources": list(DECISION_SOURCES),
    }
