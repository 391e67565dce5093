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


def test_missing_local_path_is_an_error_not_the_pinned_weights(tmp_path):
    """Before: a mistyped ``local_path`` fell through to the pair's pinned model, so the user ran the built-in
    weights believing they ran theirs. Now the set path is the model: missing, it is an error naming it."""
    from runners.models.sources import ModelUnavailableError, pick_source

    spec = {
        "name": "Qwen/T",
        "local_path": str(tmp_path / "my-modle"),
        "order": ["local", "pinned", "hub"],
        "pinned": {"sha256": "0" * 64},
        "hub_id": "Qwen/T",
    }
    with pytest.raises(ModelUnavailableError) as e:
        pick_source(spec)
    assert str(e.value) == (
        f"model 'Qwen/T' is unavailable (local_path='{tmp_path / 'my-modle'}' does not exist; it is not "
        "replaced by the pair's other sources). Provide it by fixing the path (a directory with config.json, "
        "the tokenizer and the weights), or set local_path=null to use pinned, hub"
    )
    assert pick_source({**spec, "local_path": None}) == ("pinned", None)
    # a local-only model (the tiny pair) is not told to set local_path=null, which would leave it no source
    with pytest.raises(ModelUnavailableError) as e:
        pick_source({**spec, "order": ["local"]})
    assert "local_path=null" not in str(e.value)
    assert str(e.value).endswith("the tokenizer and the weights) (the pair has no other source)")


def test_missing_pair_says_how_to_provide_it_without_changing_run_ids(tmp_path):
    """The tiny pair without ``DROPMATCH_TINY_PAIR`` (seen: "local_path='/target' does not exist ... set
    local_path=null", which cannot work for it): the pair's ``setup_hint`` is in the error; it is text, not a
    setting, so it stays out of the run id."""
    from runners.models.identity import check_sources
    from runners.models.sources import ModelUnavailableError

    spec = {"name": "t", "local_path": str(tmp_path / "none" / "target"), "order": ["local"]}
    pair = {"name": "tiny", "setup_hint": "build it with X", "target": spec}
    with pytest.raises(
        ModelUnavailableError,
        match=r"^pair\.target: model 't' is unavailable .*; pair=tiny: build it with X$",
    ):
        check_sources(pair, ["target"])
    cfg = {"pair": {k: v for k, v in pair.items() if k != "setup_hint"}, "L": 3}
    assert run_id_of(cfg) == run_id_of({**cfg, "pair": pair})


@pytest.mark.subprocess
def test_cli_missing_local_path_exits_2_before_anything_loads(main_env, tmp_path):
    from tests.helpers.cli import run_main

    p = run_main(
        main_env, f"pair={EMBEDDED}", f"pair.target.local_path={tmp_path / 'nope'}", timeout=300
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        f"config error: pair.target: model 'Qwen/Qwen2.5-Coder-1.5B-Instruct' is unavailable "
        f"(local_path='{tmp_path / 'nope'}' does not exist" in p.stderr
    ), p.stderr
    assert "Traceback" not in p.stderr
    assert not Path(main_env["DROPMATCH_RESULTS"]).exists()


def test_own_weights_are_named_by_what_ran(tiny_pair_dir, tmp_path):
    """Before: weights given through ``local_path`` kept the built-in pair's and model's names in the config,
    so tables and footers named a model that did not run. A prepared copy of the pinned weights, or a hub cache
    snapshot of the same model, is that model and keeps its name."""
    own = resolved(
        f"pair={EMBEDDED}",
        "pair.dtype=float32",
        f"pair.target.local_path={tiny_pair_dir / 'target'}",
    )
    assert own["pair"]["target"]["name"] == "local:target"
    assert own["pair"]["draft"]["name"] == "Qwen/Qwen2.5-Coder-0.5B-Instruct"
    assert own["pair"]["name"] == "Qwen2.5-Coder-0.5B-Instruct_local:target"

    prepared = tmp_path / "prepared"
    prepared.mkdir()
    pinned = resolved(f"pair={EMBEDDED}", "pair.dtype=float32")
    (prepared / ".complete").write_text(pinned["model_identity"]["target"]["sha256"] + "\n")
    same = resolved(f"pair={EMBEDDED}", "pair.dtype=float32", f"pair.target.local_path={prepared}")
    assert same["pair"]["name"] == EMBEDDED
    assert same["pair"]["target"]["name"] == "Qwen/Qwen2.5-Coder-1.5B-Instruct"

    other_hub = tmp_path / "hub" / "models--org--Other-7B" / "snapshots" / ("c" * 40)
    other_hub.mkdir(parents=True)
    hub = resolved(f"pair={EMBEDDED}", "pair.dtype=float32", f"pair.draft.local_path={other_hub}")
    assert hub["pair"]["draft"]["name"] == "org/Other-7B"
    assert hub["pair"]["name"] == "Other-7B_Qwen2.5-Coder-1.5B-Instruct"
    # a name the user gives is kept
    named = resolved(
        f"pair={EMBEDDED}",
        "pair.dtype=float32",
        "pair.name=mine",
        "pair.target.name=my-target",
        f"pair.target.local_path={tiny_pair_dir / 'target'}",
    )
    assert (named["pair"]["name"], named["pair"]["target"]["name"]) == ("mine", "my-target")
