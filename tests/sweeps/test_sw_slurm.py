"""Sweeps through a real (single-node, localhost) Slurm cluster with ``hydra/launcher=slurm``.

The cluster comes from tests/slurm/start_slurm.sh (session fixture ``slurm_cluster``); without Slurm the
tests are skipped with the reason. Jobs run this interpreter in this repository (shared filesystem).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runners.paths import REPO_ROOT
from tests.helpers.cli import main_cmd, raw_sample_ids, run_dirs, run_main

LAUNCHER = [
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
    "hydra.launcher.timeout_min=15",
]

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
pytest.importorskip(
    "hydra_plugins.hydra_submitit_launcher", reason="hydra-submitit-launcher is not installed"
)


def sacct_states(env: dict, job_ids: list[str]) -> dict[str, str]:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-o", "JobID,State", *sum((["-j", j] for j in job_ids), [])],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return dict(line.split("|", 1) for line in out.splitlines() if line)


def submitit_job_ids(results: Path) -> list[str]:
    """Slurm job ids submitit used (its folder is <sweep dir>/.submitit/<job id>)."""
    ids = {
        p.name.split("_")[0]
        for p in results.glob("hydra/multirun/*/.submitit/*")
        if p.name[0].isdigit()
    }
    return sorted(ids)


@pytest.mark.subprocess
def test_2x2_sweep_runs_as_a_slurm_array_and_builds_the_table(slurm_cluster, main_env):
    env = {**main_env, **slurm_cluster["env"]}
    results = Path(env["DROPMATCH_RESULTS"])
    t0 = time.time()
    p = run_main(env, "method=sd,dropmatch", "L=2,3", *LAUNCHER, multirun=True, timeout=900)
    print(f"sweep took {time.time() - t0:.0f} s")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Submitit 'slurm' sweep output dir" in p.stdout + p.stderr
    assert "4 runs: 4 done, 0 skipped, 0 concurrent, 0 failed, 0 unreported" in p.stderr

    dirs = run_dirs(results)
    assert len(dirs) == 4
    cells = set()
    for d in dirs:
        cfg, summary = (
            json.loads((d / "config.json").read_text()),
            json.loads((d / "summary.json").read_text()),
        )
        assert summary["complete"] and summary["num_samples"] == 1
        assert raw_sample_ids(d) == ["gsm8k/test/0"]
        cells.add((cfg["method"]["name"], cfg["L"]))
    assert cells == {("sd", 2), ("sd", 3), ("dropmatch", 2), ("dropmatch", 3)}

    if slurm_cluster["accounting"] == "slurmdbd":  # the runs really were Slurm jobs
        (job,) = submitit_job_ids(results)
        for _ in range(60):  # results arrive just before each task's process exits
            states = sacct_states(env, [job])
            if set(states.values()) == {"COMPLETED"}:
                break
            time.sleep(0.5)
        assert sorted(states) == [f"{job}_{i}" for i in range(4)] and set(states.values()) == {
            "COMPLETED"
        }

    table = REPO_ROOT / "analysis" / "tables" / "table6.py"
    if (
        table.exists()
    ):  # the artefact table rebuilds from the four records, as after ./reproduce.sh table6
        t = subprocess.run(
            [sys.executable, "-m", "analysis.tables.table6", "--profile", "smoke"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert t.returncode == 0, t.stdout + t.stderr
        md = (results / "table6" / "table6.md").read_text()
        assert md.count("| SD+DM ") == 2 and md.count("| SD ") == 2


@pytest.mark.subprocess
def test_job_cancelled_by_slurm_resumes_on_rerun_without_duplicates(slurm_cluster, main_env):
    if slurm_cluster["accounting"] != "slurmdbd":
        pytest.skip(
            "needs Slurm accounting (sacct) so submitit sees the cancelled job: install slurmdbd mariadb-server"
        )
    env = {**main_env, **slurm_cluster["env"]}
    results = Path(env["DROPMATCH_RESULTS"])
    # far more than fits in Slurm's KillWait (5 s from SIGTERM, which submitit ignores, to SIGKILL): with 24
    # samples of 48 tokens an idle machine finished the job inside KillWait once and the sweep exited 0
    n = 80
    sweep = [
        "method=dropmatch",
        "L=2",
        f"dataset.limit={n}",
        "decoding.max_new_tokens=64",
        *LAUNCHER,
    ]
    p = subprocess.Popen(
        main_cmd(*sweep, multirun=True),
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 600
        while (
            time.time() < deadline and p.poll() is None
        ):  # wait until the job has recorded a sample
            dirs = run_dirs(results)
            if dirs and len(raw_sample_ids(dirs[0])) >= 1:
                break
            time.sleep(0.2)
        assert p.poll() is None, "the sweep ended before it could be cancelled"
        (job,) = submitit_job_ids(results)
        subprocess.run(["scancel", job], env=env, check=True)
        out, err = p.communicate(
            timeout=400
        )  # submitit sees CANCELLED in sacct and the sweep fails
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0
    assert "unreported" in err and "rerun the same command to resume" in err
    states = sacct_states(env, [job])  # one run: submitit submits a plain job, not an array
    assert (states.get(job) or states.get(f"{job}_0", "")).startswith("CANCELLED"), states
    (run_dir,) = run_dirs(results)
    partial = raw_sample_ids(run_dir)
    assert 1 <= len(partial) < n and len(partial) == len(set(partial))
    assert not (run_dir / "summary.json").exists()

    again = run_main(env, *sweep, multirun=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    ids = raw_sample_ids(run_dir)
    assert (
        sorted(ids) == sorted(f"gsm8k/test/{i}" for i in range(n))
        and ids[: len(partial)] == partial
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["num_samples"] == n
    sessions = json.loads((run_dir / "meta.json").read_text())["sessions"]
    assert [s["num_done_at_start"] for s in sessions][-1] >= len(partial)
