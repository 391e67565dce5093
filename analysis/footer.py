"""Provenance footer lines of a table or figure, from the rows of the runs it used (:func:`analysis.load.load_runs`).

Every footer names: pair, backend, profile; device; the date span and run count; the git commits that wrote
the runs (each with its run count; a table from several commits says so); uncommitted changes; the model
identity per pair (weights' sha256 or hub revision, dtype); the decision-code fingerprint of the acceptance
rule when the records carry one (several in one table: said so, with counts). Where a GGUF engine (llama.cpp)
made any of the runs, a line names the engine and precision of every run.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

import pandas as pd


def _counted(values: Iterable[str]) -> str:
    c = Counter(values)
    return ", ".join(f"{k} ({n} run{'s' if n > 1 else ''})" for k, n in sorted(c.items()))


def commit_lines(runs: pd.DataFrame) -> list[str]:
    """The git commits of the runs, each with the number of runs written at it (a resumed run, or one whose
    commit moved while it ran, counts at each of its commits and is said to span them); dirty worktrees flagged."""
    per_run = [
        sorted({str(s)[:10] for s in (row or ())})
        for row in runs.get("git_shas", pd.Series(dtype=object))
    ]
    per_run = [r for r in per_run if r]
    if not per_run and "git_sha" in runs:
        per_run = [[str(s)[:10]] for s in runs["git_sha"].dropna()]
    if not per_run:
        return ["git: not recorded"]
    shas = [s for r in per_run for s in r]
    distinct = sorted(set(shas))
    line = f"git commits of the runs: {_counted(shas)}"
    if len(distinct) > 1:
        spanning = sum(len(r) > 1 for r in per_run)
        line += f" -- {len(distinct)} commits in one table"
        if spanning:
            line += f" ({spanning} of the {len(per_run)} runs span several commits)"
    out = [line]
    if "git_dirty" in runs and runs["git_dirty"].astype(bool).any():
        out.append(
            f"uncommitted changes when {int(runs['git_dirty'].astype(bool).sum())} of the runs were made"
        )
    return out


def identity_lines(runs: pd.DataFrame) -> list[str]:
    """Model identity per pair (MIXED when one pair's runs used different weights or dtypes)."""
    if "model_identity" not in runs:
        return []
    out = []
    for pair, g in runs.groupby("pair", sort=True):
        ids = sorted(set(g["model_identity"].astype(str)))
        if len(ids) == 1:
            out.append(f"model identity ({pair}): {ids[0]}")
        else:
            out.append(
                f"MIXED model identity ({pair}): {_counted(g['model_identity'].astype(str))}"
            )
    return out


# backend -> the engine that computes its forwards (backend=auto is resolved before a run records its config)
ENGINES = {"hf": "transformers", "llamacpp": "llama.cpp", "vllm": "vLLM"}
GGUF_BACKENDS = ("llamacpp",)


def engine_lines(runs: pd.DataFrame) -> list[str]:
    """The engine and precision the forwards ran in, with run counts (``backend`` and the identities' dtypes:
    e.g. ``transformers bfloat16`` or ``llama.cpp gguf:Q4_K_M``); several in one table are said so. Only where a
    GGUF engine made a run (the other footers name the engine in ``backend`` and the dtype in the identity)."""
    if "backend" not in runs or not runs["backend"].isin(GGUF_BACKENDS).any():
        return []
    kinds = []
    for backend, ident in zip(runs["backend"], runs.get("model_identity", [""] * len(runs))):
        dtypes = sorted(set(re.findall(r"dtype ([^,]+)", str(ident))))
        kinds.append(" ".join([ENGINES.get(str(backend), str(backend)), "/".join(dtypes)]).strip())
    line = f"engine: {_counted(kinds)}"
    return [line + (" -- MIXED engines in one table" if len(set(kinds)) > 1 else "")]


def decision_lines(runs: pd.DataFrame) -> list[str]:
    """Decision-code fingerprint(s); MIXED when the cells were decided by different code."""
    if "decision_code" not in runs:
        return []
    fps = runs["decision_code"].dropna().astype(str)
    missing = int(runs["decision_code"].isna().sum())
    if fps.empty:
        return ["decision code fingerprint: not recorded in these runs"]
    tail = f"; not recorded in {missing} run{'s' if missing > 1 else ''}" if missing else ""
    if fps.nunique() == 1:
        return [f"decision code fingerprint: {fps.iloc[0]}{tail}"]
    return [
        f"MIXED decision code: {_counted(fps)}{tail} -- acceptance decisions may differ between cells"
    ]


def provenance_lines(runs: pd.DataFrame) -> list[str]:
    """n of runs, pair, backend, profile, device, dates, commits, model identity, decision code."""
    if runs.empty:
        return ["no runs"]
    dates = sorted(d for d in runs["date_utc"].dropna())
    span = f"{dates[0][:10]} .. {dates[-1][:10]}" if dates else "?"
    return [
        f"pair: {', '.join(sorted(runs['pair'].unique()))}; backend: {', '.join(sorted(runs['backend'].unique()))}; "
        f"profile: {', '.join(sorted(str(p) for p in runs['profile'].unique()))}",
        *engine_lines(runs),
        f"device: {', '.join(sorted(str(d) for d in runs['device'].dropna().unique()))}",
        f"date (UTC): {span}; runs: {len(runs)}",
        *commit_lines(runs),
        *identity_lines(runs),
        *decision_lines(runs),
    ]


def quality_lines(runs: pd.DataFrame) -> list[str]:
    """The quality metric the runs' scorers recorded (``quality/metric``, with run counts) and their notes
    (e.g. HumanEval scored by its original ``check()`` because EvalPlus's HumanEval+ data is not available
    offline), as :func:`analysis.load.load_runs` read them: a footer names what was measured, not what was meant."""
    metrics = [
        str(m)
        for m in runs.get("quality_metric", pd.Series(dtype=object))
        if isinstance(m, str) and m
    ]
    notes = [
        str(n)
        for n in runs.get("quality_note", pd.Series(dtype=object))
        if isinstance(n, str) and n
    ]
    out = [f"quality metric (as scored): {_counted(metrics)}"] if metrics else []
    return out + [f"scorer note: {n}" for n in sorted(set(notes))]
