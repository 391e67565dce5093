"""Runs on different weights get different run ids; the resolved identity is recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from runners.models.dtype import resolve_dtype
from runners.models.identity import clear_memo, model_identity, weights_sha256
from runners.paths import REPO_ROOT
from runners.records.run_id import run_id_of

EMBEDDED = "qwen25coder_0.5b_1.5b"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("DROPMATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    clear_memo()
    yield
    clear_memo()


def resolved(*overrides: str) -> dict:
    from hydra import compose, initialize_config_dir

    from runners.config.resolve import resolve_run_config

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        return resolve_run_config(
            compose("run", overrides=["profile=smoke", "dataset=gsm8k", "method=sd", *overrides])
        )


def test_local_directories_with_other_weights_get_other_ids(tiny_pair_dir, tmp_path, monkeypatch):
    """Before: ``local_path`` was excluded from the id, so two directories of different weights shared it."""
    from runners.models.tiny import build_tiny_pair

    other = tmp_path / "other"
    build_tiny_pair(other, seed=1)
    moved = tmp_path / "moved"
    shutil.copytree(tiny_pair_dir, moved)
    ids = {}
    for name, root in (("orig", tiny_pair_dir), ("moved", moved), ("other", other)):
        monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(root))
        ids[name] = run_id_of(resolved("pair=tiny"))
    assert ids["orig"] == ids["moved"]  # same weights elsewhere: one run
    assert ids["orig"] != ids["other"]  # other weights: another run
    c = resolved("pair=tiny")  # (DROPMATCH_TINY_PAIR -> other)
    assert c["model_identity"]["target"] == {
        "source": "local",
        "dtype": "float32",
        "weights_sha256": weights_sha256(other / "target"),
    }


def test_embedded_pair_on_other_weights_gets_another_id(tiny_pair_dir, tmp_path):
    """The embedded pair resolves to its pinned GGUF: that adds nothing to the id (ids of earlier records are
    kept). A local directory of other weights, or the same prepared pinned weights, are told apart."""
    auto = resolved(f"pair={EMBEDDED}")
    assert auto["model_identity"]["target"] == {
        "source": "pinned",
        "kind": "pip_chunk_gguf",
        "dtype": resolve_dtype({"dtype": "auto", "device": "cpu"}),
        "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    }
    # dtype auto is resolved by this machine: the resolved dtype enters the id
    assert run_id_of(auto) != run_id_of({k: v for k, v in auto.items() if k != "model_identity"})
    pinned = resolved(
        f"pair={EMBEDDED}", "pair.dtype=float32"
    )  # dtype fixed by the config: nothing added
    assert run_id_of(pinned) == run_id_of(
        {k: v for k, v in pinned.items() if k != "model_identity"}
    )

    other = resolved(
        f"pair={EMBEDDED}",
        "pair.dtype=float32",
        f"pair.target.local_path={tiny_pair_dir / 'target'}",
    )
    assert other["model_identity"]["target"]["source"] == "local"
    assert run_id_of(other) != run_id_of(pinned)

    prepared = (
        tmp_path / "prepared"
    )  # what runners.models.sources.prepare_pinned leaves: marker = sha256
    prepared.mkdir()
    (prepared / ".complete").write_text(pinned["model_identity"]["target"]["sha256"] + "\n")
    same = resolved(f"pair={EMBEDDED}", "pair.dtype=float32", f"pair.target.local_path={prepared}")
    assert same["model_identity"] == pinned["model_identity"]
    assert run_id_of(same) == run_id_of(pinned)


def test_hub_revision_is_resolved_and_hashed(monkeypatch, tmp_path):
    """Online, the hub's commit of ``main`` enters the id: a new upload of the weights is another run."""
    import huggingface_hub

    monkeypatch.delenv("HF_HUB_OFFLINE")
    shas = iter(["a" * 40, "a" * 40, "b" * 40, "b" * 40])

    class Info:
        def __init__(self):
            self.sha = next(shas)

    monkeypatch.setattr(
        huggingface_hub.HfApi, "model_info", lambda self, repo, revision=None, timeout=None: Info()
    )
    over = [
        f"pair={EMBEDDED}",
        "pair.dtype=float32",
        "pair.target.order=[hub]",
        "pair.draft.order=[hub]",
    ]
    first = resolved(*over)
    assert first["model_identity"]["target"] == {
        "source": "hub",
        "hub_id": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        "revision": "a" * 40,
        "dtype": "float32",
    }
    clear_memo()
    second = resolved(*over)
    assert second["model_identity"]["target"]["revision"] == "b" * 40
    assert run_id_of(first) != run_id_of(second)
    # a pinned commit is used as is (no request), and an HF cache snapshot directory is that commit
    snap = tmp_path / "hub" / "models--Qwen--Qwen2.5-Coder-1.5B-Instruct" / "snapshots" / ("c" * 40)
    snap.mkdir(parents=True)
    local = resolved(f"pair={EMBEDDED}", "pair.dtype=float32", f"pair.target.local_path={snap}")
    pinned_commit = resolved(*over, f"+pair.target.revision={'c' * 40}")
    assert local["model_identity"]["target"] == pinned_commit["model_identity"]["target"]
    from runners.models.identity import hub_revision

    assert hub_revision({"hub_id": "org/m", "order": ["hub"], "revision": "d" * 40}) == "d" * 40


