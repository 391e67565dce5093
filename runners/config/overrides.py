"""The command line's overrides checked before Hydra composes anything, so a typo exits 2 with the field and the
allowed values instead of Hydra's error text (exit 1) and writes nothing.

Hydra refuses ``dropmatch.pdrop=0.3`` ("Key 'pdrop' is not in struct") and ``dataset=gsm8kk`` ("Could not find
'dataset/gsm8kk'"), but with its own wording, exit status 1 and, for a single run, after it chose the run's output
directory. :func:`check_overrides` parses the command line as Hydra does (its argument parser and
:class:`~hydra.core.override_parser.overrides_parser.OverridesParser`) and refuses:

- a plain ``key=value`` (no ``+`` / ``++`` / ``~``) whose key no config defines (:mod:`runners.config.known_keys`;
  keys under its ``OPEN`` mappings, e.g. ``method.kwargs.<name>``, are free), with the closest key;
- a group selection (``dataset=gsm8kk``, a sweep ``dataset=gsm8k,ifevl``, ``autojudge@method.judge=x``) naming an
  option without a file ``conf/<group>/<option>.yaml``, with the group's options and the closest one.

Left to Hydra and to validation after composition: Hydra's flags and ``hydra.*`` / ``hydra/...`` overrides,
``+``/``++`` keys (:func:`runners.config.known_keys.unknown_keys` checks the composed config), ``~`` deletions,
glob and interval sweeps, and any command line naming another config (``--config-name``, ``--config-path``).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import criteria.rules  # noqa: F401  (fills CRITERIA)
from criteria.registry import CRITERIA
from runners.config.errors import ConfigError
from runners.config.known_keys import (
    CONF,
    closest_key,
    is_known,
    is_open,
    known_paths,
    option_paths,
    unknown_key_message,
)


def command_overrides(argv: list[str]) -> tuple[list[str], list[Path]] | None:
    """``(overrides, extra config dirs)`` of a Hydra command line (``sys.argv[1:]``), as Hydra's own argument
    parser splits it; None when the command line names another primary config (``--config-name`` /
    ``--config-path``: other keys and groups) or Hydra's parser refuses it (Hydra then says why)."""
    from hydra._internal.utils import get_args_parser

    try:
        args, _ = get_args_parser().parse_known_args(argv)
    except SystemExit:  # --version, or flags Hydra's parser refuses: Hydra answers those itself
        return None
    if args.config_name or args.config_path:
        return None
    return list(args.overrides or []), [Path(args.config_dir)] if args.config_dir else []


def group_options(group: str, dirs: Iterable[Path] = ()) -> list[str]:
    """The options of config group ``group`` (``dataset``, ``hydra/launcher``): the ``.yaml`` files under
    ``conf/<group>/`` and each extra config dir's, relative and without the suffix (``frontier/fly``)."""
    out: set[str] = set()
    for root in (CONF, *dirs):
        base = root / group
        if base.is_dir():
            out.update(str(f.relative_to(base).with_suffix("")) for f in base.rglob("*.yaml"))
    return sorted(out)


def is_group(key: str, dirs: Iterable[Path] = ()) -> bool:
    """True if ``key`` (an override's key, package stripped) selects a config group: a folder of ``conf/``
    (``dataset``, ``hydra/launcher``), not a key path (``dataset.limit``)."""
    return "." not in key and any((root / key).is_dir() for root in (CONF, *dirs))


def _choices(override: Any) -> Iterator[Any] | None:
    """The values an override selects (one, or each of a choice / range sweep); None for glob and interval
    sweeps, whose values Hydra computes."""
    from hydra.core.override_parser.types import ValueType

    if override.value_type == ValueType.ELEMENT:
        return iter([override.value()])
    if override.value_type in (
        ValueType.CHOICE_SWEEP,
        ValueType.SIMPLE_CHOICE_SWEEP,
        ValueType.RANGE_SWEEP,
    ):
        return override.sweep_iterator()
    return None


def unknown_option_message(group: str, option: str, options: list[str], key: str = "") -> str:
    """The error for a group option without a config file; ``key``: the override's key as typed
    (``autojudge@method.judge``; default ``group``)."""
    key = key or group
    close = difflib.get_close_matches(option, options, n=1, cutoff=0.6)
    hint = f"did you mean {key}={close[0]}? " if close else ""
    return (
        f"{key}={option} is not an option of group {group} (no conf/{group}/{option}.yaml); {hint}"
        f"allowed: {', '.join(options)}"
    )


