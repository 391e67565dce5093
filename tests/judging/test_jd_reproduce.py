"""./reproduce.sh table7 / table10: sweep, then judge, then render; judge overrides go to the judging step only."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time

from runners.paths import REPO_ROOT


def fake_venv(tmp_path, fail: str):
    """A venv whose python records its arguments and succeeds, except for commands containing ``fail``
    (setup() sees it installed). A check pass (``DROPMATCH_CHECK_ONLY`` set) is logged as ``check: <args>``."""
    venv, log = tmp_path / "venv", tmp_path / "calls.log"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    log.unlink(missing_ok=True)
    py = venv / "bin" / "python"
    py.write_text(
        f'#!/bin/sh\necho "${{DROPMATCH_CHECK_ONLY:+check: }}$*" >> {log}\n'
        f'case "${{DROPMATCH_CHECK_ONLY:+check: }}$*" in *"{fail}"*) exit 1;; esac\nexit 0\n'
    )
    py.chmod(0o755)
    stamp = hashlib.sha256((REPO_ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / ".dropmatch-installed").write_text(stamp + "\n")
    return venv, log


def reproduce(tmp_path, *args, fail: str = "no-such-command"):
    venv, log = fake_venv(tmp_path, fail)
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in ("DROPMATCH_JUDGE_MODEL", "OPENAI_MODEL")
        },
        "DROPMATCH_VENV": str(venv),
        "DROPMATCH_VLLM_VENV": str(venv),
        "DROPMATCH_RESULTS": str(tmp_path / "results"),
    }
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "reproduce.sh"), *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return out, [c for c in calls if c.startswith("-m ")]


def checks(tmp_path) -> list[str]:
    """The check passes of the last :func:`reproduce` call, in order (``check: -m runners.main ...``)."""
    log = tmp_path / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [c for c in lines if c.startswith("check: ")]


def test_table7_sweeps_then_judges_then_renders(tmp_path):
    out, calls = reproduce(tmp_path, "table7", "L=3", "judge=api", "judge.max_tokens=64")
    assert out.returncode == 0, out.stderr[-2000:]
    *calls, shown = calls
    assert calls == [
        "-m runners.judging --check --calibrate-with local judge=api judge.max_tokens=64",
        "-m runners.main --multirun experiment=table7 L=3",
        "-m runners.main --multirun experiment=table7_eagle L=3",  # the EAGLE-3 rows (vLLM)
        "-m runners.judging table7 --profile default --calibrate-with local judge=api judge.max_tokens=64",
        "-m analysis.render table7 --profile default",
    ]
    # then whether the table shows the runs its sweeps made (runners.sweep.shown)
    assert shown.startswith("-m runners.sweep.shown table7 --since ")
    assert shown.endswith(" --sweeps table7 table7_eagle")


def test_judging_failure_still_renders_and_other_artefacts_ignore_judges(tmp_path):
    out, calls = reproduce(tmp_path, "table10", "profile=smoke", fail="runners.judging table10")
    assert out.returncode == 1 and "table10: judging incomplete" in out.stderr
    assert "[reproduce] exit 1: judging incomplete for table10" in out.stderr
    assert calls[0] == "-m runners.judging --check"
    assert calls[-3:-1] == [
        "-m runners.judging table10 --profile smoke",
        "-m analysis.render table10 --profile smoke",
    ]
    assert calls[-1].startswith("-m runners.sweep.shown table10 --since ")
    out, calls = reproduce(tmp_path, "table6", "judge=api")
    notice = out.stderr.find("table6 has no judged answers; ignoring judge=api")
    # before the sweep decodes anything, not after it
    assert 0 <= notice < out.stderr.find("[reproduce] table6: sweep table6")
    assert all("judge=api" not in c for c in calls)


def test_a_pair_override_skips_the_eagle_sweep(tmp_path):
    out, calls = reproduce(tmp_path, "table10", "pair=qwen25coder_0.5b_1.5b")
    assert out.returncode == 0, out.stderr[-2000:]
    assert [c for c in calls if "runners.main" in c] == [
        "-m runners.main --multirun experiment=table10 pair=qwen25coder_0.5b_1.5b"
    ]
    assert "sweep table10_eagle skipped (pair=qwen25coder_0.5b_1.5b given" in out.stderr


def test_judge_command(tmp_path):
    out, calls = reproduce(tmp_path, "judge", "table7", "--profile", "default", "judge=local")
    assert out.returncode == 0 and calls == [
        "-m runners.judging table7 --profile default judge=local"
    ]


def test_an_invalid_judge_config_refuses_before_the_sweep(tmp_path):
    for artefact in ("table7", "table10"):
        out, calls = reproduce(
            tmp_path, artefact, "judge=api", "judge.max_tokens=abc", fail="--check"
        )
        assert out.returncode == 2, out.stderr[-2000:]
        assert (
            f"[reproduce] {artefact} refused before decoding: its judge config is invalid"
            in out.stderr
        )
        assert calls == [
            "-m runners.judging --check --calibrate-with local judge=api judge.max_tokens=abc"
        ]
    out, calls = reproduce(tmp_path, "all", "judge=nope", fail="--check")
    assert out.returncode == 2 and calls == ["-m runners.judging --check judge=nope"]


def test_every_sweep_is_checked_before_anything_runs(tmp_path):
    """An artefact of several sweeps: each sweep's points are checked (DROPMATCH_CHECK_ONLY) before the judge
    check, the vLLM set-up or the first sweep, so a bad point in the last sweep costs nothing."""
    out, calls = reproduce(tmp_path, "table7", "L=3")
    assert out.returncode == 0, out.stderr[-2000:]
    assert checks(tmp_path) == [
        "check: -m runners.main --multirun experiment=table7 L=3",
        "check: -m runners.main --multirun experiment=table7_eagle L=3",
    ]
    log = (tmp_path / "calls.log").read_text().splitlines()
    assert log.index(checks(tmp_path)[-1]) < log.index(
        "-m runners.main --multirun experiment=table7 L=3"
    )
    out, calls = reproduce(
        tmp_path, "table7", "L=3", fail="check: -m runners.main --multirun experiment=table7_eagle"
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert (
        "[reproduce] table7 refused before running anything: sweep table7_eagle is invalid"
        in out.stderr
    )
    assert calls == [] and len(checks(tmp_path)) == 2  # no judge check, no sweep, no render


def test_ctrl_c_during_the_check_says_nothing_ran(tmp_path):
    """Ctrl-C while the sweeps are checked (a terminal signals the whole process group) used to end
    ``./reproduce.sh`` with exit 130 and no line at all; now one line says the check was interrupted and nothing
    ran, and no sweep starts."""
    venv, log = fake_venv(tmp_path, "no-such-command")
    py = venv / "bin" / "python"  # the check pass hangs until interrupted
    py.write_text(
        f'#!/bin/sh\necho "${{DROPMATCH_CHECK_ONLY:+check: }}$*" >> {log}\n'
        '[ -n "$DROPMATCH_CHECK_ONLY" ] && sleep 30\nexit 0\n'
    )
    env = {
        **os.environ,
        "DROPMATCH_VENV": str(venv),
        "DROPMATCH_RESULTS": str(tmp_path / "results"),
    }
    p = subprocess.Popen(
        ["bash", str(REPO_ROOT / "reproduce.sh"), "table6"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # as from a terminal: a parent that ignores SIGINT (a background job, CI) passes that on, and bash cannot
        # trap a signal ignored on entry
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for _ in range(100):  # until the check pass has started
        if log.exists() and "check: " in log.read_text():
            break
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert (
        "[reproduce] table6 interrupted while checking its sweeps: nothing ran, nothing was written"
        in err
    )
    assert [c for c in log.read_text().splitlines() if c.startswith("-m ")] == []


def test_help_after_an_artefact_prints_its_usage_once_and_runs_nothing(tmp_path):
    """Before: ``./reproduce.sh table6 --help`` passed --help to both Hydra calls (help twice), then rendered and
    exited 1. Now: the artefact's usage (its sweeps, judging and render steps, the sweep's header and swept
    parameters, the overrides) once on stdout, exit 0, no Python call, nothing written."""
    for flag in ("--help", "-h"):
        out, _ = reproduce(tmp_path, "table6", flag)
        assert out.returncode == 0 and out.stderr == "", out.stderr
        assert out.stdout.startswith("usage: ./reproduce.sh table6 [hydra overrides]\n")
        assert out.stdout.count("usage:") == 1
        assert "python -m runners.main --multirun experiment=table6 [overrides]" in out.stdout
        assert "python -m analysis.render table6 --profile <profile>" in out.stdout
        assert (
            f"(writes {tmp_path / 'results'}/table6/)" in out.stdout
        )  # DROPMATCH_RESULTS, not results/
        assert "method: ar,sd,dropmatch" in out.stdout  # the sweep's parameters
        assert not (tmp_path / "calls.log").exists()  # no check, sweep or render
        assert not (tmp_path / "results").exists()
    out, _ = reproduce(tmp_path, "table7", "L=3", "--help")  # after overrides too
    assert out.returncode == 0 and not (tmp_path / "calls.log").exists()
    assert (
        "experiment=table7_eagle" in out.stdout and "python -m runners.judging table7" in out.stdout
    )
    assert "judge overrides" in out.stdout


def test_hydra_flags_after_an_artefact_are_refused_with_the_direct_command(tmp_path):
    """``./reproduce.sh bench --cfg job`` used to reach Hydra beside the implied ``--multirun`` (a traceback):
    now exit 2 naming the flag, what is allowed and the direct command that takes it; no Python call."""
    for args in (("--cfg", "job"), ("L=3", "--info"), ("-c", "job")):
        out, _ = reproduce(tmp_path, "bench", *args)
        assert out.returncode == 2, out.stderr
        flag = next(a for a in args if a.startswith("-"))
        assert f"'{flag}' is not an override of ./reproduce.sh bench" in out.stderr
        assert (
            ".venv/bin/python -m runners.main experiment=bench [overrides] --cfg job" in out.stderr
        )
        assert "Traceback" not in out.stderr and not (tmp_path / "calls.log").exists()


def test_usage_on_stdout_when_asked_on_stderr_when_wrong(tmp_path):
    for args in (["--help"], ["-h"], ["all", "--help"]):
        out, _ = reproduce(tmp_path, *args)
        assert out.returncode == 0 and out.stderr == "", (args, out.stderr)
        assert out.stdout.startswith(
            "usage: ./reproduce.sh <artefact|all|test|setup|rescore|judge>"
        )
        assert not (tmp_path / "calls.log").exists()
    out, _ = reproduce(tmp_path)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.startswith("usage: ")
    out, _ = reproduce(tmp_path, "table66")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("unknown artefact 'table66' (did you mean table6?)\nusage: ")
    for typo, near in (("tabel8", "table8"), ("sensitivty", "sensitivity"), ("tset", "test")):
        out, _ = reproduce(tmp_path, typo)
        assert out.returncode == 2 and f"(did you mean {near}?)" in out.stderr.splitlines()[0]
    out, _ = reproduce(tmp_path, "xyz")
    assert out.returncode == 2 and out.stderr.startswith("unknown artefact 'xyz'\nusage: ")


def test_another_experiment_under_an_artefact_is_refused(tmp_path):
    """``./reproduce.sh table6 experiment=table7`` ran table7's sweeps and then rendered Table 6 (rc 0): now exit 2
    naming the override and the artefact's own sweeps, before any Python call."""
    for arg in ("experiment=table7", "+experiment=bench", "artefact=table7"):
        out, _ = reproduce(tmp_path, "table6", "L=5", arg)
        assert out.returncode == 2, out.stderr
        assert (
            f"'{arg}' is invalid for ./reproduce.sh table6: the artefact runs its own sweeps"
            in out.stderr
        )
        assert "(table6)" in out.stderr and "Traceback" not in out.stderr
        assert not (tmp_path / "calls.log").exists() and not (tmp_path / "results").exists()
