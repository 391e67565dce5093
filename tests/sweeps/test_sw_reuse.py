"""A rerun after a change of the decision code is detected, not silently reused (runners/reuse.py, fingerprint.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from sweep_helpers import run_dirs, run_main

from runners.fingerprint import DECISION_SOURCES, fingerprint
from runners.paths import REPO_ROOT

RUN = ["method=dropmatch", "L=2", "dataset.limit=1", "decoding.max_new_tokens=4"]
OTHER = "0" * 64


def test_fingerprint_counts_code_not_comments_or_docstrings(tmp_path):
    for entry in DECISION_SOURCES:
        src, dst = REPO_ROOT / entry, tmp_path / entry
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)
    base = fingerprint(tmp_path)
    assert base == fingerprint(REPO_ROOT)
    rule = tmp_path / "criteria" / "greedy_match.py"
    text = rule.read_text()
    rule.write_text(text.replace('"""', '"""Edited docstring. ', 1) + "\n# a comment\n")
    assert fingerprint(tmp_path) == base
    rule.write_text(text + "\nTHRESHOLD_FOR_TEST = 1\n")
    assert fingerprint(tmp_path) != base


def _tamper(run_dir: Path) -> None:
    """Make the record look as if another version of the decision code had made it."""
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["decision_code"]["fingerprint"] = OTHER
    for s in meta["sessions"]:
        s["decision_code"]["fingerprint"] = OTHER
    (run_dir / "meta.json").write_text(json.dumps(meta))


def test_stale_record_is_warned_about_or_rerun(sweep_env):
    """Before: a finished run was skipped whatever code had made it. Now reuse=warn (default) says so and notes it;
    reuse=strict moves the old record to results/stale/ and runs again."""
    results = Path(sweep_env["DROPMATCH_RESULTS"])
    first = run_main(sweep_env, *RUN, multirun=True)
    assert first.returncode == 0, first.stdout + first.stderr
    (run_dir,) = run_dirs(results)
    now = fingerprint()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["decision_code"] == now and summary["decision_codes"] == [now]
    assert json.loads((run_dir / "meta.json").read_text())["decision_code"]["fingerprint"] == now
    samples = (run_dir / "samples.jsonl").read_text()

    _tamper(run_dir)
    warn = run_main(sweep_env, *RUN, multirun=True)
    assert warn.returncode == 0, warn.stdout + warn.stderr
    assert (
        f"WARNING: finished by other decision code ({OTHER[:12]}; this checkout: {now[:12]}); reused as is "
        f"(reuse=warn; rerun with reuse=strict to recompute)"
    ) in warn.stdout
    assert "1 runs: 0 done, 1 skipped" in warn.stderr
    assert (
        "[sweep] WARNING: 1 of the skipped runs were made by other decision code and reused"
        in warn.stderr
    )
    assert "Loading weights" not in warn.stdout + warn.stderr
    (reuse,) = json.loads((run_dir / "meta.json").read_text())["stale_reuses"]
    assert reuse["decision_code"] == now and reuse["recorded"] == [OTHER]
    assert (run_dir / "samples.jsonl").read_text() == samples

    strict = run_main(sweep_env, *RUN, "reuse=strict", multirun=True)
    assert strict.returncode == 0, strict.stdout + strict.stderr
    assert "; moved to " in strict.stdout and "run again (reuse=strict)" in strict.stdout
    assert "1 runs: 1 done, 0 skipped" in strict.stderr
    (old,) = (results / "stale").iterdir()
    assert (
        old.name.startswith(run_dir.name + "-") and (old / "samples.jsonl").read_text() == samples
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["decision_codes"] == [now]

    again = run_main(sweep_env, *RUN, multirun=True)
    assert (
        "1 runs: 0 done, 1 skipped" in again.stderr and "WARNING" not in again.stdout + again.stderr
    )
