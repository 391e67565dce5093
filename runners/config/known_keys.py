"""The keys a run config may hold, so a key nothing reads is refused instead of changing the run id silently.

A plain ``dropmatch.pdrop=0.3`` is refused from the command line before Hydra starts
(:mod:`runners.config.overrides`, with :func:`closest_key`), but Hydra's append syntax ``+dropmatch.pdrop=0.3`` /
``++decoding.temprature=0.7`` adds any key: the run would then ignore it, yet the key enters ``config.json`` and
the run id. :func:`unknown_keys` finds such keys in the composed config and the closest known key, e.g.
``dropmatch.pdrop -> dropmatch.p_drop``.

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
import inspect
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

import criteria.rules  # noqa: F401  (fills CRITERIA)
from criteria.registry import CRITERIA
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


def is_open(path: str) -> bool:
    """True if ``path`` lies in one of the :data:`OPEN` mappings (its keys are the user's)."""
    return any(path == p or path.startswith(p + ".") for p in OPEN)


@functools.cache
def option_paths(group: str, option: str) -> frozenset[str]:
    """Every key path the file ``conf/<group>/<option>.yaml`` defines, relative to its package (``n_ctx``,
    ``chat_template_kwargs.enable_thinking``); none when unreadable."""
    try:
        data = yaml.safe_load((CONF / group / f"{option}.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return frozenset()
    return frozenset(_paths(data, "", top=True))


@functools.cache
def rule_kwarg_names() -> frozenset[str]:
    """The settings some acceptance rule takes (its constructor's keyword parameters): the keys a user sets as
    ``method.kwargs.<name>`` (checked against the chosen rule's signature at validation)."""
    names: set[str] = set()
    for rule in CRITERIA.names():
        for p in inspect.signature(CRITERIA.get(rule).__init__).parameters.values():
            if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                names.add(p.name)
    return frozenset(names)


def closest_key(path: str) -> str | None:
    """The known key an unknown ``path`` most likely meant. When its last component is a rule's setting
    (``method.entropy_threshold``): a key of that name outside ``method.kwargs`` (``dropmatch.majority``, which
    the DropMatch rules read from there), else ``method.kwargs.<name>``. Otherwise the closest key under the same
    parent (``difflib``), else the closest top-level key; None when nothing is close."""
    shown = known_paths() - set(RESOLVED)
    last = path.rsplit(".", 1)[-1]
    if last in rule_kwarg_names():
        same = sorted(
            p
            for p in shown
            if p.rsplit(".", 1)[-1] == last
            and not is_open(p)
            and not p.startswith("method.kwargs.")
        )
        return same[0] if same else f"method.kwargs.{last}"
    prefix = path.rsplit(".", 1)[0] if "." in path else ""
    siblings = sorted(p for p in shown if p.rsplit(".", 1)[0] == prefix) if prefix else []
    # a misspelt parent (dropmach.p_drop): the key under its closest known parent
    if prefix and not siblings:
        parents = sorted({p.rsplit(".", 1)[0] for p in shown if "." in p})
        near = difflib.get_close_matches(prefix, parents, n=1, cutoff=0.6)
        if near:
            under = sorted(p for p in shown if p.rsplit(".", 1)[0] == near[0])
            close = difflib.get_close_matches(f"{near[0]}.{last}", under, n=1, cutoff=0.6)
            return close[0] if close else near[0]
    pool = siblings or sorted(p for p in shown if "." not in p)
    close = difflib.get_close_matches(path, pool, n=1, cutoff=0.6)
    return close[0] if close else None


def is_known(path: str) -> bool:
    """True if a run config may hold ``path`` (a known key, or one under an :data:`OPEN` mapping)."""
    return is_open(path) or path in known_paths()


def unknown_keys(cfg: Mapping[str, Any]) -> list[tuple[str, str | None]]:
    """``(key path, closest known key or None)`` for every key of ``cfg`` no config file or reader knows."""
    out: list[tuple[str, str | None]] = []

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if is_open(path):
                continue
            if path not in known_paths():
                out.append((path, closest_key(path)))
            elif isinstance(v, Mapping):
                walk(v, path)

    walk(cfg, "")
    return out


def unknown_key_message(path: str, close: str | None, added: bool = True) -> str:
    """The error for one unknown key (:func:`unknown_keys`); ``added``: the key was added with Hydra's ``+``
    (the message asks whether that was meant), else it was set as an existing key."""
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    keys = _keys_under(parent)
    if not keys and close is not None:  # no such parent: the keys where the closest key lives
        parent = close.rsplit(".", 1)[0] if "." in close else ""
        keys = _keys_under(parent)
    if not keys:  # nothing close either: the top level's keys
        parent, keys = "", _keys_under("")
    hint = f"did you mean {close}? " if close else ""
    where = f"under {parent}" if parent else "at the top level"
    how = f"nothing reads it; added with +{path}=...?" if added else "nothing reads it"
    return f"{path} is not a config key ({how}); {hint}allowed {where}: {', '.join(keys)}"


def _keys_under(parent: str) -> list[str]:
    """The known keys directly under ``parent`` (``""``: the top level), by their last part."""
    return sorted(
        p.rsplit(".", 1)[-1]
        for p in known_paths() - set(RESOLVED)
        if (p.rsplit(".", 1)[0] if "." in p else "") == parent
    )
