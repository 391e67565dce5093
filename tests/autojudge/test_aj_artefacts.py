"""Tables 8-9 and Figs. 1, 5, 6 build from the records of tiny runs (a judge built on the tiny pair, then SD /
AJ / AJ+DM runs through runners.run), and the judge build refuses what it cannot build."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from runners.paths import REPO_ROOT
from tests.helpers.cli import run_build

pytestmark = pytest.mark.slow
THRESHOLDS = (0.1, 0.5)


@pytest.fixture(scope="module")
def tiny_records(tiny_pair_dir, tmp_path_factory):
    """A judge and the runs of the five artefacts on the tiny pair (profile=smoke, L=3) in one results dir."""
    from omegaconf import OmegaConf

    from runners.autojudge.build import build
    from runners.run import run

    results = tmp_path_factory.mktemp("aj_results")
    old = {k: os.environ.get(k) for k in ("DROPMATCH_RESULTS", "DROPMATCH_TINY_PAIR")}
    os.environ.update(DROPMATCH_RESULTS=str(results), DROPMATCH_TINY_PAIR=str(tiny_pair_dir))
    quiet = lambda *_: None  # noqa: E731
    base = ["pair=tiny", "profile=smoke", "L=3", "progress=quiet"]
    aj = [
        "method.judge.mining.label=correctness"
    ]  # the random tiny target never answers: label=answer skips all
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        c = OmegaConf.to_container(
            compose(config_name="run", overrides=["method=autojudge", *base, *aj]), resolve=True
        )
        build(c["pair"], c["method"]["judge"], log=quiet)
        for ds in ("gsm8k", "ifeval", "humaneval"):
            run(
                compose(config_name="run", overrides=["method=sd", f"dataset={ds}", *base]),
                log=quiet,
            )
            for thr in THRESHOLDS:
                run(
                    compose(
                        config_name="run",
                        overrides=[
                            "method=autojudge",
                            f"dataset={ds}",
                            f"method.threshold={thr}",
                            *base,
                            *aj,
                        ],
                    ),
                    log=quiet,
                )
                for p in (0.2, 0.3):
                    run(
                        compose(
                            config_name="run",
                            overrides=[
                                "method=autojudge_dropmatch",
                                f"dataset={ds}",
                                f"method.threshold={thr}",
                                f"dropmatch.p_drop={p}",
                                *base,
                                *aj,
                            ],
                        ),
                        log=quiet,
                    )
    yield results
    for k, v in old.items():
        os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def render(name, results):
    from analysis.render import render as _render

    return _render(name, "smoke", runs_root=results / "runs", out_root=results, echo=False)


def test_table8(tiny_records):
    art = render("table8", tiny_records)
    assert [t.stem for t in art.tables] == [
        "table8",
        "table8_p0.2_K5",
    ]  # the paper's (0.3, 5) first
    t = art.tables[0].display
    assert list(t["Method"]) == ["SD"] + ["AJ", "AJ+DM"] * len(THRESHOLDS)
    assert list(t["Threshold"][1:]) == [f"{x:g}" for x in THRESHOLDS for _ in range(2)]
    assert (
        "[" in t["vs AJ"].iloc[2] and "[" in t["vs SD L=3"].iloc[1] and "[" in t["τ"].iloc[1]
    )  # value [CI]
    d = art.tables[0].data
    assert (
        set(d["method"]) == {"SD", "AJ", "AJ+DM"}
        and d["tau_lo"].le(d["tau"]).all()
        and d["n"].eq(1).all()
    )
    assert (d[d["method"] == "AJ+DM"]["p_drop"] == 0.3).all() and d[
        "speedup_vs_aj"
    ].notna().sum() == len(THRESHOLDS)
    md = (tiny_records / "table8" / "table8.md").read_text()
    assert (
        "mined 2 prompts of gsm8k/test from item 1000" in md
        and "recall of important mismatches" in md
    )
    assert (
        "never evaluate" in md
        and "judge thresholds: 0.1, 0.5" in md
        and "model identity (tiny)" in md
    )
    assert "n (items per cell): 1" in md and "bootstrap" in md


def test_table9_humaneval_stand_in(tiny_records):
    art = render("table9", tiny_records)
    t = art.tables[0].display
    assert list(t["Threshold"]) == ["SD (L=3)"] + [f"{x:g}" for x in THRESHOLDS]
    assert all(g.endswith("×") for g in t["τ gain"].iloc[1:])
    md = (tiny_records / "table9" / "table9.md").read_text()
    assert "STAND-IN" in md and "HumanEval" in md and "judge thresholds" in md


def test_fig5_fig6(tiny_records):
    f5 = render("fig5", tiny_records).figures[0]
    assert set(f5.data["method"]) == {"SD", "AJ", "AJ+DM"} and sorted(
        f5.data["p_drop"].dropna().unique()
    ) == [0.2, 0.3]
    assert "(a) AJ+DM at p_drop=0.3, K=5; (b) AJ+DM at p_drop=0.2, K=5" in f5.caption
    f6 = render("fig6", tiny_records).figures[0]
    assert len(f6.data[(f6.data["method"] == "AJ+DM") & (f6.data["p_drop"] == 0.3)]) == len(
        THRESHOLDS
    )
    assert any("out of distribution" in x for x in f6.footer)
    for name in ("fig5", "fig6"):
        assert (tiny_records / name / f"{name}.png").stat().st_size > 1000


def test_fig1_part_a_and_pending_b(tiny_records):
    f = render("fig1", tiny_records).figures[0]
    assert set(f.data["benchmark"]) == {"GSM8K (in domain)", "IFEval (OOD)"}
    assert set(f.data["method"]) == {"SD", "AJ (thr 0.5)"}
    assert any("(b) pending" in x for x in f.footer)
    assert (tiny_records / "fig1" / "fig1.png").is_file()


@pytest.mark.subprocess
@pytest.mark.parametrize("name", ["table8", "table9", "fig1", "fig5", "fig6"])
def test_no_runs_is_an_error(tmp_path, name):
    env = {**os.environ, "DROPMATCH_RESULTS": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "analysis.render", name, "--profile", "smoke"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        out.returncode == 1 and f"[render] {name}: no complete runs for profile=smoke" in out.stderr
    )


@pytest.mark.subprocess
def test_build_refuses_what_it_cannot_build(tmp_path):
    env = {**os.environ, "DROPMATCH_RESULTS": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}

    out = run_build(env, "method=autojudge", "pair=llama31_8b_70b")
    assert (
        out.returncode == 2
        and "cannot build the judge here" in out.stderr
        and "CUDA GPU" in out.stderr
    )
    out = run_build(env, "method=sd")
    assert out.returncode == 2 and "has no judge" in out.stderr
    out = run_build(env, "method=autojudge", "method.judge.mining.limit=-1")
    assert out.returncode == 2 and "method.judge.mining.limit=-1 is invalid" in out.stderr
    assert list(tmp_path.iterdir()) == []  # refused before Hydra made a run directory


@pytest.mark.subprocess
def test_reproduce_refuses_when_the_judge_cannot_be_built(tmp_path):
    """./reproduce.sh table8 with a GPU-only pair on a CPU: exit 2 and the reason before the judge or the sweep
    (the sweep's points are checked first), nothing written."""
    import hashlib

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    stamp = hashlib.sha256((REPO_ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / ".dropmatch-installed").write_text(
        stamp + "\n"
    )  # setup() sees an installed venv: installs nothing
    env = {
        **os.environ,
        "DROPMATCH_RESULTS": str(tmp_path / "results"),
        "DROPMATCH_VENV": str(venv),
        "PYTHONPATH": str(REPO_ROOT),
    }
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "reproduce.sh"), "table8", "pair=llama31_8b_70b"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "pair=llama31_8b_70b needs a CUDA GPU" in out.stderr
    assert "table8 refused before running anything: sweep table8 is invalid" in out.stderr
    assert "sweep table8 (profile" not in out.stderr and not (tmp_path / "results").exists()