def override_error(override: Any, dirs: Iterable[Path] = ()) -> str | None:
    """Why one parsed override is refused before composition (module docstring), or None."""
    key = override.key_or_group
    if override.is_hydra_override() or override.is_delete() or key == "hydra":
        return None
    if is_group(key, dirs) or "/" in key:
        if not is_group(key.split("/")[0], dirs):
            return None  # not one of ours: Hydra says what it is
        values = _choices(override)
        if values is None:
            return None
        options = group_options(key, dirs)
        for value in values:
            if value is not None and str(value) not in options:
                return unknown_option_message(
                    key, str(value), options, override.get_key_element().lstrip("+~")
                )
        return None
    if override.is_add() or override.is_force_add() or override.package is not None:
        return None
    if not is_known(key):
        return unknown_key_message(key, closest_key(key), added=False)
    return None


def align_with_sweep(argv: list[str]) -> list[str]:
    """``argv`` with each ``key=value`` (or ``+key=value``) whose key the experiment's sweep force-adds (``++key`` in
    ``conf/experiment/<name>.yaml``'s ``hydra.sweeper.params``: a key some of its methods lack, e.g. the Auto-Judge
    artefacts' ``++method.threshold`` beside SD) written ``++key=value``, so that it replaces the experiment's
    values as any other override of a swept key does. Hydra's basic sweeper keys an override by its prefix too:
    without this, the plain form is refused for the methods without the key, and its list form multiplies the sweep.
    Other arguments are returned as they are."""
    experiments = [a.partition("=")[2] for a in argv if a.startswith("experiment=")]
    path = CONF / "experiment" / f"{experiments[-1]}.yaml" if experiments else None
    if path is None or not path.is_file():
        return list(argv)
    from omegaconf import OmegaConf

    params = OmegaConf.select(OmegaConf.load(path), "hydra.sweeper.params") or {}
    forced = {str(k).lstrip("+"): str(k)[: len(str(k)) - len(str(k).lstrip("+"))] for k in params}
    forced = {k: prefix for k, prefix in forced.items() if prefix}
    out = []
    for a in argv:
        key, eq, value = a.partition("=")
        base = key.lstrip("+")
        out.append(f"{forced[base]}{base}={value}" if eq and base in forced else a)
    return out


