"""EAGLE's 80-question sets (eagle_gsm8k, mt_bench, alpaca) and KoMT-Bench: bundled files, ids, prompts, scorer."""

from __future__ import annotations

import hashlib

import pytest

from runners.paths import REPO_ROOT

KEYS = ("eagle_gsm8k", "mt_bench", "alpaca", "komt_bench")


def build(name, **over):
    import yaml

    import runners.datasets  # noqa: F401
    from runners.registry import DATASETS
    from runners.registry import build as build_

    cfg = yaml.safe_load(
        (REPO_ROOT / "conf" / "dataset" / f"{name}.yaml").read_text(encoding="utf-8")
    )
    return build_(DATASETS, {**cfg, **over})


@pytest.mark.parametrize("name", KEYS)
def test_bundled_file_sha_and_license(name, dataset_config):
    cfg = dataset_config(name)
    pinned = cfg["source"]["pinned"]
    path = REPO_ROOT / pinned["file"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == pinned["sha256"]
    assert (path.parent / "LICENSE").is_file()
    assert cfg["source"]["order"] == ["local", "pinned", "hub"] and cfg["name"] == name


@pytest.mark.parametrize("name", KEYS)
def test_loads_80_first_turn_prompts(name):
    ds = build(name)
    s = ds.load()
    assert len(s) == 80 and ds.provenance.startswith("pinned:")
    assert len({x.sample_id for x in s}) == 80 and all(
        x.sample_id.startswith(f"{name}/test/") for x in s
    )
    assert all(
        len(x.messages) == 1 and x.messages[0]["role"] == "user" and x.messages[0]["content"]
        for x in s
    )


def test_ids_and_window():
    assert [x.sample_id for x in build("mt_bench", offset=2, limit=2).load()] == [
        "mt_bench/test/83",
        "mt_bench/test/84",
    ]
    ko = build("komt_bench", limit=1).load()[0]
    assert (
        ko.sample_id == "komt_bench/test/81"
        and ko.meta["num_turns"] == 2
        and "하와이" in ko.messages[0]["content"]
    )
    assert build("eagle_gsm8k", limit=1).load()[0].sample_id == "eagle_gsm8k/test/0"


def test_scorers_configured(dataset_config):
    assert dataset_config("eagle_gsm8k")["scorer"] == "eagle_gsm8k_exact_match"
    assert all(dataset_config(k)["scorer"] == "none" for k in ("mt_bench", "alpaca", "komt_bench"))


def test_eagle_gsm8k_exact_match_final_number():
    pytest.importorskip("lm_eval")
    import runners.scorers  # noqa: F401
    from runners.registry import SCORERS
    from runners.registry import build as build_

    s = build("eagle_gsm8k", limit=2).load()
    assert s[0].reference["answer"].strip().endswith("#### 109")
    scorer = build_(SCORERS, {"name": "eagle_gsm8k_exact_match"})
    res = scorer.score(s, ["... so Allen will be 109 years old.", "The answer is 5"])
    assert [r["correct"] for r in res] == [1, 0]
    assert scorer.aggregate(res)["accuracy"] == 0.5
