"""The sweep tests' own fixture: a single-node Slurm cluster. The runs are tiny-pair runs of ``python -m
runners.main`` (``main_env``: tests/conftest.py; command lines: tests/helpers/cli.py), seconds each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def slurm_cluster() -> dict:
    """A single-node Slurm cluster on this machine (tests/slurm/start_slurm.sh), stopped after the session
    unless it was already running. Skips, with the reason, where Slurm cannot be started."""
    import shutil
    import subprocess
    import time

    from runners.paths import REPO_ROOT

    if os.geteuid() != 0:
        pytest.skip("Slurm tests need root (the test cluster runs slurmd as root)")
    if not (shutil.which("slurmctld") or Path("/usr/sbin/slurmctld").exists()):
        pytest.skip(
            "Slurm is not installed: apt-get install -y slurm-wlm munge slurmdbd mariadb-server"
        )
    slurm_dir = Path(os.environ.get("DROPMATCH_SLURM_DIR", "/tmp/dropmatch-slurm"))
    t0 = time.time()
    p = subprocess.run(
        ["bash", str(REPO_ROOT / "tests" / "slurm" / "start_slurm.sh")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if p.returncode != 0:
        subprocess.run(
            ["bash", str(REPO_ROOT / "tests" / "slurm" / "stop_slurm.sh")],
            capture_output=True,
            timeout=120,
        )
        pytest.skip(f"could not start the Slurm test cluster: {p.stderr.strip()[-1500:]}")
    print(f"[slurm] {p.stderr.strip()} ({time.time() - t0:.1f} s)")
    info = {
        "env": {
            "SLURM_CONF": str(slurm_dir / "etc" / "slurm.conf"),
            "PATH": os.environ.get("PATH", "") + ":/usr/sbin",
        },
        "accounting": (slurm_dir / "accounting").read_text().strip(),
        "dir": slurm_dir,
    }
    yield info
    if "reusing" not in p.stderr:
        subprocess.run(
            ["bash", str(REPO_ROOT / "tests" / "slurm" / "stop_slurm.sh")],
            capture_output=True,
            timeout=120,
        )
