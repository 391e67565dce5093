"""Bad configs fail before any model loads, naming the field and the allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from runners.config.errors import ConfigError
from runners.paths import REPO_ROOT
from tests.helpers.cli import run_main

BASE = ["pair=tiny", "profile=smoke", "dataset=gsm8k"]

BAD = [
    (["method=sd", "L=0"], r"L=0 is invalid; allowed: an integer >= 1"),
    (["method=dropmatch", "L=-2"], r"L=-2 is invalid; allowed: an integer >= 1"),
    (["dropmatch.p_drop=1.0"], r"dropmatch.p_drop=1.0 is invalid; allowed: a number in \[0, 1\)"),
    (["dropmatch.p_drop=-0.1"], r"dropmatch.p_drop=-0.1 is invalid; allowed: a number in \[0, 1\)"),
    (
        ["dropmatch.K=0"],
        r"^dropmatch.K=0 is invalid with method=dropmatch \(its rule reads the MC-dropout heads\); allowed: an "
        r"integer >= 1",
    ),
    (
        ["method=dropout_path", "dropmatch.K=0"],
        r"^dropmatch.K=0 is invalid with method=dropout_path",
    ),
    # the methods that read no heads ignore K: a sweep may cross dropmatch.K=0,5 with them
    (["method=ar", "dropmatch.K=0"], None),
    (["method=sd", "dropmatch.K=0"], None),
    (
        ["method=sd", "dropmatch.K=-1"],
        r"^dropmatch.K=-1 is invalid; allowed: an integer in \[0, 64\]",
    ),
    # one LM-head row over the vocabulary per head and position: a billion heads only fill memory
    (
        ["dropmatch.K=1000000000"],
        r"^dropmatch.K=1000000000 is invalid; allowed: an integer in \[0, 64\]",
    ),
    (["decoding.temperature=-1"], r"decoding.temperature=-1 is invalid; allowed: a number >= 0"),
    (["method.criterion=nope"], r"method.criterion='nope' is unknown; allowed: .*dropmatch_js"),
    (["backend.name=nope"], r"backend='nope' is unknown; allowed: .*hf"),
    (["dataset.name=nope"], r"dataset='nope' is unknown; allowed: .*gsm8k"),
    # before: the sweep launched and every job failed with a traceback (scorer) or after the models loaded (split)
    (
        ["dataset.scorer=bogus"],
        r"dataset.scorer='bogus' is unknown; allowed: .*lm_eval_gsm8k_cot_llama",
    ),
    (
        ["dataset.split=bogus", "dataset.source.hub_id=null"],
        r"^dataset.split='bogus' cannot be served for dataset=gsm8k: its pinned file holds the test split, no "
        r"dataset.source.local_path is set, and it has no hub source; allowed: test",
    ),
    (["dataset.split=test"], None),
    (
        ["profile=paper"],
        r"profile=paper needs a CUDA GPU and none is visible; allowed here: profile=default",
    ),
    (["pair=llama31_8b_70b"], r"pair=llama31_8b_70b needs a CUDA GPU"),
    (
        ["logger=wandb", "logger.mode=sometimes"],
        r"logger.mode='sometimes' is invalid; allowed: online, offline, disabled",
    ),
    # every user-settable numeric field: type and range
    (
        ["decoding.max_new_tokens=0"],
        r"^decoding.max_new_tokens=0 is invalid; allowed: an integer >= 1 or null",
    ),
    (["dataset.limit=-3"], r"^dataset.limit=-3 is invalid; allowed: an integer >= 1 or null"),
    (["dataset.limit=0"], r"^dataset.limit=0 is invalid; allowed: an integer >= 1 or null"),
    (["dataset.offset=-1"], r"^dataset.offset=-1 is invalid; allowed: an integer >= 0"),
    (
        ["dataset.max_new_tokens=0"],
        r"^dataset.max_new_tokens=0 is invalid; allowed: an integer >= 1 or null",
    ),
    (["decoding.top_p=0"], r"^decoding.top_p=0 is invalid; allowed: a number in \(0, 1\]"),
    (["decoding.top_p=1.5"], r"^decoding.top_p=1.5 is invalid; allowed: a number in \(0, 1\]"),
    (["decoding.seed=-1"], r"^decoding.seed=-1 is invalid; allowed: an integer >= 0"),
    (["decoding.seed=0.5"], r"^decoding.seed=0.5 is invalid; allowed: an integer >= 0"),
    (
        ["decoding.temperature=true"],
        r"^decoding.temperature=True is invalid; allowed: a number >= 0",
    ),
    (["repeats=0"], r"^repeats=0 is invalid; allowed: an integer >= 1 or null"),
    (["dropmatch.K=2.5"], r"^dropmatch.K=2.5 is invalid; allowed: an integer in \[0, 64\]"),
    (
        ["method=dropout_path", "dropmatch.path=-1"],
        r"^dropmatch.path=-1 is invalid; allowed: an integer >= 0",
    ),
    (
        ["profile.limit.gsm8k=0"],
        r"^profile.limit.gsm8k=0 is invalid; allowed: an integer >= 1 or null",
    ),
    (
        ["profile.max_new_tokens.gsm8k=-1"],
        r"^profile.max_new_tokens.gsm8k=-1 is invalid; allowed: an integer >= 1",
    ),
    (["profile.repeats=0"], r"^profile.repeats=0 is invalid; allowed: an integer >= 1"),
    (
        ["backend=vllm", "backend.batch_size=0"],
        r"^backend.batch_size=0 is invalid; allowed: an integer >= 1",
    ),
    (
        ["backend=vllm", "backend.gpu_memory_utilization=1.2"],
        r"^backend.gpu_memory_utilization=1.2 is invalid; allowed: a number in \(0, 1\]",
    ),
    # a draft length beyond the cap says why it is capped (before: L=1000 ran and produced nothing in 300 s)
    (
        ["method=sd", "L=1000"],
        r"^L=1000 is invalid; allowed: an integer >= 1 and <= 64 \(draft tokens per round; .*\); why 64: "
        r"a round drafts L tokens one by one",
    ),
    (["method=sd", "L=64"], None),
    # the rule's own settings (before: checked after both models loaded)
    (
        ["method=dropmatch", "dropmatch.majority=weird"],
        r"^dropmatch.majority='weird' is invalid; allowed values: strict, plurality$",
    ),
    (
        ["method=dropmatch", "dropmatch.include_target=maybe"],
        r"^dropmatch.include_target='maybe' is invalid; allowed values: true, false$",
    ),
    # keys added with Hydra's append syntax that nothing reads (before: accepted, and the run id changed)
    (
        ["+dropmatch.pdrop=0.3"],
        r"^dropmatch.pdrop is not a config key \(nothing reads it; added with \+dropmatch.pdrop=...\?\); "
        r"did you mean dropmatch.p_drop\? allowed under dropmatch: K, audit_share, include_target, majority, "
        r"p_drop, path, sparse_check_top_n, sparse_escape, sparse_top_n$",
    ),
    (
        ["++decoding.temprature=0.7"],
        r"^decoding.temprature is not a config key .*did you mean decoding.temperature\? "
        r"allowed under decoding: max_new_tokens, seed, temperature, top_p$",
    ),
    (["+lenght=3"], r"^lenght is not a config key .*allowed at the top level: .*\bL\b"),
    (["trace=yes"], r"^trace='yes' is invalid; allowed: true, false"),
    (["progress=loud"], r"^progress='loud' is invalid; allowed: auto, bar, log, quiet"),
    (["reuse=always"], r"^reuse='always' is invalid; allowed: warn, strict"),
    # a backend refuses modes it cannot run instead of recording another computation under their name
    (
        ["decoding.top_p=0.9"],
        r"^decoding.top_p=0.9 is not supported by backend=hf \(the project's rules do not "
        r"apply nucleus sampling\); allowed: 1.0",
    ),
    (
        ["backend=vllm", "decoding.top_p=0.9"],
        r"^decoding.top_p=0.9 is not supported by backend=vllm",
    ),
    (
        ["backend=vllm", "method=draft_only"],
        r"method=draft_only is not supported by backend=vllm \(it has no "
        r"draft_only decoding.*allowed with backend=vllm: method=ar, bild, block_verify, dropmatch, "
        r"dropmatch_naive, fly, fsd, prob_threshold, relaxed_topk, sd, static_ensemble, typical; or backend=hf$",
    ),
    (
        ["backend=vllm", "method=dropout_path"],
        r"method=dropout_path is not supported by backend=vllm \(it has no "
        r"dropout_path decoding.*allowed with backend=vllm: method=ar, bild, block_verify, dropmatch, "
        r"dropmatch_naive, fly, fsd, prob_threshold, relaxed_topk, sd, static_ensemble, typical; or backend=hf, llamacpp$",
    ),
    (
        ["backend=vllm", "backend.native_verify=true", "method=dropmatch_naive"],
        r"method=dropmatch_naive is not supported by backend=vllm with backend.native_verify=true \(it has no "
        r"dropmatch decoding.*allowed with backend=vllm with backend.native_verify=true: method=ar, sd; or backend=hf, llamacpp$",
    ),
    (
        ["backend=vllm", "backend.native_verify=true", "method=sd", "trace=true"],
        r"trace=true is not supported by backend=vllm with backend.native_verify=true .*allowed: trace=false; "
        r"or backend=hf, llamacpp$",
    ),
]


@pytest.fixture
def no_model_loads(monkeypatch, tmp_path):
    """Fail the test if anything loads a model or creates a run record; pretend there is no GPU."""
    import runners.config.validate as validate
    import runners.models.loader as loader
    import runners.run as run  # bound to the real loader here, so the patch below never outlives the test

    def forbidden(*a, **k):
        raise AssertionError("a model was loaded for an invalid config")

    monkeypatch.setattr(loader, "load_pair", forbidden)
    monkeypatch.setattr(run, "load_pair", forbidden)
    monkeypatch.setattr(validate, "gpu_available", lambda: False)
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(tmp_path / "no_pair"))
    return tmp_path / "results"


def compose(overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return hydra_compose("run", overrides=BASE + list(overrides))


@pytest.mark.parametrize("overrides,message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_invalid_field_fails_before_loading(overrides, message, no_model_loads):
    """``message`` None: the value is valid (the bound itself), so validation passes."""
    from runners.config.resolve import resolve_run_config
    from runners.run import run

    if message is None:
        resolve_run_config(compose(overrides), identify_models=False)
        return
    with pytest.raises(ConfigError, match=message):
        run(compose(overrides), log=lambda *_: None)
    assert not (no_model_loads / "runs").exists(), "a run record was created"


def test_vllm_backend_without_vllm_names_the_fix(no_model_loads):
    from runners.config.optional_deps import installed

    if installed("vllm"):
        pytest.skip("vllm is installed in this interpreter")
    from runners.run import run

    with pytest.raises(
        ConfigError, match=r"backend=vllm needs the 'vllm' package.*allowed here: backend=hf"
    ):
        run(compose(["backend=vllm"]), log=lambda *_: None)


@pytest.mark.subprocess
def test_cli_prints_the_error_and_exits_2_without_loading(main_env):
    p = run_main(main_env, "method=sd", "L=0")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "config error: L=0 is invalid; allowed: an integer >= 1" in p.stderr
    assert "Loading weights" not in p.stdout + p.stderr
    assert not (Path(main_env["DROPMATCH_RESULTS"]) / "runs").exists()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "override,message",
    [
        (
            "decoding.max_new_tokens=0",
            "decoding.max_new_tokens=0 is invalid; allowed: an integer >= 1 or null",
        ),
        ("dataset.limit=-3", "dataset.limit=-3 is invalid; allowed: an integer >= 1 or null"),
        ("decoding.top_p=0", "decoding.top_p=0 is invalid; allowed: a number in (0, 1]"),
    ],
)
def test_cli_bad_number_exits_2_and_writes_nothing(main_env, override, message):
    """Before: max_new_tokens=0 loaded both models and wrote a record with accuracy 0 (exit 0), limit=-3
    printed a traceback (exit 1). Now: exit 2, the field and its allowed values, no results directory at all
    (not even Hydra's run directory)."""
    p = run_main(main_env, "method=sd", "L=3", override, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"config error: {message}" in p.stderr
    assert "Traceback" not in p.stdout + p.stderr and "Loading weights" not in p.stdout + p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


def test_int_fields_accept_integral_floats_and_store_the_declared_type(monkeypatch):
    """``dropmatch.K=5.0`` is the integer 5 and ``decoding.temperature=0`` the float 0.0 in config.json."""
    from runners.config.resolve import resolve_run_config

    monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/x")
    c = resolve_run_config(
        compose(["method=dropmatch", "dropmatch.K=5.0", "decoding.temperature=0", "L=3.0"])
    )
    assert (c["dropmatch"]["K"], c["decoding"]["temperature"], c["L"]) == (5, 0.0, 3)
    assert [type(x) for x in (c["dropmatch"]["K"], c["decoding"]["temperature"], c["L"])] == [
        int,
        float,
        int,
    ]


@pytest.mark.subprocess
@pytest.mark.parametrize("method", ["draft_only", "dropout_path"])
def test_cli_refuses_a_method_the_backend_cannot_run(main_env, method):
    """A method vLLM cannot run is refused (exit 2, the field and the allowed methods and backends), not decoded
    as the target and recorded under that method."""
    p = run_main(main_env, "backend=vllm", f"method={method}", timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        f"config error: method={method} is not supported by backend=vllm (it has no {method} decoding"
        in p.stderr
    ), p.stderr
    assert (
        "allowed with backend=vllm: method=ar, bild, block_verify, dropmatch, dropmatch_naive, fly, fsd, "
        "prob_threshold, relaxed_topk, sd, static_ensemble, typical; or backend=hf"
        + ("" if method == "draft_only" else ", llamacpp")
        in p.stderr
    )
    assert not (Path(main_env["DROPMATCH_RESULTS"]) / "runs").exists()


def test_every_backend_declares_its_modes():
    import runners.backends  # noqa: F401
    from runners.backends.modes import BACKEND_MODES, MODES, modes_of, supported_modes
    from runners.registry import BACKENDS

    assert set(BACKEND_MODES) == set(BACKENDS.names())
    assert supported_modes({"name": "hf"}) == set(MODES) - {"nucleus"}
    assert supported_modes({"name": "llamacpp"}) == set(MODES) - {
        "nucleus",
        "autojudge",
        "draft_only",
    }
    # vLLM: read from VLLMBackend's own declaration (SUPPORTED_RULES, SUPPORTS_*) without importing vllm
    assert supported_modes({"name": "vllm"}) == {"ar", "sd", "lossy", "dropmatch", "trace"}
    assert supported_modes({"name": "vllm", "native_verify": True}) == {"ar", "sd"}
    # every method in conf/method/ maps to exactly one decoding mode
    from runners.config.validate import _method_files

    got = {
        name: modes_of({"method": spec, "L": 0 if spec.get("autoregressive") else 3, "trace": True})
        for name, spec in _method_files().items()
    }
    assert got == {
        "ar": ["ar"],
        "draft_only": ["draft_only"],
        "dropout_path": ["dropout_path"],
        "sd": ["sd", "trace"],
        "dropmatch": ["dropmatch", "trace"],
        "dropmatch_naive": ["dropmatch", "trace"],
        "autojudge": ["autojudge", "trace"],
        "autojudge_dropmatch": ["dropmatch", "autojudge", "trace"],
        **{
            m: ["lossy", "trace"]
            for m in (
                "fly",
                "fsd",
                "typical",
                "relaxed_topk",
                "prob_threshold",
                "static_ensemble",
                "bild",
                "block_verify",
            )
        },
        "bench": [],
        "latency": [],
        "similarity": [],
    }  # measurements check their own backend


@pytest.mark.subprocess
def test_sweep_with_an_invalid_point_refuses_before_any_run(main_env):
    """`L=3,-1`: the bad point is last, but the sweep is refused before the first (valid) point runs."""
    p = run_main(
        main_env,
        "pair=tiny",
        "profile=smoke",
        "dataset=gsm8k",
        "method=sd",
        "L=3,-1",
        multirun=True,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        "[sweep] config error (pair=tiny profile=smoke progress=log dataset=gsm8k "
        "method=sd L=-1): L=-1 is invalid; allowed: an integer >= 1" in p.stderr
    ), p.stderr
    assert "refused before launching: 1 of 2 sweep points invalid; nothing ran" in p.stderr
    assert "Launching" not in p.stdout + p.stderr and "Loading weights" not in p.stdout + p.stderr
    assert not (Path(main_env["DROPMATCH_RESULTS"]) / "runs").exists()


@pytest.mark.subprocess
def test_sweep_with_a_misspelled_option_refuses_with_the_options(main_env):
    """`dataset=gsm8k,ifevl`: the option that does not exist is refused before Hydra starts (exit 2, the group's
    options listed and the closest one), not announced as a sweep that fails and "resumes"."""
    p = run_main(
        main_env, "pair=tiny", "profile=smoke", "method=sd", "dataset=gsm8k,ifevl", multirun=True
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        "config error: dataset=ifevl is not an option of group dataset (no conf/dataset/ifevl.yaml); did you "
        "mean dataset=ifeval? allowed: alpaca," in p.stderr
    ), p.stderr
    assert "Launching" not in p.stdout + p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


@pytest.mark.subprocess
def test_sweep_counts_every_invalid_point(main_env):
    """2 limits x 6 draft lengths, 4 of them invalid: 8 of 12 points refused, each error printed once with the
    points it refuses (not the count of distinct messages)."""
    p = run_main(main_env, "method=sd", "dataset.limit=1,2", "L=1,2,-1,-2,-3,-4", multirun=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "[sweep] refused before launching: 8 of 12 sweep points invalid; nothing ran" in p.stderr
    for L in (-1, -2, -3, -4):
        assert (
            f"[sweep] config error (2 points, e.g. pair=tiny profile=smoke progress=log method=sd "
            f"dataset.limit=1 L={L}): L={L} is invalid" in p.stderr
        ), p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


@pytest.mark.subprocess
@pytest.mark.parametrize("multirun", [False, True], ids=["run", "sweep"])
def test_results_variable_naming_a_file_exits_2(main_env, tmp_path, multirun):
    """Before: a NotADirectoryError traceback (after Hydra tried to make its output directory there)."""
    afile = tmp_path / "results.txt"
    afile.write_text("not a directory\n")
    env = {**main_env, "DROPMATCH_RESULTS": str(afile / "sub" if multirun else afile)}
    p = run_main(
        env, "method=sd", "L=2", *(["dataset.limit=1,2"] if multirun else []), multirun=multirun
    )
    assert p.returncode == 2, p.stdout + p.stderr
    shown = f"{afile}/sub" if multirun else str(afile)
    where = f"{afile} (a parent of it) is a file" if multirun else f"{afile} is a file"
    assert (
        f"config error: DROPMATCH_RESULTS={shown} is invalid: {where}; allowed: a directory (created if "
        "missing) holding runs/ and the artefacts" in p.stderr
    ), p.stderr
    assert "Traceback" not in p.stderr
    assert afile.read_text() == "not a directory\n"


def test_directory_variables_are_checked(monkeypatch, tmp_path):
    from runners.paths import directory_env_errors

    monkeypatch.setenv(
        "DROPMATCH_RESULTS", str(tmp_path / "new" / "results")
    )  # created on first write
    monkeypatch.setenv("DROPMATCH_CACHE", str(tmp_path))
    assert directory_env_errors() == []
    (tmp_path / "c").write_text("")
    monkeypatch.setenv("DROPMATCH_CACHE", str(tmp_path / "c"))
    assert directory_env_errors() == [
        f"DROPMATCH_CACHE={tmp_path / 'c'} is invalid: {tmp_path / 'c'} is a file; allowed: a directory "
        "(created if missing) for models and data"
    ]
    # before: a permission check that root passes let /proc/x through to a FileNotFoundError traceback
    if Path("/proc/self").is_dir():
        monkeypatch.setenv("DROPMATCH_CACHE", "/proc/dropmatch-x")
        (err,) = directory_env_errors()
        assert err.startswith(
            "DROPMATCH_CACHE=/proc/dropmatch-x is invalid: no directory can be created in /proc ("
        ), err
    assert list(tmp_path.glob(".dropmatch-check-*")) == []  # the probe leaves nothing behind


@pytest.mark.parametrize("value", ["", "RESULTS"], ids=["empty", "set"])
def test_hydra_dirs_follow_the_results_directory(monkeypatch, tmp_path, value):
    """Hydra's run and sweep directories sit under the records' results directory (seen: DROPMATCH_RESULTS set
    but empty put the records in <repo>/results and the sweep directory at /hydra/multirun/...)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    from runners.sweep.resolvers import register_resolvers

    register_resolvers()
    want = tmp_path / "r" if value else REPO_ROOT / "results"
    monkeypatch.setenv("DROPMATCH_RESULTS", str(want) if value else "")
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = hydra_compose("run", return_hydra_config=True)
    dirs = OmegaConf.to_container(cfg.hydra, resolve=False)
    for key in ("run", "sweep"):
        node = OmegaConf.create({"d": dirs[key]["dir"].split("/hydra/")[0]})
        assert OmegaConf.to_container(node, resolve=True)["d"] == str(want), key


def _fake_slurm(tmp_path: Path, sinfo_says: str | None) -> str:
    """A PATH whose Slurm client commands exist (``sinfo_says``: what sinfo prints before failing; None: no
    Slurm commands at all), plus this interpreter's folder."""
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if sinfo_says is not None:
        for cmd in ("sbatch", "srun"):
            (bin_dir / cmd).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "sinfo").write_text(f"#!/bin/sh\necho '{sinfo_says}' >&2\nexit 1\n")
        for f in bin_dir.iterdir():
            f.chmod(0o755)
    return f"{bin_dir}:{Path(sys.executable).parent}"


@pytest.mark.parametrize(
    "sinfo_says,why",
    [
        (None, "sbatch and srun and sinfo are not on PATH"),
        (
            "sinfo: fatal: Could not establish a configuration source",
            "sinfo cannot reach a controller (sinfo: fatal: Could not establish a configuration source)",
        ),
    ],
    ids=["no-client", "no-controller"],
)
def test_slurm_launcher_without_a_cluster_is_refused(monkeypatch, tmp_path, sinfo_says, why):
    from runners.config.optional_deps import check_launcher, installed

    if not installed("hydra_plugins.hydra_submitit_launcher"):
        pytest.skip(
            "hydra-submitit-launcher is not installed (that error is tested in tests/packaging)"
        )
    monkeypatch.setenv("PATH", _fake_slurm(tmp_path, sinfo_says))
    with pytest.raises(ValueError) as e:
        check_launcher(["-m", "hydra/launcher=slurm", "L=1,2"])
    assert str(e.value) == (
        f"hydra/launcher=slurm needs a Slurm cluster, but {why}; run it from a Slurm login node, or allowed "
        "here: hydra/launcher=local (the default) or hydra/launcher=local_parallel"
    )
    check_launcher(["-m", "L=1,2"])  # the local launcher needs nothing


@pytest.mark.subprocess
def test_cli_slurm_launcher_without_a_cluster_exits_2_and_writes_nothing(main_env, tmp_path):
    """Before: a submitit traceback, a sweep directory, and "rerun the same command to resume"."""
    from runners.config.optional_deps import installed

    if not installed("hydra_plugins.hydra_submitit_launcher"):
        pytest.skip("hydra-submitit-launcher is not installed")
    env = {**main_env, "PATH": _fake_slurm(tmp_path, "sinfo: error: no controller")}
    p = run_main(env, "hydra/launcher=slurm", "method=sd", "L=1,2", multirun=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        "config error: hydra/launcher=slurm needs a Slurm cluster, but sinfo cannot reach a controller"
        in p.stderr
    )
    assert "rerun the same command" not in p.stderr and "Traceback" not in p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "group,known",
    [
        ("pair", "tiny"),
        ("dataset", "gsm8k"),
        ("method", "dropmatch"),
        ("backend", "hf"),
        ("profile", "smoke"),
    ],
)
def test_unknown_group_option_lists_the_options(main_env, group, known):
    """An unknown option is refused before Hydra (exit 2, the group's options listed; before: Hydra's own error,
    exit 1)."""
    p = run_main(main_env, f"{group}=nope", timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"config error: {group}=nope is not an option of group {group}" in p.stderr
    allowed = p.stderr.split("allowed: ", 1)[1].splitlines()[0].split(", ")
    assert known in allowed
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


def _entry_points():
    from analysis.render import main as render
    from runners.judging.cli import main as judging
    from runners.rescore import main as rescore

    return {
        "rescore": lambda: rescore(["table6"]),
        "judging": lambda: judging(["table7"]),
        "judging --check": lambda: judging(["--check", "judge=local"]),
        "render": lambda: render(["table6"]),
    }


@pytest.mark.parametrize("entry", ["rescore", "judging", "judging --check", "render"])
def test_results_variable_naming_a_file_is_refused_by_every_entry_point(
    monkeypatch, tmp_path, capsys, entry
):
    """As runners.main: the variable named, exit 2, before any run is selected (before: 'no runs' under the file)."""
    afile = tmp_path / "results.txt"
    afile.write_text("not a directory\n")
    monkeypatch.setenv("DROPMATCH_RESULTS", str(afile))
    assert _entry_points()[entry]() == 2
    err = capsys.readouterr().err
    assert (
        f"config error: DROPMATCH_RESULTS={afile} is invalid: {afile} is a file; allowed: a directory "
        "(created if missing) holding runs/ and the artefacts" in err
    ), err


@pytest.mark.subprocess
def test_results_variable_naming_a_file_is_refused_by_the_autojudge_entry(main_env, tmp_path):
    """Before: a NotADirectoryError traceback from Hydra's output directory."""
    import subprocess
    import sys

    afile = tmp_path / "results.txt"
    afile.write_text("not a directory\n")
    p = subprocess.run(
        [sys.executable, "-m", "runners.autojudge.build", "method=autojudge", "pair=tiny"],
        cwd=REPO_ROOT,
        env={**main_env, "DROPMATCH_RESULTS": str(afile)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert f"config error: DROPMATCH_RESULTS={afile} is invalid: {afile} is a file" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.subprocess
def test_check_only_validates_a_sweep_and_runs_nothing(main_env):
    """DROPMATCH_CHECK_ONLY=1 (what reproduce.sh runs before each artefact's sweeps): a valid sweep exits 0 after
    its points are checked, writing nothing; an invalid one is refused as without it; a vLLM point is not refused
    for vLLM missing from this venv (reproduce.sh installs vLLM's venv only after the check)."""
    env = {**main_env, "DROPMATCH_CHECK_ONLY": "1"}
    p = run_main(env, "pair=tiny", "profile=smoke", "method=sd", "L=2,3", multirun=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[sweep] checked: 2 points valid, 0 of them finished on record; nothing ran" in p.stderr
    assert (
        "Launching" not in p.stdout + p.stderr and not Path(main_env["DROPMATCH_RESULTS"]).exists()
    )
    p = run_main(env, "pair=tiny", "profile=smoke", "method=sd", "L=2,-3", multirun=True)
    assert p.returncode == 2 and "1 of 2 sweep points invalid" in p.stderr, p.stderr
    p = run_main(
        env, "pair=tiny", "profile=smoke", "method=sd", "L=2", "backend=vllm", multirun=True
    )
    assert p.returncode == 0 and "needs the 'vllm' package" not in p.stderr, p.stderr
    # K=0 is refused only where the rule reads the heads (a breaker's sweep had AR and SD refused too)
    p = run_main(
        env, "pair=tiny", "profile=smoke", "method=ar,sd,dropmatch", "dropmatch.K=0", multirun=True
    )
    assert p.returncode == 2 and "1 of 3 sweep points invalid" in p.stderr, p.stderr
    assert "dropmatch.K=0 is invalid with method=dropmatch" in p.stderr, p.stderr


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "experiment, missing",
    [("fig3_measure", "that have no complete record"), ("table8", "which has not been built")],
)
def test_check_only_accepts_inputs_an_earlier_step_makes(main_env, experiment, missing):
    """On an empty results dir, the check reproduce.sh runs before an artefact's first sweep passes a sweep whose
    inputs that same command makes first (fig3_measure reads fig3's decodes; table8 needs the judge reproduce.sh
    builds after the check); run for real, the same sweep is still refused for the missing input."""
    args = (f"experiment={experiment}", "pair=tiny", "profile=smoke")
    p = run_main({**main_env, "DROPMATCH_CHECK_ONLY": "1"}, *args, multirun=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "points valid, 0 of them finished on record; nothing ran" in p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()
    p = run_main(main_env, *args, multirun=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert missing in p.stderr


def test_a_value_for_a_key_the_experiment_force_adds_replaces_its_sweep():
    """The Auto-Judge artefacts sweep ``++method.threshold`` (SD, beside them, has no threshold). A user's
    ``method.threshold=0.2`` was refused as "not a key of method=dropmatch", and its list form multiplied the
    experiment's three thresholds instead of replacing them: it is now given the experiment's prefix."""
    from runners.config.overrides import align_with_sweep

    argv = ["--multirun", "experiment=table8", "method.threshold=0.2,0.4", "L=8"]
    assert align_with_sweep(argv) == [
        "--multirun",
        "experiment=table8",
        "++method.threshold=0.2,0.4",
        "L=8",
    ]
    assert align_with_sweep(["experiment=table6", "dropmatch.p_drop=0.2"]) == [
        "experiment=table6",
        "dropmatch.p_drop=0.2",
    ]
    assert align_with_sweep(["method.threshold=0.2"]) == ["method.threshold=0.2"]
    assert align_with_sweep(["experiment=fig5", "+method.threshold=0.2"]) == [
        "experiment=fig5",
        "++method.threshold=0.2",
    ]


@pytest.mark.subprocess
def test_auto_judge_threshold_override_checks_one_point_per_method(main_env):
    env = {**main_env, "DROPMATCH_CHECK_ONLY": "1"}
    p = run_main(env, "experiment=table8", "method.threshold=0.2", multirun=True)
    assert p.returncode == 0 and "[sweep] checked: 3 points valid" in p.stderr, p.stderr
    p = run_main(env, "experiment=fig5", "method.threshold=-1", multirun=True)
    assert p.returncode == 2 and "method.threshold=-1 is invalid; allowed: a number in [0, 1]" in (
        p.stderr
    ), p.stderr


@pytest.mark.subprocess
def test_an_artefact_refuses_points_its_table_would_never_show(main_env):
    """Before: `./reproduce.sh table6 method=fly` (and dataset=mt_bench) passed the check, decoded, then ended
    with 'no complete runs': Table 6 has no FLy row and no MT-Bench column. Now the point is put to the
    artefact's own select() first and refused (exit 2, nothing written) with the values it does show."""
    env = {**main_env, "DROPMATCH_CHECK_ONLY": "1"}
    base = ("experiment=table6", "pair=tiny", "profile=smoke")
    p = run_main(env, *base, "method=fly", "dataset=gsm8k", multirun=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        "method=fly is invalid for ./reproduce.sh table6: its table has no such row, so the runs would be "
        "decoded and never shown; allowed: ar, dropmatch, sd (see select() in analysis.tables.table6)"
    ) in p.stderr, p.stderr
    p = run_main(env, *base, "dataset=mt_bench", multirun=True)
    assert (
        p.returncode == 2
        and ("dataset=mt_bench is invalid for ./reproduce.sh table6: its table has no such column")
        in p.stderr
        and "allowed: gsm8k, humaneval, ifeval, mmlu" in p.stderr
    ), p.stderr
    p = run_main(env, *base, "decoding.temperature=0.7", multirun=True)
    assert (
        p.returncode == 2
        and "decoding.temperature=0.7 is invalid for ./reproduce.sh table6" in p.stderr
    )
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()
    p = run_main(env, *base, "method=sd", "dataset=gsm8k", multirun=True)  # a cell it shows
    assert p.returncode == 0 and "2 points valid" in p.stderr, p.stderr
    # a run of one's own has no artefact and no table to fit
    p = run_main(env, "pair=tiny", "profile=smoke", "method=fly", "dataset=mt_bench", multirun=True)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize(
    "experiment",
    sorted(
        str(f.relative_to(REPO_ROOT / "conf" / "experiment").with_suffix(""))
        for f in (REPO_ROOT / "conf" / "experiment").rglob("*.yaml")
        if not f.name.startswith("_") and "sweeper" in f.read_text()
    ),
)
def test_every_artefact_shows_every_point_of_its_own_sweeps(experiment, monkeypatch):
    """The refusal above must never refuse an artefact's own sweep: each point of every experiment, composed as
    the sweeper makes it (default profile and pair), is one its artefact's select() keeps, or one its
    measurement reads (INPUT_METHODS: Fig. 3's single-path decodes)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from runners.main import job_of
    from runners.sweep.artefact_points import shown
    from runners.sweep.callbacks import sweep_job_overrides

    monkeypatch.setenv(
        "DROPMATCH_CHECK_ONLY", "1"
    )  # as reproduce.sh checks: vLLM points without vLLM here
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        top = hydra_compose("run", overrides=[f"experiment={experiment}"], return_hydra_config=True)
        jobs = sweep_job_overrides(top)
        assert jobs, experiment
        for job in jobs:
            point = hydra_compose("run", overrides=job)
            c = job_of(point).resolve(point, identify_models=False)
            assert shown(c) is not False, (experiment, job)
