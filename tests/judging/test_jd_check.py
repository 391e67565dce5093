"""``python -m runners.judging --check``: the judge config validated with nothing selected or judged (what
``./reproduce.sh table7`` / ``table10`` run before their decoding sweep)."""

from __future__ import annotations

import pytest

from runners.judging.cli import main


def check(capsys, *overrides: str) -> tuple[int, str]:
    """Exit status and stderr of ``--check`` with ``overrides`` (no results directory is read)."""
    rc = main(["--check", *overrides])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["judge=nope"], "judge='nope' is unknown; allowed: api, local"),
        (
            ["judge=local", "judge.max_tokens=abc"],
            "judge.max_tokens='abc' is invalid; allowed: an integer >= 1",
        ),
        (
            ["judge=local", "judge.batch_size=0"],
            "judge.batch_size=0 is invalid; allowed: an integer >= 1",
        ),
        (
            ["judge=local", "judge.no_repeat_ngram_size=-1"],
            "judge.no_repeat_ngram_size=-1 is invalid; allowed: an integer >= 0",
        ),
        (["judge=local", "judge.pair=nope"], "judge.pair='nope' has no conf/pair/ file; allowed: "),
        (["judge=api", "judge.model="], "judge=api needs the judge model"),
        (
            ["judge=api", "judge.max_tokens=abc"],
            "judge.max_tokens='abc' is invalid; allowed: an integer >= 1",
        ),
        (["subset=some"], "subset='some' is invalid; allowed: all, calibration"),
    ],
)
def test_check_refuses_by_name(capsys, api_env, overrides, message):
    api_env("http://127.0.0.1:9/v1")
    rc, err = check(capsys, *overrides)
    assert rc == 2 and message in err, err


def test_check_accepts_a_valid_config_and_the_calibration_judge(capsys, api_env):
    api_env("http://127.0.0.1:9/v1")
    assert check(capsys, "judge=api", "judge.max_tokens=512", "--calibrate-with", "local")[0] == 0
    rc, err = check(capsys, "judge=api", "--calibrate-with", "nope")
    assert rc == 2 and "judge='nope' is unknown; allowed: api, local" in err


def test_overrides_may_follow_the_options(capsys, api_env):
    """reproduce.sh passes ``<artefact> --profile P [--calibrate-with J] <overrides>``: overrides after the
    options are read as overrides, not refused as unrecognised arguments."""
    api_env("http://127.0.0.1:9/v1")
    rc = main(["--check", "--calibrate-with", "local", "judge=api", "judge.max_tokens=abc"])
    err = capsys.readouterr().err
    assert rc == 2 and "judge.max_tokens='abc' is invalid" in err and "unrecognized" not in err
    assert main(["--check", "--profile", "smoke", "judge=local", "judge.max_tokens=64"]) == 0