def test_dtype_comes_from_resolve_dtype(tiny_pair_dir, monkeypatch):
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(tiny_pair_dir))
    ident = model_identity(
        {
            "dtype": "auto",
            "target": {
                "name": "t",
                "local_path": str(tiny_pair_dir / "target"),
                "order": ["local"],
            },
        }
    )
    from runners.models.dtype import resolve_dtype

    assert ident["target"]["dtype"] == resolve_dtype(
        {"dtype": "auto", "device": "cpu"}
    )  # by this CPU's flags
    assert run_id_of(resolved("pair=tiny", "pair.dtype=bfloat16")) != run_id_of(
        resolved("pair=tiny")
    )


def test_unavailable_weights_write_no_record(tmp_path, monkeypatch):
    """Before: the record directory (config, meta) was created, then loading failed."""
    from runners.models.sources import ModelUnavailableError
    from runners.run import run

    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(tmp_path / "nowhere"))
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose("run", overrides=["pair=tiny", "profile=smoke", "method=sd"])
    with pytest.raises(
        ModelUnavailableError, match=r"pair.target: model 'tiny-random-qwen2-target' is unavailable"
    ):
        run(cfg, log=lambda *_: None)
    assert not (tmp_path / "results" / "runs").exists()


@pytest.mark.subprocess
def test_record_holds_the_identity(tiny_pair_dir, tmp_path):
    """config.json and meta.json of a real (tiny) run name the weights and dtype actually loaded."""
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "DROPMATCH_TINY_PAIR": str(tiny_pair_dir),
        "DROPMATCH_RESULTS": str(tmp_path / "r"),
        "DROPMATCH_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "DROPMATCH_THREADS": "1",
    }
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "runners.main",
            "pair=tiny",
            "profile=smoke",
            "method=sd",
            "L=2",
            "decoding.max_new_tokens=4",
            "progress=quiet",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (run_dir,) = (tmp_path / "r" / "runs").iterdir()
    expect = {
        role: {
            "source": "local",
            "dtype": "float32",
            "weights_sha256": weights_sha256(tiny_pair_dir / role),
        }
        for role in ("target", "draft")
    }
    assert json.loads((run_dir / "config.json").read_text())["model_identity"] == expect
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["model_identity"] == expect and meta["sessions"][0]["model_identity"] == expect
    assert Path(tmp_path / "cache" / "weights_sha256.json").is_file()  # hashed once, remembered