def check_overrides(argv: list[str]) -> None:
    """Refuse the first bad override of a ``python -m runners.main`` (or Auto-Judge build) command line.

    Raises:
        ConfigError: an unknown key or group option (the message names it, the closest known one and the
            allowed keys or options).
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    split = command_overrides(argv)
    if split is None:
        return
    overrides, dirs = split
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:  # a syntax error: Hydra's own message shows where
        return
    for override in parsed:
        error = override_error(override, dirs)
        if error:
            raise ConfigError(error)
    error = repeated_key(parsed)  # after each one's own check: a bad value is named as such
    if error:
        raise ConfigError(error)
    if not dirs and all(_plain_key(o) or _choices(o) is not None for o in parsed):
        error = missing_in_option(parsed)
        if error:
            raise ConfigError(error)


def repeated_key(parsed: list[Any]) -> str | None:
    """Why a command line that sets one key (or group) to two values is refused, or None: Hydra would keep the
    last silently (``L=5 L=10`` runs L=10 alone), where the user may have meant a sweep (``L=5,10``). The same
    value twice (a script's base overrides repeated by its caller) changes nothing and passes."""
    seen: dict[tuple[str, str | None], str] = {}
    for o in parsed:
        if o.is_hydra_override() or o.is_delete() or o.key_or_group == "hydra":
            continue
        key = (o.key_or_group, o.package)
        if key in seen and seen[key].partition("=")[2] != o.input_line.partition("=")[2]:
            values = ",".join(line.partition("=")[2] for line in (seen[key], o.input_line))
            return (
                f"{o.key_or_group} is given twice ({seen[key]} and {o.input_line}): only the last would count; "
                f"give it once, or sweep its values in one comma list ({o.key_or_group}={values})"
            )
        seen.setdefault(key, o.input_line)
    return None


def _plain_key(override: Any) -> bool:
    """A plain ``key=value`` of one value (no ``+``, ``~``, package, sweep, or Hydra key)."""
    from hydra.core.override_parser.types import ValueType

    return not (
        override.is_hydra_override()
        or override.is_delete()
        or override.is_add()
        or override.is_force_add()
        or override.package is not None
        or override.key_or_group == "hydra"
    ) and (override.value_type == ValueType.ELEMENT)


def compose_run(overrides: list[str]) -> Any:
    """``conf/run.yaml`` composed with ``overrides`` (Hydra's compose API, nothing run or written)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return compose("run", overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def missing_in_option(parsed: list[Any]) -> str | None:
    """A known key under a config group that the group's selected option does not define
    (``backend.n_ctx=4096`` with backend=hf: the key is llama.cpp's), which Hydra refuses as "not in struct" with
    exit status 1: the message names the selected option, the options that have the key and the option's keys.
    Composed (sweeps at their first value) only when some option of the group lacks the key's path: a key every
    option's file defines needs no composition."""
    from hydra.errors import ConfigCompositionException

    keyed = {
        i
        for i, o in enumerate(parsed)
        if _plain_key(o) and "." in o.key_or_group and not _in_every_option(o.key_or_group)
    }
    if not keyed:
        return None
    first = [
        o.input_line
        if _plain_key(o) or _choices(o) is None
        else f"{o.key_or_group}={next(_choices(o))}"
        for o in parsed
    ]
    try:
        compose_run(first)
        return None
    except ConfigCompositionException:
        pass
    except Exception:  # noqa: BLE001  (a value Hydra refuses otherwise: its own run says why)
        return None
    try:
        base = compose_run([x for j, x in enumerate(first) if j not in keyed])
    except Exception:  # noqa: BLE001  (another override's fault: Hydra says which)
        return None
    for o in (parsed[i] for i in sorted(keyed)):
        error = _missing_key_message(o, base)
        if error:
            return error
    return None


def _missing_key_message(o: Any, base: Any) -> str | None:
    """Why the override ``o`` (a key under a config group) is not a key of the option ``base`` composed, or None
    when it is."""
    group, _, rest = o.key_or_group.partition(".")
    node = base.get(group)
    for part in rest.split(".")[:-1]:
        node = node.get(part) if hasattr(node, "get") else None
    leaf = rest.split(".")[-1]
    chosen = base.get(group, {}).get("name", "?")
    parent = o.key_or_group.rpartition(".")[0]
    if node is None and is_open(parent):
        return _no_mapping_message(o, group, chosen, parent, leaf)
    if node is None or not hasattr(node, "keys") or leaf in node:
        return None
    keys = ", ".join(sorted(map(str, node.keys()))) or "none"
    if is_open(parent):  # free keys: added with +
        close = difflib.get_close_matches(leaf, list(map(str, node.keys())), n=1, cutoff=0.6)
        takes = rule_settings(base) if parent == "method.kwargs" else None
        fix = (
            f"did you mean {parent}.{close[0]}?"
            if close
            else f"add one with +{o.key_or_group}={o.value()}"
            if takes is None or leaf in takes
            else f"{leaf} is not a setting of method.criterion={base.method.criterion!r}; allowed: "
            + (", ".join(f"method.kwargs.{p}" for p in takes) or "none")
        )
        return (
            f"{o.key_or_group}={o.value()}: {parent} of {group}={chosen} has no key {leaf} (its keys: "
            f"{keys}); {fix}"
        )
    having = [opt for opt in group_options(group) if rest in option_paths(group, opt)]
    return (
        f"{o.key_or_group}={o.value()} is not a key of {group}={chosen}"
        + (f" (it is one of {group}={', '.join(having)})" if having else "")
        + f"; allowed keys of {parent if parent != group else f'{group}={chosen}'}: {keys}"
    )


def rule_settings(base: Any) -> list[str] | None:
    """The keyword settings the composed run's rule (``method.criterion``) takes, which ``method.kwargs`` may
    set (:func:`runners.config.validate._validate_rule` checks the same signature); None when it names none."""
    name = (base.get("method") or {}).get("criterion")
    if name is None or name not in CRITERIA:
        return None
    return [
        p.name
        for p in inspect.signature(CRITERIA.get(name).__init__).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def _no_mapping_message(o: Any, group: str, chosen: str, parent: str, leaf: str) -> str:
    """The message for a key under a free mapping (``method.kwargs``) that the chosen option does not have at all
    (method=sd has no kwargs), or has as a plain value (``method.kwargs.window_size.x``)."""
    sub = parent.partition(".")[2]
    having = [opt for opt in group_options(group) if sub in option_paths(group, opt)]
    if chosen in having:
        return (
            f"{o.key_or_group}={o.value()}: {parent} of {group}={chosen} is a setting, not a mapping "
            f"of settings; set it with {parent}=<value>"
        )
    # the same setting under another key (method.threshold, dropmatch.include_target)
    elsewhere = sorted(p for p in known_paths() if p.rsplit(".", 1)[-1] == leaf and not is_open(p))
    hint = f"; did you mean {elsewhere[0]}?" if elsewhere else ""
    others = f"; options of {group} that have {parent}: {', '.join(having)}" if having else ""
    return f"{o.key_or_group}={o.value()}: {group}={chosen} has no {parent}{hint}{others}"


def _in_every_option(key: str) -> bool:
    """True unless ``key`` lies under a config group (``backend.n_ctx``) some option of which lacks its path."""
    group, _, rest = key.partition(".")
    if not is_group(group):
        return True
    return all(rest in option_paths(group, opt) for opt in group_options(group))
