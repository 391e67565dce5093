"""The one driver of every table and figure: records in, ``results/<artefact>/`` out.

    python -m analysis.render table6 --profile default
    python -m analysis.render all --profile paper
    python -m analysis.render table6 --profile default --runs DIR --out DIR   # other records / output root

For the artefact's module (:data:`ARTEFACTS`; the contract is in :mod:`analysis.artefact`) it loads every
run record (:func:`analysis.load.load_runs`), calls ``select(runs, profile)`` and ``build(selected)``, writes
Markdown, numeric CSV, booktabs LaTeX and PNG/PDF figures plus ``manifest.json`` (:mod:`analysis.write`),
logs the tables (:mod:`runners.sweep.console`: INFO on stdout, errors on stderr; ``DROPMATCH_LOG_LEVEL``), and, with ``DROPMATCH_WANDB=online|offline``, logs each table and figure to W&B
(:func:`analysis.wandb_artefact.log_artefact`). The backend and every (p_drop, K) / L setting come from the
records and the profile (``conf/profile/<P>.yaml``), never from flags.

Exit status: 0 written; 1 no runs to tabulate (message on stderr names the artefact, profile and the command
that makes the runs); 2 bad arguments (``--runs`` not an existing directory, ``--out`` naming a file), or a
damaged run record (the message names its file, line or sample, and field). ``all``: 0 unless none of the
artefacts had runs; it ends with one line on stderr naming those that had none.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

from analysis.artefact import Artefact, Profile, profile_arg
from analysis.load import load_runs, unfinished_records
from analysis.wandb_artefact import log_artefact
from analysis.write import write_artefact
from runners.paths import directory_env_errors, not_a_directory, results_dir
from runners.records.schema import RecordError
from runners.sweep.console import console

logger = logging.getLogger(__name__)

ARTEFACTS = {
    "table1": "analysis.tables.table1",
    "table2": "analysis.tables.table2",
    "table3": "analysis.tables.table3",
    "table4": "analysis.tables.table4",
    "table5": "analysis.tables.table5",
    "table6": "analysis.tables.table6",
    "table7": "analysis.tables.table7",
    "table8": "analysis.tables.table8",
    "table9": "analysis.tables.table9",
    "table10": "analysis.tables.table10",
    "fig1": "analysis.figures.fig1",
    "fig5": "analysis.figures.fig5",
    "fig6": "analysis.figures.fig6",
    "sensitivity": "analysis.figures.sensitivity",
    "fig3": "analysis.figures.fig3",
    "bench": "analysis.tables.bench",
    "frontier": "analysis.tables.frontier",
}


class NoRuns(RuntimeError):
    """The artefact has no runs to tabulate for this profile."""


def module(name: str) -> ModuleType:
    """The artefact's module (raises KeyError for an unknown name)."""
    return importlib.import_module(ARTEFACTS[name])


def no_runs_message(
    name: str,
    profile: Profile,
    n_read: int,
    incomplete: list[str] | tuple[str, ...] = (),
    n_complete: int = 0,
) -> str:
    """The no-runs line: ``n_read`` run records read, of which ``incomplete`` (run ids) are unfinished and
    ``n_complete`` finished but outside the artefact's cells (another profile, backend, method or setting)."""
    prof = profile.name or "any"
    backend = f" (its backend: {profile.backend})" if profile.backend else ""
    shown = ", ".join(incomplete[:5]) + (
        f", ... ({len(incomplete) - 5} more)" if len(incomplete) > 5 else ""
    )
    unfinished = f" ({len(incomplete)} incomplete: {shown})" if incomplete else ""
    elsewhere = (
        f" ({n_complete} complete, none of them a cell of {name} for this profile: "
        f"see select() in {ARTEFACTS.get(name, name)})"
        if n_complete
        else ""
    )
    return (
        f"[render] {name}: no complete runs for profile={prof}{backend} among {n_read} run "
        f"record{'' if n_read == 1 else 's'} read{unfinished}{elsewhere}; "
        f"run ./reproduce.sh {name} profile={prof} first"
    )


def path_arg_errors(runs: Path | None, out: Path | None) -> list[str]:
    """Why ``--runs`` / ``--out`` cannot be used (empty: both can; None: the flag was not given).

    ``--runs`` is read, never created: it must be an existing directory. ``--out`` must be usable as a
    directory (:func:`runners.paths.not_a_directory`: a directory, or missing under one; writable).
    """
    errors = []
    if runs is not None and not runs.is_dir():
        what = "does not exist" if not runs.exists() else "is not a directory"
        errors.append(
            f"--runs {runs} {what}; allowed: an existing directory of run records "
            "(one <run_id>/ per run, as results/runs)"
        )
    why = not_a_directory(out, writable=True) if out is not None else None
    if why:
        errors.append(f"--out {out} is invalid: {why}; allowed: a directory (created if missing)")
    return errors


def no_runs_summary(missing: list[str], total: int) -> str:
    """The closing line of ``render all``: which of its ``total`` artefacts had no runs."""
    return (
        f"[render] all: {len(missing)} of {total} artefacts had no runs (not written): "
        f"{', '.join(missing)}"
    )


