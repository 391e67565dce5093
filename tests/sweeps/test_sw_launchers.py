"""The launcher configs compose, resolve, accept overrides and turn into valid sbatch options (no Slurm needed)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from runners.paths import REPO_ROOT

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def launcher_params(*overrides: str, conf_dir=REPO_ROOT / "conf") -> dict:
    """``hydra.launcher`` resolved against the sweep's base config, as Hydra instantiates it."""
    from hydra import compose, initialize_config_dir

    import runners.callbacks  # noqa: F401  (registers ${dm.gpus:...}, as Hydra does when it builds the callbacks)

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
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    base = set(OmegaConf.structured(BaseQueueConf).keys())
    p = {k: v for k, v in params.items() if k not in ("_target_", "max_num_timeout")}
    ex = submitit.AutoExecutor(folder=str(tmp_path), cluster="slurm")
    ex.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in p.items()})
    return ex._executor._make_submission_file_text("python -m x", "uid")


def test_slurm_cpu_pair_requests_no_gpu(tmp_path):
    params = launcher_params("hydra/launcher=slurm", "pair=tiny")
    assert params["_target_"].endswith("SlurmLauncher") and params["gpus_per_node"] is None
    text = sbatch_text(params, tmp_path)
    assert "--gpus-per-node" not in text and "#SBATCH --cpus-per-task=8" in text and "#SBATCH --mem=64GB" in text


@pytest.mark.parametrize("pair,gpus", [("llama31_8b_70b", 4), ("qwen3_4b_32b", 4)])
def test_slurm_gpu_count_follows_the_pair(tmp_path, pair, gpus):
    params = launcher_params("hydra/launcher=slurm", f"pair={pair}")
    assert params["gpus_per_node"] == gpus
    assert f"#SBATCH --gpus-per-node={gpus}" in sbatch_text(params, tmp_path)


def test_slurm_fields_are_overridable(tmp_path):
    params = launcher_params(
        "hydra/launcher=slurm", "pair=tiny", "hydra.launcher.partition=gpu", "hydra.launcher.account=proj42",
        "hydra.launcher.gpus_per_node=2", "hydra.launcher.cpus_per_task=3", "hydra.launcher.mem_gb=5",
        "hydra.launcher.timeout_min=77", "hydra.launcher.array_parallelism=2", "hydra.launcher.qos=low",
        "+hydra.launcher.additional_parameters.constraint=a100")
    text = sbatch_text(params, tmp_path)
    for line in ("--partition=gpu", "--account=proj42", "--gpus-per-node=2", "--cpus-per-task=3", "--mem=5GB",
                 "--time=77", "--qos=low", "--constraint=a100"):
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
        "hydra:\n  launcher:\n    partition: gpu\n    account: proj42\n")
    params = launcher_params("pair=llama31_8b_70b", conf_dir=conf)
    assert params["_target_"].endswith("SlurmLauncher")
    assert (params["partition"], params["account"], params["gpus_per_node"]) == ("gpu", "proj42", 4)
