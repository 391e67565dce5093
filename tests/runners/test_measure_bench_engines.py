"""The benchmark's engines side by side: the float32 arms (our loop on a float32 copy of the pair, loaded beside the
pair in bf16) in the same process as the pair's own arms; their names, their references, their refusal."""

from __future__ import annotations

import json

import pytest

from runners.config.errors import ConfigError
from runners.records.bench_arm_names import ARMS, engine_ar, engine_of, loop_arm
from tests.helpers.bench_config import resolve_bench


@pytest.mark.parametrize(
    "arm, engine, ref, loop",
    [
        ("ar", "", "ar", "ar"),
        ("sd_dm", "", "ar", "sd_dm"),
        ("hf_assisted", "", "ar", "hf_assisted"),
        ("f32_sd", "f32_", "f32_ar", "sd"),
        ("f32_ar", "f32_", "f32_ar", "ar"),
        ("lc_sd_dm", "lc_", "lc_ar", "sd_dm"),
    ],
)
def test_engine_of_each_arm(arm, engine, ref, loop):
    assert (engine_of(arm), engine_ar(arm), loop_arm(arm)) == (engine, ref, loop)


def test_unknown_arm_named():
    with pytest.raises(ValueError, match="unknown bench arm 'f16_ar'.*f32_ar"):
        engine_of("f16_ar")
    assert len(set(ARMS)) == len(ARMS) == 11


def test_float32_arms_refused_where_the_pair_is_float32():
    """``pair.dtype=float32`` would make the f32_* arms repeat ar / sd / sd_dm: refused before loading."""
    with pytest.raises(
        ConfigError, match=r"float32 arms .* pair\.dtype=float32 resolves to float32"
    ):
        resolve_bench("pair.dtype=float32", "method.arms=[ar,sd,f32_ar,f32_sd]")
    c = resolve_bench("pair.dtype=bfloat16", "method.arms=[ar,f32_ar,f32_sd,f32_sd_dm]")
    assert c["method"]["arms"] == ["ar", "f32_ar", "f32_sd", "f32_sd_dm"]


def test_float32_rules_checked_like_ours():
    with pytest.raises(ConfigError, match=r"method\.dm_criterion='rejection'.*f32_sd_dm"):
        resolve_bench(
            "pair.dtype=bfloat16", "method.arms=[ar,f32_sd_dm]", "method.dm_criterion=rejection"
        )
    with pytest.raises(ConfigError, match=r"dropmatch\.K=0 .*f32_sd_dm"):
        resolve_bench("pair.dtype=bfloat16", "method.arms=[ar,f32_ar,f32_sd_dm]", "dropmatch.K=0")


@pytest.mark.subprocess
def test_bench_float32_arms_beside_bf16_records_and_tables(runs_root, main_env, monkeypatch):
    """experiment=bench on the tiny pair in bf16 with the float32 arms in the same process, at batch 1 and 2:
    the float32 SD equals the float32 AR token for token (greedy, lossless) at batch 1 and 2, its ratios are
    to its own engine's AR, the summary records both precisions, and the tables label the arms' dtypes."""
    import pandas as pd

    from tests.helpers.cli import run_main

    arms = ["ar", "sd", "sd_dm", "f32_ar", "f32_sd", "f32_sd_dm"]
    p = run_main(
        main_env,
        "experiment=bench",
        "pair.dtype=bfloat16",
        "dataset.limit=2",
        "decoding.max_new_tokens=8",
        "method.timing_repeats=1",
        "method.latency_repeats=0",
        f"method.arms=[{','.join(arms)}]",
        "method.batch_sizes=[1,2]",
        multirun=True,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = list(runs_root.iterdir())
    s = json.loads((rec / "summary.json").read_text())
    assert s["complete"] and s["model/dtype"] == "bfloat16" and s["model/f32_dtype"] == "float32"
    assert s["bench/f32_sd/identical_to_ar"] == 2, s["bench/f32_sd/first_mismatches"]
    assert s["bench/f32_sd/x_f32_ar"] > 0 and s["bench/f32_ar/x_ar"] > 0
    assert s["bench/f32_sd/tau"] >= 1 and s["bench/in_situ/f32_verify_over_decode"] > 0
    assert s["bench/batch2/f32_sd/x_f32_ar"] > 0
    assert s["bench/batch2/f32_sd/identical_to_batch1"] == 2, s[
        "bench/batch2/f32_sd/first_mismatches"
    ]
    lines = [json.loads(x) for x in (rec / "samples.jsonl").read_text().splitlines()]
    prompt = [ln for ln in lines if ln["kind"] == "prompt"]
    assert all(sorted(ln["arms"]) == sorted(arms) for ln in prompt)
    # the float32 loop is our loop: the same fields, the meter's parts recorded alike
    for ln in prompt:
        ours, f32 = ln["arms"]["sd_dm"], ln["arms"]["f32_sd_dm"]
        assert sorted(f32) == sorted(ours)
        assert [f32[k] is None for k in ("plain_s", "rule_s")] == [
            ours[k] is None for k in ("plain_s", "rule_s")
        ]

    monkeypatch.setenv("DROPMATCH_RESULTS", main_env["DROPMATCH_RESULTS"])
    from analysis.render import render

    render("bench", "smoke", echo=False)
    out = runs_root.parent / "bench"
    t = pd.read_csv(out / "bench.csv")
    assert dict(zip(t["arm"], t["dtype"])) == {
        **{a: "bfloat16" for a in arms[:3]},
        **{a: "float32" for a in arms[3:]},
    }
    assert t.set_index("arm").loc["f32_sd", "x_f32_ar"] == pytest.approx(s["bench/f32_sd/x_f32_ar"])
    md = (out / "bench.md").read_text()
    assert "× our float32 AR" in md and "our loop in float32: verify(L+1)/decode" in md
    b = pd.read_csv(out / "bench_batch.csv")
    assert set(b.loc[b["arm"].str.startswith("f32_"), "dtype"]) == {"float32"}


@pytest.mark.parametrize("backend", ["vllm", "llamacpp"])
def test_other_backends_refused_by_the_bench_not_by_its_keys(backend):
    """The bench's experiment sets ``backend.prefix_caching`` (an hf / llama.cpp key): another backend is refused
    by the bench's own message naming the arms that run the other engines, before the backend's keys are read."""
    with pytest.raises(
        ConfigError,
        match=rf"backend={backend} is invalid for method=bench; allowed: backend=hf .*lc_ar",
    ):
        resolve_bench(f"backend={backend}")
