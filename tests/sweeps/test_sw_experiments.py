"""Every artefact's sweep composes and validates under every profile (lightning-hydra-template's
``experiment=glob(*)`` test): each ``conf/experiment/*.yaml`` x ``conf/profile/*.yaml`` is composed as
``python -m runners.main -m`` composes it, split into its sweep points as Hydra's basic sweeper splits them, and
every point is resolved and validated as the sweep callbacks do before launching. Nothing loads a model.

GPU and vLLM checks answer "present", so the paper profile and the vLLM artefacts are validated too. A point may
be refused only for what this machine lacks (a measurement's input records, an Auto-Judge judge not built here)
or, under a profile that decodes with vLLM, for a method the vLLM backend has no decoding for (the message names
backend=vllm and the methods it does run). Any other refusal is a config bug. The default profile is in the
quick loop; the others are slow (every point of every sweep: minutes).
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from runners.autojudge.artefact import JudgeMissingError
from runners.config import validate
from runners.config.errors import ConfigError
from runners.main import job_of
from runners.measure import MissingRecordsError
from runners.paths import REPO_ROOT
from runners.sweep.callbacks import sweep_job_overrides

EXPERIMENTS = sorted(  # frontier/<rule>.yaml too; _common.yaml files are included by others
    p.relative_to(REPO_ROOT / "conf" / "experiment").with_suffix("").as_posix()
    for p in (REPO_ROOT / "conf" / "experiment").rglob("*.yaml")
    if not p.name.startswith("_")
)
PROFILES = sorted(p.stem for p in (REPO_ROOT / "conf" / "profile").glob("*.yaml"))
ABSENT_HERE = (MissingRecordsError, JudgeMissingError)  # the message says how to make it
CASES = [
    pytest.param(e, p, marks=() if p == "default" else pytest.mark.slow, id=f"{e}-{p}")
    for e in EXPERIMENTS
    for p in PROFILES
]


def sweep_points(experiment: str, profile: str) -> list[list[str]]:
    """The override list of every job ``-m experiment=<experiment> profile=<profile>`` launches."""
    cfg = compose(
        "run",
        overrides=[f"experiment={experiment}", f"profile={profile}"],
        return_hydra_config=True,
    )
    jobs = sweep_job_overrides(cfg)
    assert jobs, f"experiment={experiment}: its sweep could not be split into points"
    return jobs


@pytest.fixture
def hardware_present(monkeypatch, tmp_path):
    """GPU and the vLLM package reported present; an empty results directory (no records, no judges)."""
    monkeypatch.setattr(validate, "gpu_available", lambda: True)
    monkeypatch.setattr(validate, "installed", lambda package: True)
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "results"))


def test_the_glob_covers_every_artefact_and_profile():
    assert {"table1", "table6", "table8", "fig3", "fig3_measure", "bench"} <= set(EXPERIMENTS)
    assert (
        "frontier/fly" in EXPERIMENTS
        and len(EXPERIMENTS) >= 25
        and {"default", "full", "paper", "smoke"} <= set(PROFILES)
    )


@pytest.mark.parametrize("experiment,profile", CASES)
def test_every_sweep_point_validates(experiment, profile, hardware_present):
    outcome = {"valid": 0, "absent": 0, "vllm_has_no_mode": 0}
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        for job in sweep_points(experiment, profile):
            point = compose("run", overrides=job)
            assert point.artefact, job  # every point says which artefact it belongs to
            try:
                resolved = job_of(point).resolve(point, identify_models=False)
            except ABSENT_HERE:
                outcome["absent"] += 1
                continue
            except ConfigError as e:
                assert point.backend.name == "vllm" and "backend=vllm" in str(e), (job, str(e))
                outcome["vllm_has_no_mode"] += 1
                continue
            assert resolved["profile"]["name"] == profile and resolved["artefact"] == point.artefact
            outcome["valid"] += 1
    if experiment == "fig3_measure" and profile != "paper":
        assert outcome == {
            "valid": 0,
            "absent": 2,
            "vllm_has_no_mode": 0,
        }  # reads decodes not made here
    if profile == "default":  # the CPU profile runs every artefact's every point (given its inputs)
        assert outcome["vllm_has_no_mode"] == 0 and outcome["valid"] + outcome["absent"] > 0
