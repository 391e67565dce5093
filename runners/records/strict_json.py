"""Rewrite JSON / JSON-lines files holding bare ``NaN`` / ``Infinity`` as strict JSON (those values as ``null``).

Records written before :mod:`runners.records.io` wrote strict JSON hold Python's ``NaN`` (e.g. ``quality/accuracy``
of an unscored run, a per-sample ``correct`` of ``scorer=none``), which jq, JavaScript, Go and strict JSON readers
refuse. This rewrites such files in place and changes nothing else: a file (a JSON-lines file: each line) is
rewritten only when ``json.dumps`` of its parsed value reproduces its text byte for byte in some layout (indent,
separators, ``ensure_ascii``), and is then written in that layout with each non-finite number as ``null``; a file
in another layout is reported and left as it is. Our readers read both forms alike (``null`` where a number is
expected is NaN: :func:`runners.records.io.get_number`); run ids hash the config, never these values.

Usage: ``python -m runners.records.strict_json [--check] [PATH ...]`` (default: the results directory). Exit 0:
every file is strict JSON (after the rewrite); 1: ``--check`` found files to rewrite, or a file could not be
rewritten.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from runners.paths import results_dir
from runners.records.io import atomic_write_text, dumps

SUFFIXES = (".json", ".jsonl")
# layouts json.dumps writes: the records' (indent 2, keys sorted: key order is kept as parsed), JSON lines,
# the manifests' indent 1, and the usual others
LAYOUTS: tuple[dict[str, Any], ...] = tuple(
    {"indent": indent, "ensure_ascii": ascii_only, **extra}
    for indent in (2, None, 1, 4)
    for ascii_only in (True, False)
    for extra in ({}, {"separators": (",", ":")})
    if not (indent is not None and extra)
)


class NotStrict(ValueError):
    """A bare ``NaN``, ``Infinity`` or ``-Infinity`` in a JSON text."""


def _refuse(name: str) -> Any:
    raise NotStrict(name)


def loads_strict(text: str) -> Any:
    """``json.loads`` that refuses ``NaN`` / ``Infinity`` / ``-Infinity`` (what a strict JSON parser refuses).

    Raises:
        NotStrict: such a constant. ValueError: not JSON at all.
    """
    return json.loads(text, parse_constant=_refuse)


def has_nonfinite(text: str) -> bool:
    """Whether the JSON value ``text`` holds a bare ``NaN`` / ``Infinity`` (False when it is not JSON at all: a
    torn last line of a record is the reader's business, not this module's)."""
    try:
        loads_strict(text)
    except NotStrict:
        return True
    except ValueError:
        return False
    return False


def strict_text(text: str) -> str | None:
    """``text`` (one JSON value, maybe ending in whitespace) with its non-finite numbers as ``null``, else
    unchanged; None when no layout of ``json.dumps`` reproduces it (then nothing can be rewritten safely)."""
    body = text.rstrip()
    tail = text[len(body) :]
    value = json.loads(body)
    for layout in LAYOUTS:
        if json.dumps(value, **layout) == body:
            return dumps(value, **layout) + tail
    return None


@contextlib.contextmanager
def _record_lock(d: Path) -> Iterator[bool]:
    """Hold the writer lock of the run directory ``d`` (its ``.lock``, :class:`runners.records.record.RunRecord`)
    if it has one; yields False when a live process holds it (that record is being written)."""
    if not (d / ".lock").is_file():
        yield True
        return
    fd = os.open(d / ".lock", os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def rewrite(path: Path, check: bool = False) -> str | None:
    """Make ``path`` strict JSON in place (``check``: only look). Returns what happened, or None when the file was
    strict already: ``"rewritten"``, ``"to rewrite"`` (``check``), ``"layout not reproduced: ..."`` or
    ``"being written by another process"`` (a run's record under its writer lock: left as it is)."""
    with _record_lock(path.parent) as free:
        if not free:
            return "being written by another process"
        return _rewrite(path, check)


def _rewrite(path: Path, check: bool) -> str | None:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        parts = text.split("\n")  # (not splitlines: a string may hold U+2028 when not ensure_ascii)
        if not any(has_nonfinite(p) for p in parts):
            return None
        new = [strict_text(p) if has_nonfinite(p) else p for p in parts]
        bad = [n for n, p in enumerate(new, start=1) if p is None]
        if bad:
            return f"layout not reproduced: line {bad[0]} ({len(bad)} lines)"
        out = "\n".join(p for p in new if p is not None)
    else:
        if not has_nonfinite(text):
            return None
        out = strict_text(text)
        if out is None:
            return "layout not reproduced"
    if check:
        return "to rewrite"
    atomic_write_text(path, out)
    return "rewritten"


def files_under(paths: Iterable[Path]) -> list[Path]:
    """The ``.json`` / ``.jsonl`` files at or under ``paths``, sorted, hidden (temp) files left out."""
    out = set()
    for p in paths:
        if p.is_file():
            out.add(p)
        elif p.is_dir():
            out.update(
                f
                for f in p.rglob("*")
                if f.suffix in SUFFIXES and f.is_file() and not f.name.startswith(".")
            )
    return sorted(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m runners.records.strict_json", description=__doc__.split("\n")[0]
    )
    p.add_argument("paths", nargs="*", type=Path, help="files or directories (default: results/)")
    p.add_argument("--check", action="store_true", help="only list the files to rewrite")
    args = p.parse_args(argv)
    if not args.paths:
        args.paths = [results_dir()]
    counts: dict[str, int] = {}
    failed = False
    for f in files_under(args.paths):
        try:
            what = rewrite(f, check=args.check)
        except (OSError, UnicodeDecodeError) as e:
            what = f"not read ({e})"
        if what is None:
            continue
        kind = what.split(":")[0].split(" (")[0]
        counts[kind] = counts.get(kind, 0) + 1
        failed |= what != "rewritten"
        print(f"{f}: {what}")
    print(
        ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
        or "every file is strict JSON"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
