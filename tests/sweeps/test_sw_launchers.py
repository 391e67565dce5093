"""The launcher configs compose, resolve, accept overrides and turn into valid sbatch options (no Slurm needed)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from runners.paths import REPO_ROOT

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def launcher_params(*overrides: str, conf_dir=REPO_ROOT / "conf") -> dict:
    """``hydra.launcher`` resolved against the sweep's base config, as Hydra instantiates it."""
    from hydra import compose, initialize_config_dir

    import runners.sweep.callbacks  # noqa: F401  (registers ${dm.gpus:...}, as Hydra does when it builds the callbacks)

    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        cfg = compose("run", overrides=list(overrides), return_hydra_config=True)
    node = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    node.pop("submitit_folder", None)  # needs ${hydra.sweep.dir}, set only in a real multirun
    node.pop("name", None)
    resolved = OmegaConf.create({**OmegaConf.to_container(cfg, resolve=False), "_l": node})
    del resolved["hydra"]
    return OmegaConf.to_container(resolved, resolve=True)["_l"]


def sbatch_text(params: dict, tmp_path) -> str:
    """The sbatch script submitit would submit with these launcher params (as SlurmLauncher.launch maps them)."""
    from unittest import mock

    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from submitit.slurm.slurm import SlurmExecutor

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    p = {k: v for k, v in params.items() if k not in ("_target_", "max_num_timeout")}
    # Rendering the script runs no Slurm command; submitit only refuses to build the executor where `srun`
    # is not on PATH (SlurmExecutor.affinity), so that check is bypassed here: no Slurm needed.
    with mock.patch.object(SlurmExecutor, "affinity", classmethod(lambda cls: 2)):
        ex = submitit.AutoExecutor(folder=str(tmp_path), cluster="slurm")
        ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in p.items()})
        return ex._executor._make_submission_file_text("python -m x", "uid")


def test_slurm_cpu_pair_requests_no_gpu(tmp_path):
    params = launcher_params("hydra/launcher=slurm", "pair=tiny")
    assert params["_target_"].endswith("SlurmLauncher") and params["gpus_per_node"] is None
    text = sbatch_text(params, tmp_path)
    assert (
        "--gpus-per-node" not in text
        and "#SBATCH --cpus-per-task=8" in text
        and "#SBATCH --mem=64GB" in text
    )


@pytest.mark.parametrize("pair,gpus", [("llama31_8b_70b", 4), ("qwen3_4b_32b", 4)])
def test_slurm_gpu_count_follows_the_pair(tmp_path, pair, gpus):
    params = launcher_params("hydra/launcher=slurm", f"pair={pair}")
    assert params["gpus_per_node"] == gpus
    assert f"#SBATCH --gpus-per-node={gpus}" in sbatch_text(params, tmp_path)


def test_slurm_fields_are_overridable(tmp_path):
    params = launcher_params(
        "hydra/launcher=slurm",
        "pair=tiny",
        "hydra.launcher.partition=gpu",
        "hydra.launcher.account=proj42",
        "hydra.launcher.gpus_per_node=2",
        "hydra.launcher.cpus_per_task=3",
        "hydra.launcher.mem_gb=5",
        "hydra.launcher.timeout_min=77",
        "hydra.launcher.array_parallelism=2",
        "hydra.launcher.qos=low",
        "+hydra.launcher.additional_parameters.constraint=a100",
    )
    text = sbatch_text(params, tmp_path)
    for line in (
        "--partition=gpu",
        "--account=proj42",
        "--gpus-per-node=2",
        "--cpus-per-task=3",
        "--mem=5GB",
        "--time=77",
        "--qos=low",
        "--constraint=a100",
    ):
        assert f"#SBATCH {line}\n" in text, line
    assert params["array_parallelism"] == 2


def test_local_parallel_resolves():
    params = launcher_params("hydra/launcher=local_parallel", "pair=llama31_8b_70b")
    assert params["_target_"].endswith("LocalLauncher") and params["gpus_per_node"] == 4


