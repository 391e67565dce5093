"""Logging (runners/sweep/console.py, conf/hydra/job_logging/dropmatch.yaml): a run through Hydra's entry point fills its
job log file and keeps the terminal lines plain; DROPMATCH_LOG_LEVEL switches verbosity and is validated."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from runners.sweep.console import Console, console, level
from tests.helpers.cli import run_main


def _job_logs(main_env) -> list[Path]:
    return sorted((Path(main_env["DROPMATCH_RESULTS"]) / "hydra").rglob("main.log"))


@pytest.mark.subprocess
def test_run_fills_its_hydra_job_log(main_env, runs_root):
    p = run_main(
        main_env, "method=sd", "L=2", "dataset.limit=1", "decoding.max_new_tokens=4", multirun=False
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = list(runs_root.iterdir())
    (log,) = _job_logs(main_env)
    text = log.read_text()
    summary = f"[run {rec.name}] done: tau="
    assert summary in text and "[runners.run][INFO]" in text  # time, logger and level in the file
    assert f"[run {rec.name}] sd L=2 gsm8k n=1: 0 done, 1 to go" in text  # the progress lines too
    out_line = next(ln for ln in p.stdout.splitlines() if summary in ln)
    assert out_line.startswith(summary)  # the terminal line stays plain
    assert summary not in p.stderr


@pytest.mark.subprocess
def test_log_level_switch(main_env, monkeypatch):
    """WARNING hides the INFO lines on the terminal and in the job log; a bad value exits 2 before Hydra runs."""
    main_env["DROPMATCH_LOG_LEVEL"] = "warning"
    p = run_main(
        main_env, "method=ar", "dataset.limit=1", "decoding.max_new_tokens=3", multirun=False
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert "done: tau=" not in p.stdout
    (log,) = _job_logs(main_env)
    assert "done: tau=" not in log.read_text()
    main_env["DROPMATCH_LOG_LEVEL"] = "loud"
    bad = run_main(main_env, "method=ar", multirun=False)
    assert (
        bad.returncode == 2
        and "DROPMATCH_LOG_LEVEL='loud' is invalid; allowed: DEBUG, INFO, WARNING" in bad.stderr
    )


def test_console_splits_streams_and_follows_replaced_streams(capsys, monkeypatch):
    monkeypatch.setenv("DROPMATCH_LOG_LEVEL", "INFO")
    log = logging.getLogger("dropmatch_test_console")
    log.propagate = False
    try:
        console(logger=log)
        console(logger=log)  # idempotent: still one pair of console handlers
        assert sum(isinstance(h, Console) for h in log.handlers) == 2
        log.info("progress line")
        log.warning("something odd")
        log.debug("hidden")
        cap = capsys.readouterr()
        assert cap.out == "progress line\n"
        assert cap.err == "WARNING [dropmatch_test_console] something odd\n"
        assert all(h.stream in (sys.stdout, sys.stderr) for h in log.handlers)
    finally:
        log.handlers.clear()
    monkeypatch.setenv("DROPMATCH_LOG_LEVEL", "verbose")
    with pytest.raises(ValueError, match="DROPMATCH_LOG_LEVEL='verbose' is invalid"):
        level()
