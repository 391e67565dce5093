"""Logging (runners/sweep/console.py, conf/hydra/job_logging/dropmatch.yaml): a run through Hydra's entry point fills its
job log file and keeps the terminal lines plain; DROPMATCH_LOG_LEVEL switches verbosity and is validated."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import pytest

from runners.run import run_tag
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
    # the two tok/s figures say which they are (the progress line's elapsed-time rate, the record's per-item mean)
    assert re.search(r" tok/s=[0-9.]+ \(mean per item, prefill excluded\) ", out_line), out_line
    assert "1/1 samples, " in text and " tok/s over the elapsed time, tau " in text
    assert summary not in p.stderr
    # lm-eval's progress lines (the lm-eval export) go to stderr, not stdout, and into the job log
    lm_eval_line = "Building contexts for gsm8k"
    assert lm_eval_line not in p.stdout and "Setting random seed" not in p.stdout, p.stdout
    assert lm_eval_line in p.stderr and lm_eval_line in text


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


def test_to_stderr_moves_a_librarys_lines_and_prints_keeping_the_log_file(capsys, tmp_path):
    """Inside :func:`runners.sweep.console.to_stderr`: the named loggers' INFO lines and print() go to stderr
    (plain), their warnings keep level and logger; the root's file handler still gets them; after it, all is as
    before (the library logs through the root again, stdout is stdout)."""
    from runners.sweep.console import console_handlers, to_stderr

    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    fh = logging.FileHandler(tmp_path / "job.log")
    root.handlers[:] = [*console_handlers(), fh]
    root.setLevel(logging.INFO)
    lib = logging.getLogger("somelib.sub")
    try:
        with to_stderr("somelib"):
            lib.info("Building contexts")
            lib.warning("careful")
            print("printed by the library")
        lib.info("after")
        logging.getLogger("runners.x").info("ours")
        out, err = capsys.readouterr()
        assert out == "after\nours\n", out
        assert (
            err == "Building contexts\nWARNING [somelib.sub] careful\nprinted by the library\n"
        ), err
        fh.flush()
        log = (tmp_path / "job.log").read_text()
        assert "Building contexts" in log and "careful" in log and "after" in log
        assert logging.getLogger("somelib").propagate and not logging.getLogger("somelib").handlers
    finally:
        fh.close()
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]


def test_run_tag_says_an_ar_run_leaves_the_sweeps_L_unused():
    """An AR run's resolved L is 0 while Hydra's line shows the grid's L: the run line names both."""
    ar = {"L": 0, "method": {"name": "ar"}, "dataset": {"name": "gsm8k"}}
    sd = {"L": 5, "method": {"name": "sd"}, "dataset": {"name": "gsm8k"}}
    assert run_tag(ar, 5, 10) == "ar L=0 (autoregressive: the sweep's L=5 unused) gsm8k n=10"
    assert run_tag(ar, None, 3) == "ar L=0 gsm8k n=3"
    assert run_tag(sd, 5, 10) == "sd L=5 gsm8k n=10"
