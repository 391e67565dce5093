"""Whether an artefact shows the runs its command just decoded or reused: a note when it does not.

An artefact's table shows the runs its own selection picks from every run on record (e.g. Table 6 takes the
setting with the most filled cells, greedy runs only; the bench its newest run). A command whose sweep made runs of another setting (a smaller
``dataset.limit``, a sampling temperature) then prints a table of other runs, with exit status 0. ``reproduce.sh``
calls this after rendering: it reads the job status files of the command's sweeps (those written since the
command started, :data:`runners.sweep.job_status.STATUS_FILE`) and the artefact's ``manifest.json`` (its runs), and
prints one note naming the runs the artefact left out.

    python -m runners.sweep.shown <artefact> --since <unix seconds> --sweeps table6 [more experiments]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from analysis.render import ARTEFACTS, module
from runners.paths import results_dir
from runners.sweep.job_status import STATUS_FILE

SHOWN_STATUSES = (
    "done",
    "skipped",
)  # a job that ran its run, or found it finished: the run is on record


def sweep_runs(results: Path, since: float, sweeps: Iterable[str]) -> dict[str, list[str]]:
    """``{run_id: overrides}`` of the jobs of ``sweeps`` (experiment names) whose status file was written at or
    after ``since`` (unix seconds) under ``results/hydra/multirun`` and that ended done or skipped."""
    wanted = {f"experiment={s}" for s in sweeps}
    out: dict[str, list[str]] = {}
    for f in sorted((results / "hydra" / "multirun").glob(f"*/*/{STATUS_FILE}")):
        try:
            if f.stat().st_mtime < since:
                continue
            entry = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        overrides = [str(o) for o in entry.get("overrides") or []]
        if (
            entry.get("status") in SHOWN_STATUSES
            and wanted & set(overrides)
            and entry.get("run_id")
        ):
            out.setdefault(str(entry["run_id"]), overrides)
    return out


def left_out(made: dict[str, list[str]], manifest: Path) -> dict[str, list[str]]:
    """The runs of ``made`` that ``manifest`` (an artefact's ``manifest.json``) lists neither among its ``runs`` nor
    among its ``source_runs`` (the decodes a measurement read, Fig. 3); none when the artefact wrote no manifest."""
    try:
        m = json.loads(manifest.read_text())
        shown = set(m.get("runs") or []) | set(m.get("source_runs") or [])
    except (OSError, ValueError, AttributeError, TypeError):
        return {}
    return {rid: o for rid, o in made.items() if rid not in shown}


def note(
    artefact: str,
    made: dict[str, list[str]],
    missing: dict[str, list[str]],
    others: bool = True,
    rule: str | None = None,
) -> str | None:
    """The line printed when the artefact left out runs of its own command (None when it shows them all).

    ``others``: runs other than ``made`` are on record, which the artefact may have picked instead (then a new
    results directory shows the command's runs alone); without them the artefact's own rule left the runs out,
    which ``rule`` (its ``SELECTION_NOTE``, when it has one) names."""
    if not missing:
        return None
    rid, overrides = next(iter(missing.items()))
    settings = " ".join(o for o in overrides if not o.startswith("experiment="))
    line = (
        f"[reproduce] note: {artefact} does not show {len(missing)} of the {len(made)} runs this command decoded "
        f"or reused (e.g. run {rid}: {settings}); "
    )
    if others:
        return line + (
            "it shows the runs on record its own selection picks (its footer says which). To see these runs "
            "alone, rerun the command with DROPMATCH_RESULTS set to a new directory."
        )
    return line + (
        f"no other runs are on record here, so its own selection left them out"
        f"{f': {rule}' if rule else ' (its footer says which runs it shows)'}."
    )


def selection_note(artefact: str) -> str | None:
    """The artefact module's ``SELECTION_NOTE`` (what its selection leaves out), or None."""
    return getattr(module(artefact), "SELECTION_NOTE", None) if artefact in ARTEFACTS else None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m runners.sweep.shown", description=__doc__.splitlines()[0]
    )
    p.add_argument("artefact")
    p.add_argument("--since", type=float, required=True, help="unix seconds the command started at")
    p.add_argument("--sweeps", nargs="+", required=True, help="the artefact's experiments")
    a = p.parse_args(argv)
    results = results_dir()
    made = sweep_runs(results, a.since, a.sweeps)
    missing = left_out(made, results / a.artefact / "manifest.json")
    on_record = (
        {d.name for d in (results / "runs").iterdir()} if (results / "runs").is_dir() else set()
    )
    line = note(
        a.artefact,
        made,
        missing,
        others=bool(on_record - set(made)),
        rule=selection_note(a.artefact) if missing else None,
    )
    if line:
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