def test_default_launcher_is_in_process():
    params = launcher_params("pair=tiny")
    assert params["_target_"].endswith("BasicLauncher")


def test_site_defaults_in_conf_local_pick_slurm(tmp_path):
    """The README's recipe: a git-ignored conf/local/default.yaml makes Slurm the default launcher."""
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(REPO_ROOT / "conf", conf)
    (conf / "local" / "default.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /hydra/launcher: slurm\n"
        "hydra:\n  launcher:\n    partition: gpu\n    account: proj42\n"
    )
    params = launcher_params("pair=llama31_8b_70b", conf_dir=conf)
    assert params["_target_"].endswith("SlurmLauncher")
    assert (params["partition"], params["account"], params["gpus_per_node"]) == ("gpu", "proj42", 4)


def _sweep_dir_at(instant: str) -> str:
    """``hydra.sweep.dir`` of a freshly composed multirun config, with Hydra's ``${now:}`` frozen at ``instant``."""
    from hydra import compose, initialize_config_dir
    from hydra.core.utils import setup_globals

    import runners.main  # noqa: F401  (registers ${dm.unique:}, as `python -m runners.main` does)

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("run", overrides=["pair=tiny"], return_hydra_config=True)
    OmegaConf.register_new_resolver("now", lambda pattern: instant, use_cache=True, replace=True)
    try:
        return str(cfg.hydra.sweep.dir)
    finally:
        setup_globals()  # Hydra's own ${now:} again


def test_two_sweeps_started_in_the_same_second_get_their_own_dirs():
    """Before: the dir was the time stamp alone (one-second resolution), so two sweeps started at the same instant
    shared it and overwrote each other's .hydra/ and job status files."""
    a, b = _sweep_dir_at("2026-12-01_10-00-00"), _sweep_dir_at("2026-12-01_10-00-00")
    assert a != b
    assert a.rsplit("/", 1)[1].startswith("2026-12-01_10-00-00_") and b.rsplit("/", 1)[
        1
    ].startswith("2026-12-01_10-00-00_")


@pytest.mark.subprocess
def test_sweep_dirs_differ_across_processes_at_the_same_instant():
    import subprocess
    import sys

    code = (
        "import sys; sys.path.insert(0, 'tests/sweeps'); from test_sw_launchers import _sweep_dir_at; "
        "print(_sweep_dir_at('2026-12-01_10-00-00'))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    dirs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert all(
        d.endswith(tuple("0123456789abcdef")) and "2026-12-01_10-00-00_" in d for d in dirs
    ), dirs
    assert dirs[0] != dirs[1]


@pytest.mark.subprocess
def test_concurrent_sweeps_keep_their_own_dirs_and_statuses(main_env):
    """Two sweeps launched at once (one in-process, one with subprocess jobs): each finds its job's status in its
    own sweep dir, so the job processes resolved the same (cached) dir as their launcher."""
    import subprocess
    from pathlib import Path

    from tests.helpers.cli import main_cmd

    cmds = [
        main_cmd("method=ar", "decoding.max_new_tokens=4", multirun=True),
        main_cmd(
            "method=sd",
            "L=2",
            "decoding.max_new_tokens=4",
            "hydra/launcher=local_parallel",
            multirun=True,
        ),
    ]
    procs = [
        subprocess.Popen(
            c,
            cwd=REPO_ROOT,
            env=main_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for c in cmds
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
        assert "1 runs: 1 done, 0 skipped, 0 concurrent, 0 failed, 0 unreported" in err, err
    sweeps = sorted((Path(main_env["DROPMATCH_RESULTS"]) / "hydra" / "multirun").iterdir())
    assert len(sweeps) == 2
    for d in sweeps:
        assert (d / "multirun.yaml").is_file() and (d / "0" / ".dropmatch_status.json").is_file()
