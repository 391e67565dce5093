"""The frontier's sweep size per profile: the default profile runs the hour-sized subset (GSM8K, one p_drop, the
middle setting of each rule), deleting ``profile.artefacts.frontier.settings`` gives every rule its settings from
near-lossless to aggressive, and ``profile=full`` runs them all. Composition only: nothing loads a model."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from runners.paths import REPO_ROOT
from runners.sweep.callbacks import sweep_job_overrides

RULES = sorted(
    p.stem
    for p in (REPO_ROOT / "conf" / "experiment" / "frontier").glob("*.yaml")
    if p.stem[0] != "_"
)


def _points(extra: list[str]) -> dict[str, list[list[str]]]:
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return {
            r: sweep_job_overrides(
                compose(
                    "run", overrides=[f"experiment=frontier/{r}", *extra], return_hydra_config=True
                )
            )
            for r in RULES
        }


def _knob(job: list[str]) -> str:
    return next(
        o for o in job if o.startswith("method.kwargs.") and not o.startswith("method.kwargs.top_k")
    )


def test_default_profile_runs_eleven_gsm8k_points():
    pts = _points([])
    assert len(RULES) == 8 and "baselines" in RULES
    assert sum(len(v) for v in pts.values()) == 11  # AR, SD, DM JS, DM naive + 7 rules x 1 setting
    assert all("dataset=gsm8k" in j for v in pts.values() for j in v)
    assert {o for j in pts["baselines"] for o in j if o.startswith("dropmatch.p_drop")} == {
        "dropmatch.p_drop=0.3"
    }
    assert [_knob(j) for j in pts["fly"]] == ["method.kwargs.entropy_threshold=0.6"]


@pytest.mark.parametrize("extra", [["~profile.artefacts.frontier.settings"], ["profile=full"]])
def test_every_setting_when_the_profile_picks_none(extra):
    pts = _points(extra)
    for r in RULES:
        if r == "baselines":
            continue
        knobs = {_knob(j) for j in pts[r]}
        assert len(knobs) == 3, (r, knobs)  # near-lossless, middle, aggressive
    assert [_knob(j) for j in pts["typical"]][:3] == [
        "method.kwargs.posterior_threshold=0.3",
        "method.kwargs.posterior_threshold=0.09",
        "method.kwargs.posterior_threshold=0.02",
    ]