def render(
    name: str,
    profile_name: str | None = "default",
    *,
    runs_root: Path | None = None,
    out_root: Path | None = None,
    echo: bool = True,
) -> Artefact:
    """Build and write one artefact; return it.

    Args:
        name: a key of :data:`ARTEFACTS`.
        profile_name: ``conf/profile/<name>.yaml`` (``any``/None: runs of every profile).
        runs_root: the run records (default ``results/runs``); out_root: where ``<name>/`` goes (default
            the results directory).

    Raises:
        NoRuns: nothing to tabulate.
    """
    profile = Profile.load(profile_name)
    root = Path(runs_root) if runs_root is not None else results_dir() / "runs"
    runs = load_runs(root)
    mod = module(name)
    selected = mod.select(runs, profile) if not runs.empty else runs
    art = mod.build(selected) if not selected.empty else Artefact(name)
    if art.empty and not selected.empty:
        raise NoRuns(
            f"[render] {name}: nothing to tabulate from the {len(selected)} selected runs of profile="
            f"{profile.name or 'any'}" + (f" ({'; '.join(art.notes)})" if art.notes else "")
        )
    if art.empty:
        incomplete = unfinished_records(root, runs)
        known = set(runs["run_id"]) if "run_id" in runs else set()
        n_read = len(runs) + sum(r not in known for r in incomplete)  # + records without a summary
        done = int(runs["complete"].astype(bool).sum()) if "complete" in runs else 0
        raise NoRuns(no_runs_message(name, profile, n_read, incomplete, done))
    out = Path(out_root if out_root is not None else results_dir()) / name
    files = write_artefact(art, out, profile.name)
    if echo:
        for t in art.tables:
            logger.info("%s", (out / f"{t.stem}.md").read_text(encoding="utf-8"))
        for note in art.notes:
            logger.info("[render] %s: %s", name, note)
        # the real folder (the artefact's own files name none): the user's next step is to open it
        logger.info(
            "[render] %s: wrote %d files and manifest.json to %s/ (%d runs, profile=%s)",
            name,
            len(files),
            out.resolve(),
            len(art.runs),
            profile.name or "any",
        )
    log_wandb(art, out)
    return art


def log_wandb(art: Artefact, out: Path) -> list[str]:
    """With ``DROPMATCH_WANDB=online|offline``: one W&B analysis run per table and figure; returns their dirs."""
    if os.environ.get("DROPMATCH_WANDB", "") not in ("online", "offline"):
        return []

    dirs = [log_artefact(t.stem, t.data) for t in art.tables]
    dirs += [
        log_artefact(f.stem, f.data, [out / f"{f.stem}.png", out / f"{f.stem}.pdf"])
        for f in art.figures
    ]
    return [d for d in dirs if d]


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("artefact", help=f"one of: {', '.join(ARTEFACTS)}, or all")
    ap.add_argument(
        "--profile",
        default="default",
        type=profile_arg,
        help="profile whose runs to tabulate (conf/profile/<P>.yaml; 'any' for all)",
    )
    ap.add_argument(
        "--runs", type=Path, default=None, help="run records directory (default results/runs)"
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="output root (default the results directory)"
    )
    a = ap.parse_args(list(argv) if argv is not None else None)
    try:
        console()  # INFO (the tables, what was written) on stdout, warnings and errors on stderr
    except ValueError as e:  # DROPMATCH_LOG_LEVEL
        console("INFO")
        logger.error("[render] %s", e)
        return 2
    bad_dirs = (
        directory_env_errors()
    )  # as every entry point: a results path naming a file is refused here
    if bad_dirs:
        logger.error("config error: %s", bad_dirs[0])
        return 2
    bad_paths = path_arg_errors(a.runs, a.out)
    if bad_paths:
        logger.error("[render] %s", bad_paths[0])
        return 2
    names = list(ARTEFACTS) if a.artefact == "all" else [a.artefact]
    unknown = [n for n in names if n not in ARTEFACTS]
    if unknown:
        near = difflib.get_close_matches(unknown[0].lower(), [*ARTEFACTS, "all"], n=1, cutoff=0.6)
        logger.error(
            "[render] unknown artefact %r%s; allowed: %s, all",
            unknown[0],
            f" (did you mean {near[0]}?)" if near else "",
            ", ".join(ARTEFACTS),
        )
        return 2
    missing = []
    for n in names:
        try:
            render(n, a.profile, runs_root=a.runs, out_root=a.out)
        except NoRuns as e:
            logger.error("%s", e)
            missing.append(n)
        except RecordError as e:  # a damaged record: where it is, instead of a traceback
            logger.error("[render] %s: record error: %s", n, e)
            return 2
    if len(names) > 1 and missing:  # the per-artefact messages scroll past among the tables
        logger.warning("%s", no_runs_summary(missing, len(names)))
    # one artefact: no runs is an error; `all`: an error only when none of them had runs
    return 1 if len(missing) == len(names) else 0


def cli(name: str, argv: Iterable[str] | None = None) -> int:
    """``python -m analysis.tables.<name> [--profile P] ...`` is ``python -m analysis.render <name> ...``."""
    return main([name, *(sys.argv[1:] if argv is None else list(argv))])


if __name__ == "__main__":
    sys.exit(main())
