"""Command-line overrides are checked before Hydra composes anything (runners/config/overrides.py): a misspelled
key or group option exits 2 with the field, the closest known one and the allowed values, and writes nothing, in
a single run, a sweep, the check reproduce.sh runs first (DROPMATCH_CHECK_ONLY) and the Auto-Judge build."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.config.errors import ConfigError
from runners.config.overrides import check_overrides
from runners.paths import REPO_ROOT
from tests.helpers.cli import run_build, run_main

DATASETS = "alpaca, eagle_gsm8k, gsm8k, humaneval, ifeval, komt_bench, livecodebench, mmlu, mt_bench, spec_bench"

REFUSED = [
    (
        ["dropmatch.pdrop=0.3"],
        r"^dropmatch.pdrop is not a config key \(nothing reads it\); did you mean dropmatch.p_drop\? "
        r"allowed under dropmatch: K, audit_share, include_target, majority, p_drop, path, ",
    ),
    (["-m", "dropmatch.pdrop=0.1,0.3"], r"^dropmatch.pdrop is not a config key"),
    # a misspelt parent: the key under the closest parent, and that parent's keys (not an empty list)
    (
        ["dropmach.p_drop=0.3"],
        r"^dropmach.p_drop is not a config key \(nothing reads it\); did you mean dropmatch.p_drop\? "
        r"allowed under dropmatch: K, audit_share, include_target, majority, p_drop, path, ",
    ),
    (
        ["zzzz.yyy=1"],
        r"^zzzz.yyy is not a config key \(nothing reads it\); allowed at the top level: L, ",
    ),
    # one key twice: Hydra would keep the last silently, where a sweep may have been meant
    (
        ["-m", "experiment=table6", "L=5", "L=10"],
        r"^L is given twice \(L=5 and L=10\): only the last would count; .*\(L=5,10\)$",
    ),
    (
        ["method=sd", "dataset=gsm8k", "+method=dropmatch"],
        r"^method is given twice \(method=sd and ",
    ),
    (["--multirun", "decoding.temprature=0.7"], r"did you mean decoding.temperature\?"),
    (["lenght=3"], r"^lenght is not a config key .*allowed at the top level: .*\bL\b"),
    # a rule's own setting set where no rule reads it: the key that sets it
    (
        ["method=fly", "method.entropy_threshold=0.5"],
        r"^method.entropy_threshold is not a config key .*did you mean method.kwargs.entropy_threshold\?",
    ),
    (
        ["dataset=gsm8kk"],
        rf"^dataset=gsm8kk is not an option of group dataset \(no conf/dataset/gsm8kk.yaml\); did you mean "
        rf"dataset=gsm8k\? allowed: {DATASETS}$",
    ),
    (
        ["-m", "dataset=gsm8k,ifevl"],
        r"^dataset=ifevl is not an option .*did you mean dataset=ifeval\?",
    ),
    (
        ["method=dropmach"],
        r"^method=dropmach .*did you mean method=dropmatch\? allowed: ar, autojudge",
    ),
    (["experiment=tabel6"], r"^experiment=tabel6 .*did you mean experiment=table6\?"),
    (  # a key of another option of the group: Hydra's "not in struct" (exit 1) before
        ["backend=hf", "backend.n_ctx=4096"],
        r"^backend.n_ctx=4096 is not a key of backend=hf \(it is one of backend=llamacpp\); allowed keys of "
        r"backend=hf: batch_size, name, prefix_caching, version$",
    ),
    (
        ["-m", "backend=hf", "L=5,10", "backend.n_threads=2"],
        r"^backend.n_threads=2 is not a key of backend=hf",
    ),
    (
        ["method=autojudge", "method.judge.mining.limt=4"],
        r"^method.judge.mining.limt=4: method.judge.mining of method=autojudge has no key limt \(its keys: "
        r".*\blimit\b.*\); did you mean method.judge.mining.limit\?$",
    ),
    (
        ["pair.chat_template_kwargs.enable_thinking=false"],
        r"pair.chat_template_kwargs of pair=qwen25coder_0.5b_1.5b has no key enable_thinking \(its keys: "
        r"none\); add one with \+pair.chat_template_kwargs.enable_thinking=False$",
    ),
    (  # a rule without settings has no method.kwargs at all: Hydra's "not in struct" (exit 1) before
        ["method=sd", "method.kwargs.entropy_threshold=0.6"],
        r"^method.kwargs.entropy_threshold=0.6: method=sd has no method.kwargs; "
        r"options of method that have method.kwargs: .*\bfly\b",
    ),
    (
        ["method=fly", "method.kwargs.window_size.x=3"],
        r"^method.kwargs.window_size.x=3: method.kwargs.window_size of method=fly is a setting, not a mapping",
    ),
    (  # the setting lives under another key
        ["method=autojudge", "method.kwargs.threshold=0.3"],
        r"^method.kwargs.threshold=0.3: method=autojudge has no method.kwargs; did you mean method.threshold\?",
    ),
    (  # before: "add one with +method.kwargs.bogus=1", which the rule's signature then refused
        ["method=typical", "method.kwargs.bogus=1"],
        r"^method.kwargs.bogus=1: method.kwargs of method=typical has no key bogus \(its keys: posterior_alpha, "
        r"posterior_threshold\); bogus is not a setting of method.criterion='typical'; allowed: "
        r"method.kwargs.posterior_threshold, method.kwargs.posterior_alpha$",
    ),
    (["experiment=frontier/flyy"], r"did you mean experiment=frontier/fly\?"),
    (
        ["autojudge@method.judge=gsm8kk"],
        r"^autojudge@method.judge=gsm8kk is not an option of group autojudge .*did you mean "
        r"autojudge@method.judge=gsm8k\? allowed: gsm8k, livecodebench$",
    ),
]


@pytest.mark.parametrize("argv,message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_bad_overrides_are_refused_with_the_closest_one(argv, message):
    with pytest.raises(ConfigError, match=message):
        check_overrides(argv)


# Forms the repository's commands, experiments, tests and README use (reproduce.sh passes the user's on).
ACCEPTED = [
    ["-m", "experiment=table6", "pair=tiny", "profile=smoke", "progress=log"],
    ["--multirun", "experiment=frontier/fly", "method.kwargs.entropy_threshold=0.3,0.6"],
    ["method=fly", "method.kwargs.window_size=3", "+method.kwargs.entropy_top_k=2"],
    ["hydra.sweep.dir=/tmp/x", "hydra/launcher=local_parallel", "hydra.verbose=true"],
    ["--cfg", "job", "--resolve", "-p", "dropmatch", "dropmatch.p_drop=0.1"],
    [
        "experiment=null",
        "logger=wandb",
        "logger.mode=offline",
        "backend=vllm",
        "backend.batch_size=4",
    ],
    ["pair.target.local_path=/models/t", "pair.draft.local_path=/models/d", "pair.name=mine"],
    ["profile.limit.gsm8k=3", "L=range(1,4)"],
    ["pair=qwen3_4b_32b", "pair.chat_template_kwargs.enable_thinking=true"],
    [
        "++method.threshold=0.1,0.3",
        "~logger",
        "+dropmatch.pdrop=0.3",
    ],  # + keys: checked after composing
    ["autojudge@method.judge=livecodebench", "method=autojudge", "method.judge.mining.limit=4"],
    ["backend=llamacpp", "backend.n_ctx=4096", "dataset=gsm8k,ifeval", "dataset.limit=2"],
    ["dataset=glob(*)", "dropmatch.p_drop=interval(0.1,0.3)", "--config-name", "other", "x.y=1"],
    [
        "pair=tiny",
        "profile=smoke",
        "pair=tiny",
    ],  # the same value twice (a helper's base, repeated) changes nothing
]


@pytest.mark.parametrize("argv", ACCEPTED, ids=[" ".join(a) for a in ACCEPTED])
def test_valid_overrides_pass(argv):
    check_overrides(argv)


def test_the_experiments_sweep_params_pass():
    """Every override an experiment sweeps (conf/experiment/**: hydra.sweeper.params) passes the check."""
    import yaml

    for f in sorted((REPO_ROOT / "conf" / "experiment").rglob("*.yaml")):
        params = ((yaml.safe_load(f.read_text()) or {}).get("hydra") or {}).get("sweeper") or {}
        argv = [
            f"{k}={v}"
            for k, v in (params.get("params") or {}).items()
            if "${" not in str(v)  # interpolations are resolved by Hydra from the profile
        ]
        check_overrides(["-m", *argv])


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "argv,shown",
    [
        (
            ["dropmatch.pdrop=0.3"],
            "config error: dropmatch.pdrop is not a config key (nothing reads it); did you mean dropmatch.p_drop?",
        ),
        (
            ["dataset=gsm8kk"],
            f"config error: dataset=gsm8kk is not an option of group dataset (no conf/dataset/gsm8kk.yaml); "
            f"did you mean dataset=gsm8k? allowed: {DATASETS}",
        ),
    ],
    ids=["key", "option"],
)
@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_cli_refuses_before_hydra_and_writes_nothing(main_env, argv, shown, multirun):
    """Before: Hydra's "Could not override 'dropmatch.pdrop' ... Key 'pdrop' is not in struct" and "Could not
    find 'dataset/gsm8kk'", exit 1."""
    p = run_main(main_env, "method=sd", *argv, multirun=multirun, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert shown in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and "not in struct" not in p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


@pytest.mark.subprocess
def test_reproduce_check_refuses_a_misspelled_key(main_env):
    """reproduce.sh checks each sweep of an artefact with DROPMATCH_CHECK_ONLY=1 before anything else (its exit
    status decides): a misspelled key there exits 2 with the message, not Hydra's exit 1."""
    env = {**main_env, "DROPMATCH_CHECK_ONLY": "1"}
    p = run_main(env, "experiment=table6", "dropmatch.pdrop=0.3", multirun=True, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "config error: dropmatch.pdrop is not a config key" in p.stderr
    assert "did you mean dropmatch.p_drop?" in p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "overrides,shown",
    [
        (
            ["method=sd", "pair=tiny"],
            "config error: method=sd has no judge; allowed: method=autojudge or method=autojudge_dropmatch",
        ),
        (
            ["method=autojudge", "pair=tiny", "dropmatch.pdrop=0.3"],
            "config error: dropmatch.pdrop is not a config key",
        ),
        (["method=autojudge", "pair=tinyy"], "config error: pair=tinyy is not an option"),
    ],
    ids=["no-judge", "key", "option"],
)
def test_autojudge_build_refuses_before_hydra_writes(main_env, overrides, shown):
    """Before: exit 2 with the reason, but Hydra's run directory (results/hydra/runs/<time>/) was already made."""
    p = run_build(main_env, *overrides)
    assert p.returncode == 2, p.stdout + p.stderr
    assert shown in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()
