"""Tables 8-9 and Figs. 1, 5, 6 build from the records of tiny runs (a judge built on the tiny pair, then SD /
AJ / AJ+DM runs through runners.run), and the judge build refuses what it cannot build."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from runners.paths import REPO_ROOT

pytestmark = pytest.mark.slow
THRESHOLDS = (0.1, 0.5)


@pytest.fixture(scope="module")
def tiny_records(tiny_pair_dir, tmp_path_factory):
    """A judge and the runs of the five artefacts on the tiny pair (profile=smoke, L=3) in one results dir."""
    from runners.autojudge.build import build
    from runners.run import run
    from omegaconf import OmegaConf

    results = tmp_path_factory.mktemp("aj_results")
    old = {k: os.environ.get(k) for k in ("DROPMATCH_RESULTS", "DROPMATCH_TINY_PAIR")}
    os.environ.update(DROPMATCH_RESULTS=str(results), DROPMATCH_TINY_PAIR=str(tiny_pair_dir))
    quiet = lambda *_: None  # noqa: E731
    base = ["pair=tiny", "profile=smoke", "L=3", "progress=quiet"]
    aj = ["method.judge.mining.label=correctness"]  # the random tiny target never answers: label=answer skips all
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        c = OmegaConf.to_container(compose(config_name="run", overrides=["method=autojudge", *base, *aj]), resolve=True)
        build(c["pair"], c["method"]["judge"], log=quiet)
        for ds in ("gsm8k", "ifeval", "humaneval"):
            run(compose(config_name="run", overrides=["method=sd", f"dataset={ds}", *base]), log=quiet)
            for thr in THRESHOLDS:
                run(compose(config_name="run", overrides=["method=autojudge", f"dataset={ds}", f"method.threshold={thr}",
                                                          *base, *aj]), log=quiet)
                for p in (0.2, 0.3):
                    run(compose(config_name="run", overrides=["method=autojudge_dropmatch", f"dataset={ds}",
                                                              f"method.threshold={thr}", f"dropmatch.p_drop={p}", *base, *aj]),
                        log=quiet)
    yield results
    for k, v in old.items():
        os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def test_table8(tiny_records):
    from analysis.tables import table8

    t = table8.main(["--profile", "smoke"])
    assert list(t["Method"]) == ["SD"] + ["AJ", "AJ+DM"] * len(THRESHOLDS)
    assert list(t["Threshold"][1:]) == [f"{x:g}" for x in THRESHOLDS for _ in range(2)]
    assert t["vs AJ"].iloc[2].endswith("×") and t["vs SD L=3"].iloc[1].endswith("×")
    md = (tiny_records / "table8" / "table8.md").read_text()
    assert "mined 2 prompts of gsm8k/test from item 1000" in md and "recall of important mismatches" in md
    assert "never evaluates" in md


def test_table9_humaneval_stand_in(tiny_records):
    from analysis.tables import table9

    t = table9.main(["--profile", "smoke"])
    assert list(t["Threshold"]) == ["SD (L=3)"] + [f"{x:g}" for x in THRESHOLDS]
    assert "STAND-IN" in (tiny_records / "table9" / "table9.md").read_text()


def test_fig5_fig6(tiny_records):
    from analysis.figures import fig5, fig6

    p5 = fig5.main(["--profile", "smoke"])
    assert set(p5["method"]) == {"SD", "AJ", "AJ+DM"} and sorted(p5["p_drop"].dropna().unique()) == [0.2, 0.3]
    p6 = fig6.main(["--profile", "smoke"])
    assert len(p6[(p6["method"] == "AJ+DM") & (p6["p_drop"] == 0.3)]) == len(THRESHOLDS)
    for name in ("fig5", "fig6"):
        assert (tiny_records / name / f"{name}.png").stat().st_size > 1000


def test_fig1_part_a_and_pending_b(tiny_records):
    from analysis.figures import fig1

    f = fig1.main(["--profile", "smoke", "--threshold", "0.5"])
    assert set(f["benchmark"]) == {"GSM8K (in domain)", "IFEval (OOD)"} and set(f["method"]) == {"SD", "AJ (thr 0.5)"}
    assert "pending: part b" in (tiny_records / "fig1" / "fig1.md").read_text()
    assert (tiny_records / "fig1" / "fig1.png").is_file()


def test_build_refuses_what_it_cannot_build(tmp_path):
    env = {**os.environ, "DROPMATCH_RESULTS": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-m", "runners.autojudge.build", "method=autojudge", "pair=llama31_8b_70b"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "cannot build the judge here" in out.stderr and "CUDA GPU" in out.stderr
    out = subprocess.run([sys.executable, "-m", "runners.autojudge.build", "method=sd"], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "has no judge" in out.stderr
