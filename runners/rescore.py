"""Rescore stored outputs with the installed scorers: ``python -m runners.rescore <run_id | run dir | artefact> ...``.

Scores are not frozen at generation time. For each selected run this rebuilds the dataset from
``config.json`` (so prompts and docs come from the installed lm-eval), grades every stored
``output_text`` with the dataset's scorer, and then, under the run's writer lock:

* rewrites each record's ``quality`` in ``samples.jsonl`` (temp file + fsync + rename);
* replaces the summary's ``quality/*`` fields, adding ``quality/scorer_versions`` (lm-eval, EvalPlus) and
  ``rescored_utc``; speed and acceptance fields are untouched;
* rewrites the exports (:func:`runners.exports.write_exports`).

A selector is a run id (``results/runs/<id>``), a run directory, or an artefact name (every run whose
``config.json`` has ``artefact: <name>``). Exit code 2 when a selector matches nothing, or when a record's
``samples.jsonl`` has a damaged line (:class:`runners.records.schema.RecordError`: file, line, field; that record
is not rewritten).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import runners.scorers  # noqa: F401  (registration)
from runners.exports import dataset_samples, read_run, target_tokenizer, write_exports
from runners.paths import directory_env_errors, results_dir
from runners.records.io import atomic_write_json, dumps, get_number
from runners.records.record import RunLockedError
from runners.records.schema import RecordError
from runners.registry import SCORERS, build
from runners.sweep.console import console

logger = logging.getLogger(__name__)
SCORER_PACKAGES = ("lm_eval", "evalplus", "nltk", "math-verify")


def scorer_versions() -> dict[str, str]:
    """Installed versions of the scoring libraries."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for p in SCORER_PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            pass
    return out


def select_runs(selectors: Sequence[str], root: Path) -> list[Path]:
    """Run directories for run ids, paths or artefact names (in order, no duplicates).

    Raises:
        LookupError: a selector matches no run.
    """
    found: list[Path] = []
    for sel in selectors:
        path = Path(sel)
        if (path / "config.json").is_file():
            hits = [path]
        elif (root / sel / "config.json").is_file():
            hits = [root / sel]
        else:
            hits = [
                d
                for d in sorted(root.glob("*/config.json"))
                if json.loads(d.read_text()).get("artefact") == sel
            ]
            hits = [h.parent for h in hits]
        if not hits:
            raise LookupError(
                f"{sel!r} is neither a run directory, a run id under {root}, nor an artefact with runs"
            )
        found += [h for h in hits if h not in found]
    return found


def _rewrite_jsonl(path: Path, records: list[dict]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(dumps(rec, sort_keys=True, default=str) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def rescore_run(run_dir: Path, tokenizer: Any = None, exports: bool = True) -> dict[str, Any]:
    """Rescore one run in place and return its new summary.

    Args:
        tokenizer: the target tokenizer for the exports (default: loaded from the run's pair config).

    Raises:
        runners.records.record.RunLockedError: another process is writing the run.
        runners.records.schema.RecordError: a damaged line in ``samples.jsonl`` (nothing is rewritten).
    """

    run_dir = Path(run_dir)
    fd = os.open(run_dir / ".lock", os.O_CREAT | os.O_RDWR)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            raise RunLockedError(
                f"run {run_dir.name} is being written by another process ({run_dir})"
            ) from e
        config, records, summary = read_run(run_dir)
        dataset, samples = dataset_samples(config)
        by_id = {s.sample_id: s for s in samples}
        scored = [r for r in records if r["sample_id"] in by_id]
        scorer = build(SCORERS, {"name": dataset.scorer})
        per = scorer.score(
            [by_id[r["sample_id"]] for r in scored], [r.get("output_text") for r in scored]
        )
        for rec, quality in zip(scored, per):
            rec["quality"] = quality
        _rewrite_jsonl(run_dir / "samples.jsonl", records)
        summary = {k: v for k, v in summary.items() if not k.startswith("quality/")}
        summary.update({f"quality/{k}": v for k, v in scorer.aggregate(per).items()})
        summary["quality/scorer_versions"] = scorer_versions()
        summary["rescored_utc"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        atomic_write_json(run_dir / "summary.json", summary)
    finally:
        os.close(fd)
    if exports:
        write_exports(
            run_dir, samples, tokenizer if tokenizer is not None else target_tokenizer(config)
        )
    return summary


def main(argv: Sequence[str] | None = None) -> int:

    p = argparse.ArgumentParser(
        prog="python -m runners.rescore", description=__doc__.split("\n")[0]
    )
    p.add_argument("selectors", nargs="+", help="run id, run directory or artefact name")
    p.add_argument(
        "--no-exports", action="store_true", help="rescore only; do not rewrite the export files"
    )
    args = p.parse_args(argv)
    console()
    bad_dirs = (
        directory_env_errors()
    )  # as every entry point: a results path naming a file is refused here
    if bad_dirs:
        logger.error("config error: %s", bad_dirs[0])
        return 2
    try:
        runs = select_runs(args.selectors, results_dir() / "runs")
    except LookupError as e:
        logger.error("%s", e)
        return 2
    for run_dir in runs:
        before = (
            get_number(json.loads((run_dir / "summary.json").read_text()), "quality/accuracy")
            if (run_dir / "summary.json").exists()
            else None
        )
        try:
            after = rescore_run(run_dir, exports=not args.no_exports)
        except RecordError as e:  # a damaged record is left as it is (nothing rewritten)
            logger.error("record error: %s", e)
            return 2
        logger.info(
            "rescored %s: accuracy %s -> %s (%s, scoring errors %s)",
            run_dir.name,
            before,
            after.get("quality/accuracy"),
            after.get("quality/metric"),
            after.get("quality/scoring_errors"),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
