"""The contract every table and figure module implements, and what it returns.

An artefact module (``analysis/tables/tableN.py``, ``analysis/figures/<name>.py``) defines:

    NAME: str                                         # "table6": results/<NAME>/ and the CLI name
    def select(runs: DataFrame, profile: Profile) -> DataFrame
        # the run records (rows of analysis.load.load_runs) the artefact may read; no I/O
    def build(selected: DataFrame) -> Artefact
        # tables (numbers + their formatted view) and figures, with footers; reads only the
        # selected runs' records (samples.jsonl for items and traces); writes nothing

and nothing else is needed: ``python -m analysis.render <NAME> --profile P`` (:mod:`analysis.render`)
loads the records, calls both, writes every file and logs to W&B. A module tabulates every setting it finds
in the selected runs (every (p_drop, K), every L, every backend chosen by :func:`pick_backend`): no flags.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from runners.paths import REPO_ROOT

PAPER_SETTING = (0.3, 5)  # the paper's DropMatch (p_drop, K) (Tables 5-7, 10)


@dataclass
class Table:
    """One table of an artefact.

    Attributes:
        stem: file name without suffix under ``results/<artefact>/`` (``table6``, ``table6_p0.1_K5``).
        title: caption (Markdown heading, LaTeX ``\\caption``).
        data: numbers only (what the CSV holds): numeric columns plus label columns (pair, method ...).
        display: the same rows formatted for reading (strings; Markdown and LaTeX); None: ``data``.
        footer: lines under the table (Markdown list, LaTeX comments): n, intervals, provenance.
    """

    stem: str
    title: str
    data: pd.DataFrame
    display: pd.DataFrame | None = None
    footer: list[str] = field(default_factory=list)


@dataclass
class Figure:
    """One figure of an artefact: a matplotlib figure plus the numbers it plots.

    Attributes:
        stem: file name without suffix (``.png``, ``.pdf``, ``.csv`` of ``data``, ``.md`` caption).
        caption: what the panels show, (a), (b), ... in order; provenance goes in ``footer``, not the plot.
        fig: a ``matplotlib.figure.Figure`` drawn with :mod:`analysis.style`.
        data: the plotted numbers (CSV).
        footer: n, settings and provenance lines (Markdown caption file).
    """

    stem: str
    caption: str
    fig: Any
    data: pd.DataFrame
    footer: list[str] = field(default_factory=list)


@dataclass
class Artefact:
    """What :func:`build` returns.

    Attributes:
        name: the artefact (``results/<name>/``).
        tables, figures: its outputs (at least one of them non-empty when it has runs).
        runs: the run rows actually used (their ids go into ``results/<name>/manifest.json``).
        source_runs: ids of the runs those runs were computed from (a measurement's inputs, e.g. Fig. 3's
            single-path decodes), listed in the manifest so the raw records they hold are kept with it.
        notes: lines for the driver to print (e.g. settings left out).
    """

    name: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    source_runs: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.tables and not self.figures


def profile_names(conf_dir: Path | None = None) -> list[str]:
    """The profiles a ``--profile`` may name: the stems of ``conf/profile/*.yaml``, sorted, then ``any``."""
    return [
        *sorted(f.stem for f in ((conf_dir or REPO_ROOT / "conf") / "profile").glob("*.yaml")),
        "any",
    ]


def profile_arg(name: str) -> str:
    """``type=`` of every ``--profile`` option: ``name`` when :func:`profile_names` has it.

    Raises:
        argparse.ArgumentTypeError: an unknown name (argparse exits 2 with the allowed names).
    """
    if name not in profile_names():
        raise argparse.ArgumentTypeError(
            f"unknown profile {name!r}; allowed: {', '.join(profile_names())}"
        )
    return name


@dataclass(frozen=True)
class Profile:
    """A profile as analysis sees it: its name and the backend its config selects.

    Attributes:
        name: ``conf/profile/<name>.yaml``; None = runs of any profile.
        backend: the backend the profile overrides (``override /backend: vllm`` or
            ``override /backend@_global_.backend: auto`` in its defaults), else None (the artefact's or the run
            config's default). ``auto``: the engine was chosen per machine when each run was made.
    """

    name: str | None
    backend: str | None = None

    @classmethod
    def load(cls, name: str | None, conf_dir: Path | None = None) -> Profile:
        """Read ``conf/profile/<name>.yaml`` (``any`` or None: all profiles, no backend).

        Raises:
            ValueError: no such file (``unknown profile 'x'; allowed: ...``): a typo would otherwise select no run.
        """
        if name in (None, "any"):
            return cls(None, None)
        path = (conf_dir or REPO_ROOT / "conf") / "profile" / f"{name}.yaml"
        if not path.is_file():
            raise ValueError(
                f"unknown profile {name!r}; allowed: {', '.join(profile_names(conf_dir))}"
            )
        backend = None
        cfg = yaml.safe_load(path.read_text()) or {}
        for d in cfg.get("defaults") or []:
            if isinstance(d, dict):
                for k, v in d.items():
                    key = str(k).strip().split("@", 1)[0]
                    if key in ("override /backend", "/backend", "backend"):
                        backend = str(v)
        return cls(name, backend)


def of_profile(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Runs of ``profile`` (all runs when its name is None)."""
    if runs.empty or profile.name is None:
        return runs
    return runs[runs["profile"] == profile.name]


def pick_backend(
    runs: pd.DataFrame, profile: Profile, default: str | None = None, artefact: str | None = None
) -> pd.DataFrame:
    """Runs of one backend, taken from the profile or the records.

    The profile's backend when it has runs. For a profile whose backend is ``auto`` (the engine is chosen per
    machine: transformers bf16 on one, llama.cpp on another) the backend of the newest run made for
    ``artefact`` (its config's ``artefact``), so a table decoded again on another engine shows those runs and
    not the older records of the first engine, while an artefact that only shares a run with another (Table
    1's AR run is also Table 6's) keeps its own engine; without such runs, the backend with the most runs (ties:
    the newest). Else ``default`` (the artefact's own, e.g. ``hf``) when it has runs; else the backend with the
    most runs (ties: alphabetical). Tables never mix backends (their throughputs are not comparable).
    """
    if runs.empty:
        return runs
    if profile.backend == "auto":
        mine = runs[runs["artefact"] == artefact] if "artefact" in runs else runs.iloc[0:0]
        if not mine.empty:
            best = mine.sort_values(["date_utc", "run_id"]).iloc[-1]["backend"]
        else:
            per = runs.groupby("backend")["date_utc"].agg(["size", "max"])
            best = per.sort_values(["size", "max"], ascending=False).index[0]
        return runs[runs["backend"] == best]
    have = runs["backend"].value_counts()
    for b in (profile.backend, default):
        if b is not None and b in have.index:
            return runs[runs["backend"] == b]
    best = sorted(have.index, key=lambda b: (-have[b], b))[0]
    return runs[runs["backend"] == best]


def setting_stem(name: str, p_drop: float, K: int, paper: tuple[float, int] = PAPER_SETTING) -> str:
    """``name`` for the paper's (p_drop, K), else ``<name>_p<p_drop>_K<K>``."""
    return name if (float(p_drop), int(K)) == paper else f"{name}_p{float(p_drop):g}_K{int(K)}"


def dm_settings(
    runs: pd.DataFrame, methods: tuple[str, ...] = ("dropmatch", "dropmatch_naive")
) -> list[tuple[float, int]]:
    """Every (p_drop, K) of DropMatch runs in ``runs``, the paper's first, then sorted."""
    dm = runs[runs["method"].isin(list(methods))] if not runs.empty else runs
    found = sorted({(float(p), int(k)) for p, k in zip(dm.get("p_drop", []), dm.get("K", []))})
    return sorted(found, key=lambda s: (s != PAPER_SETTING, s))
