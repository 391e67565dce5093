"""The keys a run config may hold, so a key nothing reads is refused instead of changing the run id silently.

Hydra refuses ``dropmatch.pdrop=0.3`` (the key is not in the composed config), but its append syntax
``+dropmatch.pdrop=0.3`` / ``++decoding.temprature=0.7`` adds any key: the run then ignores it, yet the key
enters ``config.json`` and the run id. :func:`unknown_keys` finds such keys and the closest known key
(``difflib``), e.g. ``dropmatch.pdrop -> dropmatch.p_drop``.

The known keys are every key path that ``conf/`` defines (``run.yaml`` and each group's files, under the
group's package: ``conf/pair/*.yaml`` under ``pair``, ``@package _global_`` files at the top, ``autojudge``
under ``method.judge``), the numeric fields of :data:`runners.config.numeric_fields.NUMERIC`, and the few
optional keys the code reads that no file sets (:data:`OPTIONAL`). Below :data:`OPEN` every key is allowed:
mappings whose keys are the user's (a rule's own settings, which the rule checks; chat-template variables;
per-dataset caps).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from runners.config.numeric_fields import NUMERIC
from runners.paths import REPO_ROOT

CONF = REPO_ROOT / "conf"

# Read by the code when set; no config file sets them.
OPTIONAL = (
    "pair.target.revision",  # a hub model's commit (runners.models.identity)
    "pair.draft.revision",
)
# Added by resolution itself (a resolved config resolved again, e.g. Fig. 3's sources): accepted, never suggested.
RESOLVED = ("dropmatch.unused", "model_identity")
# Mappings whose keys are free: method.kwargs (checked against the rule's signature), chat-template
# variables, per-dataset / per-backend profile entries, the Auto-Judge artefact spec, model source specs, and
# the weights' identity that resolution adds (its shape is the source's).
OPEN = (
    "method.kwargs",
    "method.judge",
    "pair.chat_template_kwargs",
    "pair.target.pinned",
    "pair.draft.pinned",
    "pair.target.built",
    "pair.draft.built",
    "profile.limit",
    "profile.max_new_tokens",
    "profile.dropmatch",
    "profile.artefacts",
    "hydra",
    "model_identity",
)
# Groups whose files sit under another package than their folder name (``defaults: - /autojudge@judge``).
PACKAGE = {"autojudge": "method.judge", "experiment": "", "local": ""}


def _paths(node: Any, prefix: str, top: bool = False) -> Iterator[str]:
    """Every key path of a YAML mapping under ``prefix``, parents included (``a``, ``a.b``, ...); a file's own
    ``defaults`` list (``top``) is Hydra's, not a key."""
    if not isinstance(node, Mapping):
        return
    for k, v in node.items():
        if top and k == "defaults":
            continue
        path = f"{prefix}.{k}" if prefix else str(k)
        yield path
        yield from _paths(v, path)


def _package(path: Path) -> str:
    """The package of a config file: its group's path, or the top for ``# @package _global_``."""
    head = path.read_text(encoding="utf-8").lstrip().splitlines()[:1]
    if head and head[0].replace(" ", "") == "#@package_global_":
        return ""
    group = path.relative_to(CONF).parts[0]
    return PACKAGE.get(group, group)


# Configs that never compose into a run: Hydra's own, and the judging step's (conf/judging.yaml and its judge
# group compose `python -m runners.judging`, a separate config; in a decode run their keys would be read by nothing).
NOT_RUN_CONFIGS = ("hydra", "judging.yaml", "judge")


@functools.cache
def known_paths() -> frozenset[str]:
    """Every key path a run config may hold (module docstring)."""
    out: set[str] = set(OPTIONAL) | set(RESOLVED)
    for f in sorted(CONF.rglob("*.yaml")):
        if f.relative_to(CONF).parts[0] in NOT_RUN_CONFIGS:
            continue
        pkg = "" if f.parent == CONF else _package(f)
        parts = pkg.split(".") if pkg else []
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        out.update(_paths(yaml.safe_load(f.read_text(encoding="utf-8")) or {}, pkg, top=True))
    for field in NUMERIC:
        parts = field.path.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if "*" not in parts[:i])
    return frozenset(out)


def _open(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in OPEN)


def unknown_keys(cfg: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``(key path, closest known key or None)`` for every key of ``cfg`` no config file or reader knows."""
    known = known_paths()
    shown = known - set(RESOLVED)
    out: list[tuple[str, str | None]] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if _open(path):
                continue
            if path not in known:
                siblings = (
                    sorted(p for p in shown if p.rsplit(".", 1)[0] == prefix) if prefix else []
                )
                pool = siblings or sorted(p for p in shown if "." not in p)
                close = difflib.get_close_matches(path, pool, n=1, cutoff=0.6)
                out.append((path, close[0] if close else None))
            elif isinstance(v, Mapping):
                walk(v, path)

    walk(cfg, "")
    return out


def unknown_key_message(path: str, close: str | None) -> str:
    """The error for one unknown key (:func:`unknown_keys`)."""
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    keys = sorted(
        p.rsplit(".", 1)[-1]
        for p in known_paths() - set(RESOLVED)
        if (p.rsplit(".", 1)[0] if "." in p else "") == parent
    )
    hint = f"did you mean {close}? " if close else ""
    where = f"under {parent}" if parent else "at the top level"
    return (
        f"{path} is not a config key (nothing reads it; added with +{path}=...?); {hint}"
        f"allowed {where}: {', '.join(keys)}"
    )
