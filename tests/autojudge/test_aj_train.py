"""Judge training on synthetic mining records (a known separation), the artefact's key and reuse, the
pure-torch scoring against scikit-learn, and the tiny-pair build + refusal of a run without its judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from criteria.autojudge import JudgeHead
from runners.autojudge.artefact import judge_dir, judge_key, mining_identity, root
from runners.autojudge.mine import encode_rows
from runners.autojudge.train import auc_interval, split_prompts, threshold_metrics, train
from runners.paths import REPO_ROOT
from runners.records.record import RunRecord

D_DRAFT, D = 5, 7
PAIR = {"name": "synthetic", "target": {"name": "t"}, "draft": {"name": "d"}, "dtype": "float32"}


def judge_cfg(**mining):
    return {
        "name": "gsm8k",
        "version": 1,
        "mining": {
            "dataset": "gsm8k",
            "split": "test",
            "offset": 1000,
            "limit": 40,
            "source_order": ["pinned"],
            "max_new_tokens": 16,
            "max_mismatches": None,
            "label": "answer",
            "features": "dd_dt",
            **mining,
        },
        "train": {
            "val_fraction": 0.25,
            "seed": 52,
            "C_grid": [1.0, 10.0],
            "quantiles": 26,
            "refit_on_all": False,
        },
    }


def write_records(cfg, n_prompts=40, per_prompt=6, seed=0):
    """Important mismatches have target feature 0 around +3, unimportant around -3 (a known separation)."""
    g = np.random.default_rng(seed)
    rec = RunRecord(root() / "mining", mining_identity(PAIR, cfg))
    with rec:
        rec.open({})
        for i in range(n_prompts):
            y = g.random(per_prompt) < 0.4
            dd = g.normal(size=(per_prompt, D_DRAFT)).astype(np.float32)
            dt = g.normal(size=(per_prompt, D)).astype(np.float32)
            dt[:, 0] += np.where(y, 3.0, -3.0)
            rec.append(
                {
                    "sample_id": f"s{i}",
                    "response_token_ids": [],
                    "correct": 1,
                    "mismatches": [{"important": bool(v)} for v in y],
                    "features": {
                        "d_draft": D_DRAFT,
                        "d_target": D,
                        "dd": encode_rows(list(torch.from_numpy(dd)), D_DRAFT),
                        "dt": encode_rows(list(torch.from_numpy(dt)), D),
                    },
                    "wall_s": 0.0,
                }
            )
        rec.write_summary({"complete": True, "num_expected": n_prompts, "num_samples": n_prompts})
    return rec


def test_known_separation_and_torch_scoring(results):
    cfg = judge_cfg()
    write_records(cfg)
    info = train(PAIR, cfg, log=lambda *_: None)
    assert (
        info["roc_auc_val"] > 0.95
        and info["num_mismatches"] == 240
        and info["num_val_prompts"] == 10
    )
    by_t = {m["threshold"]: m for m in info["metrics_val"]}
    assert by_t[0.5]["recall_important"] > 0.9 and by_t[0.0]["recall_important"] == 1.0
    assert by_t[1.0]["recall_important"] == 0.0 and by_t[1.0]["accept_rate"] == 1.0
    head = JudgeHead.load(judge_dir(info["judge_key"]) / "judge.pt")
    assert head.features == "dd_dt" and head.weight.shape == (D_DRAFT + D,)
    # the torch head reproduces the stored validation probabilities from the same features
    g = np.random.default_rng(1)
    x = torch.from_numpy(g.normal(size=(1, 4, D_DRAFT + D)).astype(np.float32))
    x[0, :, D_DRAFT] = torch.tensor(
        [3.0, -3.0, 3.0, -3.0]
    )  # clearly important / unimportant points
    th = torch.zeros(1, 5, D)
    th[0, 1:] = x[0, :, D_DRAFT:]
    p = head.prob_important(th, x[..., :D_DRAFT])
    z = ((x - head.mean) / head.scale) @ head.weight + head.bias
    assert torch.allclose(p, torch.sigmoid(z))
    assert (p[0] > 0.5).tolist() == [True, False, True, False]  # separated on target feature 0


def test_judge_reused_and_rekeyed(results):
    cfg = judge_cfg()
    write_records(cfg)
    a = train(PAIR, cfg, log=lambda *_: None)
    stamp = os.path.getmtime(judge_dir(a["judge_key"]) / "judge.pt")
    assert train(PAIR, cfg, log=lambda *_: None)["judge_key"] == a["judge_key"]
    assert os.path.getmtime(judge_dir(a["judge_key"]) / "judge.pt") == stamp  # not rebuilt
    other = judge_cfg()
    other["train"]["C_grid"] = [1.0]
    assert judge_key(PAIR, other) != a["judge_key"]
    assert judge_key(PAIR, judge_cfg(limit=41)) != a["judge_key"]  # the mining config is in the key
    assert (
        judge_key({**PAIR, "target": {"name": "t", "local_path": "/x"}}, cfg) == a["judge_key"]
    )  # not where from


def test_train_refuses_without_records(results):
    with pytest.raises(RuntimeError, match="mining records"):
        train(PAIR, judge_cfg(), log=lambda *_: None)


def test_split_and_metrics_helpers():
    tr, va = split_prompts(10, 0.1, 52)
    assert len(va) == 1 and sorted(np.concatenate([tr, va]).tolist()) == list(range(10))
    m = threshold_metrics(np.array([0.1, 0.6, 0.9]), np.array([0, 1, 1]), [0.5])[0]
    assert (
        m["recall_important"] == 1.0
        and m["precision_important"] == 1.0
        and abs(m["accept_rate"] - 1 / 3) < 1e-9
    )


def _cli(args, env):
    return subprocess.run(
        [sys.executable, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.subprocess
@pytest.mark.slow
def test_tiny_build_then_run_and_refusal(tiny_pair_dir, results):
    env = {
        **os.environ,
        "DROPMATCH_TINY_PAIR": str(tiny_pair_dir),
        "DROPMATCH_RESULTS": str(results),
        "PYTHONPATH": str(REPO_ROOT),
        "DROPMATCH_THREADS": "1",
    }
    # the random tiny target never writes a final answer: label=answer would skip every prompt (nothing to learn)
    base = [
        "pair=tiny",
        "profile=smoke",
        "L=3",
        "progress=quiet",
        "method.judge.mining.label=correctness",
    ]  # AJ methods only
    refused = _cli(["-m", "runners.main", "method=autojudge", *base], env)
    assert (
        refused.returncode == 2
        and "has not been built" in refused.stderr
        and "runners.autojudge.build" in refused.stderr
    )
    built = _cli(["-m", "runners.autojudge.build", "method=autojudge", *base], env)
    assert built.returncode == 0, built.stderr[-2000:]
    judges = list((results / "autojudge" / "judges").iterdir())
    assert (
        len(judges) == 1 and json.loads((judges[0] / "judge.json").read_text())["num_prompts"] == 2
    )
    for method in ("autojudge", "autojudge_dropmatch"):
        ran = _cli(["-m", "runners.main", f"method={method}", *base], env)
        assert ran.returncode == 0, ran.stderr[-2000:]
    overlap = _cli(
        ["-m", "runners.main", "method=autojudge", *base, "dataset.offset=999", "dataset.limit=5"],
        env,
    )
    assert overlap.returncode == 2 and "overlap" in overlap.stderr


def test_prompt_folds_hold_out_each_prompt_once():
    from runners.autojudge.train import prompt_folds

    groups = np.repeat(np.arange(5), 3)
    folds = prompt_folds(groups, k=10)
    assert len(folds) == 5
    held = np.concatenate([va for _, va in folds])
    assert sorted(held.tolist()) == list(range(15))  # every row held out exactly once
    for tr, va in folds:
        assert not set(groups[tr]) & set(
            groups[va]
        )  # a prompt never straddles train and held-out rows


def test_cv_selection_refits_on_all_and_reports_out_of_fold_metrics(results):
    # 4 prompts, one of them all-unimportant: the 90/10 split's one validation prompt would have one class
    cfg = judge_cfg()
    cfg["train"] = {**cfg["train"], "selection": "cv", "C_grid": [0.0001, 1.0]}
    cfg["mining"]["limit"] = 4
    write_records(cfg, n_prompts=4, per_prompt=8, seed=3)
    info = train(PAIR, cfg, log=lambda *_: None)
    assert info["selection"] == "cv" and info["num_folds"] == 4
    assert info["num_train"] == info["num_val"] == info["num_mismatches"] == 32
    assert info["roc_auc_val"] > 0.95  # out of fold: each prompt scored by a head that never saw it
    lo, hi = info["roc_auc_val_ci"]
    assert lo <= info["roc_auc_val"] <= hi <= 1.0
    assert len(info["val_p"]) == 32 and sum(info["val_y"]) == info["num_important"]
    by_t = {m["threshold"]: m for m in info["metrics_val"]}
    assert by_t[0.5]["recall_important"] > 0.8


def test_selection_is_validated(results):
    from runners.config.errors import ConfigError

    cfg = judge_cfg()
    cfg["train"] = {**cfg["train"], "selection": "loo"}
    write_records(cfg, n_prompts=4)
    with pytest.raises(
        ConfigError, match=r"method\.judge\.train\.selection='loo'.*allowed: val, cv"
    ):
        train(PAIR, cfg, log=lambda *_: None)


@pytest.mark.subprocess
def test_train_entry_point_finds_its_config(tmp_path):
    # regression: a relative config_path resolved against runners.autojudge.build broke `-m runners.autojudge.train`
    env = {**os.environ, "DROPMATCH_RESULTS": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "runners.autojudge.train", "method=autojudge"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    text = out.stdout + out.stderr
    assert "Primary config module" not in text
    assert out.returncode != 0 and "mining records" in text and "missing or unfinished" in text, (
        text[-2000:]
    )


def test_build_uses_an_existing_judge_without_its_mining_records(results):
    # a fresh clone has the committed judge but not always the mining records: build must not mine again
    import shutil

    from runners.autojudge.build import build

    cfg = judge_cfg()
    rec = write_records(cfg)
    info = train(PAIR, cfg, log=lambda *_: None)
    shutil.rmtree(rec.dir)
    lines = []
    out = build(PAIR, cfg, log=lines.append)  # mining would need the (absent) model and data
    assert out["judge_key"] == info["judge_key"] and "mining and training skipped" in lines[0]


def test_auc_interval_resamples_prompts():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 6)
    y = rng.integers(0, 2, len(groups))
    # a perfect score: every resample's AUC is 1
    assert auc_interval(y.astype(float), y, groups) == [1.0, 1.0]
    # noise: the interval holds 0.5 and is wide at 240 rows
    lo, hi = auc_interval(rng.random(len(y)), y, groups)
    assert lo < 0.5 < hi and hi - lo > 0.08
    # the prompt is the unit: a prompt's rows are drawn together (one prompt, many rows: no interval)
    p = rng.random(len(y))
    # undefined: one class, or one prompt
    assert auc_interval(p, np.zeros_like(y), groups) is None
    assert auc_interval(p, y, np.zeros_like(groups)) is None


def test_refit_on_all_keeps_held_out_validation_scores(results):
    """With ``refit_on_all`` the head is refitted on every prompt, but the validation scores (and the AUC's
    interval) stay those of the head that never saw the validation prompts."""
    base = judge_cfg()
    write_records(base)
    infos = {}
    for refit in (False, True):
        cfg = {**base, "train": {**base["train"], "refit_on_all": refit}}
        infos[refit] = train(PAIR, cfg, log=lambda *_: None)
    assert infos[True]["judge_key"] != infos[False]["judge_key"]
    assert infos[True]["val_p"] == infos[False]["val_p"]
    assert infos[True]["roc_auc_val_ci"] == infos[False]["roc_auc_val_ci"] is not None
    lo, hi = infos[True]["roc_auc_val_ci"]
    assert lo <= infos[True]["roc_auc_val"] <= hi
