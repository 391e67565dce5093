"""A whole run through ``runners.run`` with ``backend=vllm`` on the tiny pair: config -> engine (built by the
backend, warm-up included) -> hook -> records -> summary, then the resumed rerun skips it."""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.own_engine]
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it


@pytest.mark.parametrize("sparse", [False, True])
def test_run_records_dropmatch_through_vllm(tiny_pair, tmp_path, monkeypatch, sparse):
    from hydra import compose, initialize_config_dir

    from runners.paths import REPO_ROOT
    from runners.run import run

    target, _ = tiny_pair
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(target.parent))
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "results"))
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "run",
            overrides=[
                "pair=tiny",
                "backend=vllm",
                "backend.max_model_len=512",
                "method=dropmatch",
                "L=3",
                "dataset=spec_bench",
                "dataset.limit=2",
                "decoding.max_new_tokens=12",
                "profile=smoke",
                "progress=quiet",
                *(["dropmatch.sparse_top_n=8", "dropmatch.sparse_escape=true"] if sparse else []),
            ],
        )
    summary = run(cfg, log=lambda *_: None)
    assert summary["complete"] and summary["num_samples"] == 2
    drafts = summary["spec/counters"]["num_drafts"]
    assert drafts > 0 and 1.0 <= summary["spec/mean_acceptance_length"] <= 4.0
    run_dir = tmp_path / "results" / "runs" / summary["run_id"]
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len({r["sample_id"] for r in rows}) == 2
    assert all(
        0 < len(r["output_token_ids"]) <= 12
        and r["spec"]["num_drafts"] == len(r["accepted_per_round"])
        for r in rows
    )
    for r in rows:  # every record counts only the tokens in its output
        assert (
            r["spec"]["num_drafts"] + r["spec"]["num_accepted_tokens"]
            == len(r["output_token_ids"]) - 1 + r["eos_removed"]
        )
        assert r["stop_reason"] in ("eos", "stop", "length") and r["speed"]["wall_s"] > 0
        # the hook timed each verify step's target forward; the exact rule with p_drop > 0 (vLLM's default
        # decision) computes the plain and the head rows in one matmul, so it has no plain / rule split
        assert r["speed"]["verify_s"] > 0
        if sparse:
            assert r["speed"]["plain_s"] > 0 and r["speed"]["rule_s"] > 0
        else:
            assert "rule_s" not in r["speed"]
    if sparse:  # the summary sums the round meter's parts, as for the HF backend's runs
        assert summary["speed/rule_s"] == pytest.approx(sum(r["speed"]["rule_s"] for r in rows))
    assert sum(r["spec"]["num_drafts"] for r in rows) == drafts
    again = run(cfg, log=lambda *_: None)  # resumable: nothing to redo
    assert again["run_id"] == summary["run_id"]
    assert len((run_dir / "samples.jsonl").read_text().splitlines()) == 2
