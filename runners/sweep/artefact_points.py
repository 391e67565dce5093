"""Whether an artefact's table would show a sweep point, asked before the point is decoded.

``./reproduce.sh table6 method=fly`` validates (fly is a rule) but Table 6 has no FLy row: the run would be
decoded and then left out of the table. Each artefact's ``select(runs, profile)`` (:mod:`analysis.render`'s
contract) is the one definition of what it shows, so the point is put to it as a finished run
(:func:`analysis.load.run_row` of its resolved config) and refused where it is dropped, naming the methods and
datasets the artefact does show. Only points of a sweep that ``reproduce.sh`` runs for an artefact are asked
(``artefact`` in the config): a run of one's own (``python -m runners.main method=fly``) has no table to fit.
An artefact whose measurement reads runs of its sweep outside ``select`` (Fig. 3's single-path decodes) names
their methods in its module's ``INPUT_METHODS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.artefact import Profile
from analysis.load import run_row
from analysis.render import ARTEFACTS, module
from runners.config.errors import ConfigError
from runners.paths import REPO_ROOT

# A finished run as the artefact would read it: complete, its items all decoded. The numbers are placeholders;
# an artefact's select() reads the config's fields (method, dataset, L, temperature, backend, profile, ...).
_FINISHED = {"complete": True, "num_samples": 1, "num_expected": 1, "run_id": "check"}


def shown(c: Mapping[str, Any]) -> bool | None:
    """True when the artefact named by ``c["artefact"]`` keeps this run in its ``select``; None when ``c``
    names no artefact with a table module (nothing to ask)."""
    name = c.get("artefact")
    mod, profile = _artefact(name, c)
    if mod is None:
        return None
    row = _row(c)
    if row["method"] in getattr(
        mod, "INPUT_METHODS", ()
    ):  # read as the inputs of the artefact's measurement
        return True
    return not mod.select(pd.DataFrame([row]), profile).empty


def check_shown(c: Mapping[str, Any]) -> None:
    """Raise when ``c``'s artefact would not show the run.

    Raises:
        ConfigError: naming the field that keeps the point out (``method``, ``dataset``, or a setting of
            :data:`PROBES`) and the values the artefact shows in its place, else the point's main settings.
    """
    if shown(c) is not False:
        return
    name = str(c["artefact"])
    mod, profile = _artefact(name, c)
    row = _row(c)
    where = f"see select() in {mod.__name__}"
    kept = _grid_kept(mod, profile, row)  # every method x dataset with the point's other settings
    never = "so the runs would be decoded and never shown"
    if not kept.empty and row["method"] not in set(kept["method"]):
        raise ConfigError(
            f"method={row['method']} is invalid for ./reproduce.sh {name}: its table has no such row, {never}; "
            f"allowed: {', '.join(sorted(set(kept['method'])))} ({where}); a run of its own: python -m "
            f"runners.main method={row['method']} ..."
        )
    if not kept.empty and row["dataset"] not in set(kept["dataset"]):
        raise ConfigError(
            f"dataset={row['dataset']} is invalid for ./reproduce.sh {name}: its table has no such column, "
            f"{never}; allowed: {', '.join(sorted(set(kept['dataset'])))} ({where}); a run of its own: "
            f"python -m runners.main dataset={row['dataset']} ..."
        )
    for column, key, values in PROBES:
        ok = [
            v for v in values if not mod.select(pd.DataFrame([{**row, column: v}]), profile).empty
        ]
        if ok and row[column] not in ok:
            raise ConfigError(
                f"{key}={row[column]} is invalid for ./reproduce.sh {name}: its table holds other runs, {never}; "
                f"allowed: {', '.join(map(str, ok))} ({where})"
            )
    raise ConfigError(
        f"this point (method={row['method']}, dataset={row['dataset']}, L={row['L']}, backend={row['backend']}) "
        f"is one ./reproduce.sh {name} would decode and never show: its table keeps other settings ({where})"
    )


# Settings an artefact may fix, probed (record column, override key, the values tried) when neither the method
# nor the dataset keeps a point out of its table
PROBES = (("temperature", "decoding.temperature", (0.0,)), ("trace", "trace", (False, True)))


def _artefact(name: Any, c: Mapping[str, Any]) -> tuple[Any, Any]:
    if not isinstance(name, str) or name not in ARTEFACTS:
        return None, None
    prof = (c.get("profile") or {}).get("name")
    return module(name), Profile.load(prof)


def _row(c: Mapping[str, Any]) -> dict:
    return run_row(dict(c), dict(_FINISHED), Path("/nonexistent-run-record"))


def _grid_kept(mod: Any, profile: Any, row: dict) -> pd.DataFrame:
    """The rows the artefact keeps of every (method, dataset) option pair, ``row``'s other fields as they are."""
    grid = pd.DataFrame(
        [
            {**row, "method": m, "dataset": d, "run_id": f"{m}/{d}"}
            for m in _options("method")
            for d in _options("dataset")
        ]
    )
    return mod.select(grid, profile)


def _options(group: str) -> list[str]:
    """The option names of a config group (``conf/<group>/*.yaml``)."""
    return sorted(p.stem for p in (REPO_ROOT / "conf" / group).glob("*.yaml"))
