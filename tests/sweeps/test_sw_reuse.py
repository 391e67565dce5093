"""A rerun after a change of the decision code is detected, not silently reused (runners/records/reuse.py, fingerprint.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runners.paths import REPO_ROOT
from runners.records import fingerprint
from runners.records.fingerprint import (
    DECISION_ROOTS,
    decision_code,
    fingerprint_of,
    rules_decision_code,
    run_decision_code,
)
from runners.records.legacy_fingerprints import LEGACY_FILE, current_value
from tests.helpers.cli import run_dirs, run_main

RUN = ["method=dropmatch", "L=2", "dataset.limit=1", "decoding.max_new_tokens=4"]
OTHER = "0" * 64


def _copy_roots(dst_root: Path) -> None:
    for entry in DECISION_ROOTS:
        src, dst = REPO_ROOT / entry, dst_root / entry
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst)


def test_fingerprint_counts_code_not_comments_docstrings_or_paths(tmp_path, monkeypatch):
    _copy_roots(tmp_path)
    base = fingerprint_of("rejection", "hf", tmp_path)["fingerprint"]
    assert base == fingerprint_of("rejection", "hf")["fingerprint"]
    rule = tmp_path / "criteria" / "greedy_match.py"
    text = rule.read_text()
    rule.write_text(text.replace('"""', '"""Edited docstring. ', 1) + "\n# a comment\n")
    assert fingerprint_of("rejection", "hf", tmp_path)["fingerprint"] == base
    # a module moved to another package, its importers following it: same code, same fingerprint
    counters = tmp_path / "runners" / "records" / "counters.py"
    (tmp_path / "runners" / "metrics").mkdir()
    counters.rename(tmp_path / "runners" / "metrics" / "counters.py")
    for f in (tmp_path / "runners").rglob("*.py"):
        f.write_text(f.read_text().replace("runners.records.counters", "runners.metrics.counters"))
    monkeypatch.setattr(
        fingerprint, "DECISION_ROOTS", (*DECISION_ROOTS, "runners/metrics/counters.py")
    )
    moved = fingerprint_of("rejection", "hf", tmp_path)
    assert "runners.metrics.counters" in moved["modules"] and moved["fingerprint"] == base
    rule.write_text(text + "\nTHRESHOLD_FOR_TEST = 1\n")
    assert fingerprint_of("rejection", "hf", tmp_path)["fingerprint"] != base


def test_fingerprint_covers_the_runs_own_rule_and_backend_only(tmp_path):
    """A rule a run does not use can change (or be added) without marking its records stale."""
    _copy_roots(tmp_path)
    sd, dm = (
        fingerprint_of("rejection", "hf", tmp_path),
        fingerprint_of("dropmatch_js", "hf", tmp_path),
    )
    assert "criteria.dropmatch_js" in dm["modules"] and "criteria.dropmatch_js" not in sd["modules"]
    assert "runners.backends.hf_loop" in sd["modules"] and "criteria.verify" in sd["modules"]
    (tmp_path / "criteria" / "new_rule_for_test.py").write_text("X = 1\n")
    js = tmp_path / "criteria" / "dropmatch_js.py"
    js.write_text(js.read_text() + "\nY = 2\n")
    assert fingerprint_of("rejection", "hf", tmp_path)["fingerprint"] == sd["fingerprint"]
    assert fingerprint_of("dropmatch_js", "hf", tmp_path)["fingerprint"] != dm["fingerprint"]


def test_a_run_of_several_rules_is_fingerprinted_over_them_all():
    """bench decides with several rules: one fingerprint over theirs, whatever their order or repeats, naming
    them; another set of rules gives another fingerprint."""
    arms = [("autoregressive", "hf"), ("rejection", "hf"), ("dropmatch_js", "hf")]
    code = rules_decision_code(arms)
    assert code == rules_decision_code([*reversed(arms), arms[0]])
    assert code["rules"] == ["autoregressive@hf", "dropmatch_js@hf", "rejection@hf"]
    assert code["fingerprint"] != rules_decision_code(arms[:2])["fingerprint"]
    assert set(decision_code("dropmatch_js", "hf")["modules"]) <= set(code["modules"])


def test_legacy_fingerprints_map_to_the_current_scheme():
    """Records made before per-run fingerprints keep their status: at the commit that made them, their code
    had the scheme-2 fingerprint the map gives (computed by ``python -m runners.records.fingerprint --legacy``)."""
    legacy = json.loads(LEGACY_FILE.read_text())
    assert legacy and all(len(k) == 64 for k in legacy)
    one = next(iter(legacy.values()))
    assert current_value(next(iter(legacy)), "rejection", "hf") == one["rejection@hf"]
    assert current_value(OTHER, "rejection", "hf") == OTHER  # an unknown value stays itself (stale)
    assert current_value(next(iter(legacy)), "no_such_rule", "hf") is None


def _files(run_dir: Path) -> dict[str, bytes]:
    """Every file of a record by its path inside it, with its bytes."""
    return {str(f.relative_to(run_dir)): f.read_bytes() for f in run_dir.rglob("*") if f.is_file()}


def _tamper(run_dir: Path) -> None:
    """Make the record look as if another version of the decision code had made it."""
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["decision_code"]["fingerprint"] = OTHER
    for s in meta["sessions"]:
        s["decision_code"]["fingerprint"] = OTHER
    (run_dir / "meta.json").write_text(json.dumps(meta))


@pytest.mark.subprocess
def test_stale_record_is_warned_about_or_rerun(main_env):
    """Before: a finished run was skipped whatever code had made it. Now reuse=warn (default) says so and notes it;
    reuse=strict moves the old record to results/stale/ and runs again."""
    results = Path(main_env["DROPMATCH_RESULTS"])
    first = run_main(main_env, *RUN, multirun=True)
    assert first.returncode == 0, first.stdout + first.stderr
    (run_dir,) = run_dirs(results)
    now = run_decision_code(json.loads((run_dir / "config.json").read_text()))["fingerprint"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["decision_code"] == now and summary["decision_codes"] == [now]
    assert json.loads((run_dir / "meta.json").read_text())["decision_code"]["fingerprint"] == now
    samples = (run_dir / "samples.jsonl").read_text()

    # what reproduce.sh reads to skip a vLLM sweep that has nothing to decode: every point finished on record
    check = run_main({**main_env, "DROPMATCH_CHECK_ONLY": "1"}, *RUN, multirun=True)
    assert (
        "[sweep] checked: 1 points valid, 1 of them finished on record; nothing ran" in check.stderr
    )

    _tamper(run_dir)
    tampered = _files(run_dir)
    warn = run_main(main_env, *RUN, multirun=True)
    assert warn.returncode == 0, warn.stdout + warn.stderr
    assert (
        f"finished by other decision code ({OTHER[:12]}; this checkout: {now[:12]}); reused as is "
        f"(reuse=warn; rerun with reuse=strict to recompute)"
    ) in warn.stderr
    assert "WARNING [runners.records.reuse]" in warn.stderr and "decision code" not in warn.stdout
    assert "1 runs: 0 done, 1 skipped" in warn.stderr
    assert (
        "[sweep] WARNING: 1 of the skipped runs were made by other decision code and reused"
        in warn.stderr
    )
    assert "Loading weights" not in warn.stdout + warn.stderr
    # a reuse reads the record only: rebuilding a table from committed records leaves them as committed
    assert _files(run_dir) == tampered

    strict = run_main(main_env, *RUN, "reuse=strict", multirun=True)
    assert strict.returncode == 0, strict.stdout + strict.stderr
    assert "; moved to " in strict.stderr and "run again (reuse=strict)" in strict.stderr
    assert "1 runs: 1 done, 0 skipped" in strict.stderr
    (old,) = (results / "stale").iterdir()
    assert (
        old.name.startswith(run_dir.name + "-") and (old / "samples.jsonl").read_text() == samples
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["decision_codes"] == [now]

    again = run_main(main_env, *RUN, multirun=True)
    assert (
        "1 runs: 0 done, 1 skipped" in again.stderr and "WARNING" not in again.stdout + again.stderr
    )


class _StaleRecord:
    """A finished record another decision code made (what :func:`runners.records.reuse.check` reads of it)."""

    run_id = "0123abcd"
    cfg = {"method": {"criterion": "rejection"}, "backend": {"name": "hf"}}

    def __init__(self) -> None:
        self.meta = {"sessions": [{"decision_code": {"fingerprint": OTHER}}]}

    def read_meta(self) -> dict:
        return self.meta

    def note(self, key: str, entry: dict) -> None:
        self.meta.setdefault(key, []).append(entry)


def test_reuse_warning_goes_to_stderr(capfd, monkeypatch):
    """The terminal's rule (runners/sweep/console.py): INFO on stdout, warnings on stderr. Before: the reuse
    warning was logged at INFO through the run's progress log, so it went to stdout."""
    import logging

    from runners.records.reuse import check
    from runners.sweep.console import console

    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    console()
    got = check(_StaleRecord(), "warn", {"complete": True}, "sd L=2 gsm8k n=1")
    assert got == {"complete": True, "stale_decision_code": True}
    out, err = capfd.readouterr()
    assert out == ""
    assert (
        "WARNING [runners.records.reuse] [run 0123abcd] sd L=2 gsm8k n=1: finished by other decision code"
        in err
    )
