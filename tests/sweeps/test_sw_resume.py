"""Resuming real runs (tiny pair, GSM8K): SIGKILL at random points, reruns of finished sweeps."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from runners.paths import REPO_ROOT
from tests.helpers.cli import main_cmd, raw_sample_ids, run_dirs, run_main

N = 5
RUN = ["method=dropmatch", "L=2", f"dataset.limit={N}", "decoding.max_new_tokens=32"]
EXPECTED = {f"gsm8k/test/{i}" for i in range(N)}


def _kill_at_random_point(env: dict, rng: random.Random, results: Path, log: Path) -> str:
    """Start the run, SIGKILL it at a random point (during start-up or after a random sample); say where."""
    dirs = run_dirs(results)
    base = len(raw_sample_ids(dirs[0])) if dirs else 0
    with open(log, "a") as out:
        p = subprocess.Popen(
            main_cmd(*RUN), cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        if base == N or rng.random() < 0.2:
            delay = rng.uniform(
                0.5, 8.0
            )  # imports, config, dataset, model load, the first sample or the summary
            time.sleep(delay)
            where = f"{delay:.1f}s after start"
        else:
            target = rng.randint(base + 1, min(N, base + 2))  # a sample this process writes
            while p.poll() is None:
                dirs = run_dirs(results)
                if dirs and len(raw_sample_ids(dirs[0])) >= target:
                    break
                time.sleep(0.02)
            extra = rng.uniform(0.0, 0.8)  # inside the next sample, or in the summary
            time.sleep(extra)
            where = f"{extra:.2f}s after sample {target} was recorded"
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait()
    return where if p.returncode == -signal.SIGKILL else f"finished before the kill ({where})"


@pytest.mark.subprocess
@pytest.mark.slow
def test_sigkill_at_random_points_then_rerun_completes_each_sample_once(main_env, tmp_path):
    rng = random.Random(20261130)
    results = Path(main_env["DROPMATCH_RESULTS"])
    log = tmp_path / "runs.log"
    history = []
    for _ in range(6):
        where = _kill_at_random_point(main_env, rng, results, log)
        ids = raw_sample_ids(run_dirs(results)[0]) if run_dirs(results) else []
        assert len(ids) == len(set(ids)), f"duplicate sample lines after a kill {where}: {ids}"
        assert not history or len(ids) >= history[-1][1], "a recorded sample disappeared"
        history.append((where, len(ids)))

    final = run_main(main_env, *RUN, timeout=600)
    assert final.returncode == 0, final.stdout + final.stderr
    (run_dir,) = run_dirs(results)
    ids = raw_sample_ids(run_dir)
    assert sorted(ids) == sorted(EXPECTED), (ids, history)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] is True and summary["num_samples"] == N == summary["num_expected"]
    assert summary["spec/counters"]["num_drafts"] > 0
    meta = json.loads((run_dir / "meta.json").read_text())
    done_at_start = [s["num_done_at_start"] for s in meta["sessions"]]
    assert done_at_start == sorted(done_at_start)
    print("kills:", history, "sessions started with", done_at_start, "samples done")


@pytest.mark.subprocess
@pytest.mark.slow
def test_rerun_of_a_finished_sweep_skips_every_run(main_env):
    sweep = ["method=sd,dropmatch", "L=2"]
    first = run_main(main_env, *sweep, multirun=True)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 runs: 2 done, 0 skipped, 0 concurrent, 0 failed" in first.stderr
    assert first.stderr.count("W&B logging is off; enable it with logger=wandb") == 1
    results = Path(main_env["DROPMATCH_RESULTS"])
    before = {d.name: (d / "meta.json").read_text() for d in run_dirs(results)}
    assert len(before) == 2

    again = run_main(main_env, *sweep, multirun=True)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 runs: 0 done, 2 skipped, 0 concurrent, 0 failed" in again.stderr
    assert again.stdout.count("finished earlier, skipped") == 2
    assert "Loading weights" not in again.stdout + again.stderr  # no model was loaded
    assert {
        d.name: (d / "meta.json").read_text() for d in run_dirs(results)
    } == before  # records untouched


def test_run_locked_by_another_process_is_left_to_it(tmp_path, monkeypatch, tiny_pair_dir):
    """Two points of one parallel sweep with the same identity (AR at L=5 and L=10): the second one
    neither waits nor fails nor writes; the lock holder finishes the run."""
    from hydra import compose, initialize_config_dir

    import runners.models.loader as loader
    from runners.config.resolve import resolve_run_config
    from runners.records.record import RunRecord
    from runners.run import run

    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path))
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(tiny_pair_dir))
    monkeypatch.setattr(loader, "load_pair", lambda *a, **k: pytest.fail("a model was loaded"))
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("run", overrides=["pair=tiny", "profile=smoke", "method=ar", "L=10"])
    holder = RunRecord(tmp_path / "runs", resolve_run_config(cfg))
    with holder:
        holder.open({})
        out = run(cfg, log=lambda *_: None)
    assert out == {"run_id": holder.run_id, "complete": False, "running_elsewhere": True}
    assert not holder.samples_path.exists()
