"""The benchmark at batch B (method.batch_sizes): batched outputs equal batch 1's, the summary's ratios by hand,
the table's intervals, bad sizes refused by name, the default keeps the run id."""

from __future__ import annotations

import math

import pytest
from hydra import compose, initialize_config_dir

from runners.config.errors import ConfigError
from runners.measure import resolve_measurement
from runners.measure.bench_batch_summary import paired_repeats, summarize_batches
from runners.paths import REPO_ROOT
from runners.records.run_id import run_id_of
from tests.helpers.bench_config import resolve_bench


@pytest.fixture(scope="module")
def tiny3(tiny_pair_dir):
    """The tiny pair (float32) and the first 3 GSM8K prompts."""
    from omegaconf import OmegaConf

    import runners.datasets  # noqa: F401
    from runners.registry import DATASETS, build
    from tests.helpers.tiny import load_tiny_pair

    ds = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf" / "dataset" / "gsm8k.yaml"))
    return load_tiny_pair(tiny_pair_dir), build(DATASETS, {**ds, "limit": 3}).load()


@pytest.mark.parametrize("criterion, L", [("autoregressive", 0), ("rejection", 3)])
def test_batched_outputs_equal_batch1_outputs(tiny3, criterion, L):
    """Greedy AR and SD through the HF loop: 3 prompts decoded together (batch_size 3, one timed call) give each
    prompt the ids it gets alone; tokens add up; the call's seconds are finite."""
    from criteria.dropout_heads import HeadSpec
    from runners.backends.hf_loop import HFLoopBackend
    from runners.config.decode_spec import build_rule
    from runners.measure.bench_arms import our_generate, our_generate_batch

    pair, samples = tiny3
    rule = (build_rule({"method": {"criterion": criterion}, "dropmatch": {}}), HeadSpec())
    kw = {"L": L, "rule": rule, "max_new_tokens": 24, "seed": 0}
    one = HFLoopBackend(pair, prefix_caching=False)
    alone = [our_generate(one, s, **kw) for s in samples]
    together = our_generate_batch(
        HFLoopBackend(pair, prefix_caching=False, batch_size=3), samples, **kw
    )
    assert [o["prompt_id"] for o in together["outputs"]] == [s.sample_id for s in samples]
    assert [o["output_token_ids"] for o in together["outputs"]] == [
        a["output_token_ids"] for a in alone
    ]
    assert together["tokens"] == sum(a["tokens"] for a in alone) > 0
    assert math.isfinite(together["seconds"]) and together["seconds"] > 0
    # prefill excluded: each prompt's first token and prefill out, the rest of the call's seconds in
    assert together["decode_tokens"] == together["tokens"] - 3
    assert together["prefill_s"] == pytest.approx(sum(o["prefill_s"] for o in together["outputs"]))
    assert all(o["prefill_s"] > 0 for o in together["outputs"])
    assert 0 < together["decode_s"] < together["seconds"] - together["prefill_s"] + 1e-9
    if L > 0:  # the same rounds and acceptances as alone (greedy SD is deterministic)
        assert [(o["rounds"], o["accepted"]) for o in together["outputs"]] == [
            (a["rounds"], a["accepted"]) for a in alone
        ]


def _out(pid, ids, rounds=0, accepted=0):
    return {
        "prompt_id": pid,
        "output_token_ids": ids,
        "tokens": len(ids),
        "rounds": rounds,
        "accepted": accepted,
        "verify_passes": rounds,
    }


def _single(ids, seconds, rounds=0, accepted=0):
    return {"output_token_ids": ids, "tokens": len(ids), "seconds": seconds, "rounds": rounds}


def _lines():
    """Prompts a, b, c at batch 1 (c is not in the batch: its 100 s must not count) and a+b at B=2, 2 repeats.

    ar: 10 tokens / 2 s per prompt alone; together 20 tokens in 2 s (repeat 0) and 4 s (repeat 1).
    sd: 10 tokens / 1 s alone; together 20 tokens in 1.6 s (both repeats); sd's b differs at position 3 in
    repeat 1."""
    ids = list(range(10))
    lines = []
    for rep in (0, 1):
        for pid in ("a", "b", "c"):
            s = 100.0 if pid == "c" else 1.0
            lines.append(
                {
                    "kind": "prompt",
                    "prompt_id": pid,
                    "repeat": rep,
                    "arms": {"ar": _single(ids, 2 * s), "sd": _single(ids, s)},
                }
            )
        sd_b = ids if rep == 0 else ids[:3] + [77] + ids[4:]
        lines.append(
            {
                "kind": "batch",
                "batch_size": 2,
                "prompt_ids": ["a", "b"],
                "repeat": rep,
                "arms": {
                    "ar": {
                        "tokens": 20,
                        "seconds": 2.0 + 2 * rep,
                        "outputs": [_out("a", ids), _out("b", ids)],
                    },
                    "sd": {
                        "tokens": 20,
                        "seconds": 1.6,
                        "outputs": [_out("a", ids, 3, 6), _out("b", sd_b, 3, 6)],
                    },
                },
            }
        )
    return lines


def test_summarize_batches_by_hand():
    s = summarize_batches(_lines(), ["ar", "hf_ar", "sd"])
    k = "bench/batch2"
    assert (
        s["bench/batch_sizes"] == [1, 2] and s[f"{k}/num_prompts"] == 2 and s[f"{k}/repeats"] == 2
    )
    # ar: 40 tokens / 6 s at B=2 against 40 tokens / 8 s alone (a, b; c left out)
    assert s[f"{k}/ar/tok_per_s"] == pytest.approx(40 / 6)
    assert s[f"{k}/ar/batch1_tok_per_s"] == pytest.approx(5.0)
    assert s[f"{k}/ar/x_batch1"] == pytest.approx(4 / 3)
    # sd: 40 / 3.2 = 12.5 tok/s together, 10 alone; over our AR at B=2: 12.5 / (40 / 6) = 1.875
    assert s[f"{k}/sd/x_batch1"] == pytest.approx(1.25)
    assert s[f"{k}/sd/x_ar"] == pytest.approx(1.875)
    assert s[f"{k}/sd/tau"] == pytest.approx(1 + 24 / 12)
    assert s[f"{k}/ar/tok_per_s_repeat_std"] == pytest.approx(math.sqrt(12.5))  # rates 10 and 5
    assert (s[f"{k}/ar/identical_to_batch1"], s[f"{k}/ar/num_outputs"]) == (4, 4)
    assert (s[f"{k}/sd/identical_to_batch1"], s[f"{k}/sd/num_outputs"]) == (3, 4)
    assert s[f"{k}/sd/first_mismatches"] == [
        {"prompt_id": "b", "repeat": 1, "position": 3, "batch1_token": 3, "batch_token": 77}
    ]
    assert not any(key.startswith(f"{k}/hf_ar/") for key in s)  # transformers' arms: batch 1 only
    assert summarize_batches([ln for ln in _lines() if ln["kind"] == "prompt"], ["ar"]) == {}


def test_batch_ratio_intervals_over_repeats():
    """Two repeats: a bootstrap interval around the summary's value, inside the per-repeat ratios; one: none."""
    from analysis.tables import bench_batch

    lines = _lines()
    pairs = bench_batch.paired_repeats(lines, 2, "ar")
    assert pairs == paired_repeats(lines, 2, "ar") == [(20, 2.0, 20, 4.0), (20, 4.0, 20, 4.0)]
    assert bench_batch.paired_repeats(lines, 2, "sd", "ar") == paired_repeats(lines, 2, "sd", "ar")
    batch_rows, repeat_ratio_ci = bench_batch.batch_rows, bench_batch.repeat_ratio_ci
    e = repeat_ratio_ci(pairs)
    assert (
        e.value == pytest.approx(4 / 3)
        and e.lo == pytest.approx(1.0)
        and e.hi == pytest.approx(2.0)
    )
    one = repeat_ratio_ci(pairs[:1])
    assert one.value == pytest.approx(2.0) and math.isnan(one.lo) and math.isnan(one.hi)
    s = {
        **summarize_batches(lines, ["ar", "sd"]),
        "bench/arms": ["ar", "sd"],
        "bench/L": 3,
    }
    t = batch_rows(s, lines, {}, {"ar": "float32", "sd": "float32"})
    assert list(t["arm"]) == ["ar", "sd"] and list(t["B"]) == [2, 2]
    assert t["x_batch1"].tolist() == pytest.approx([4 / 3, 1.25])
    assert t.loc[1, "x_ar"] == pytest.approx(1.875) and t.loc[0, "x_ar"] == 1.0


def _with_decode(lines):
    """``_lines()`` with the prefill-excluded fields: alone, 9 tokens after the first in 1.5 s (ar) and 0.5 s (sd)
    per prompt; together, ar 18 tokens in 1.0 s (repeat 0) and 2.0 s (repeat 1), sd 18 in 0.9 s."""
    for ln in lines:
        for arm, r in ln["arms"].items():
            if ln["kind"] == "prompt":
                r["decode_tokens"], r["decode_s"] = (
                    9,
                    (1.5 if arm == "ar" else 0.5) * (100 if ln["prompt_id"] == "c" else 1),
                )
            else:
                r["decode_tokens"] = 18
                r["decode_s"] = (1.0 + ln["repeat"]) if arm == "ar" else 0.9
    return lines


def test_prefill_excluded_batch_rates_by_hand():
    """ar: 36 tokens / 3 s together against 36 / 6 s alone (c left out): 12 tok/s, 2x batch 1; sd: 36 / 1.8 s
    against 36 / 2 s: 1.111x. Lines recorded without the fields give no such keys and blank columns."""
    from analysis.tables import bench_batch

    lines = _with_decode(_lines())
    s = summarize_batches(lines, ["ar", "sd"])
    k = "bench/batch2"
    assert s[f"{k}/ar/decode_tok_per_s"] == pytest.approx(12.0)
    assert s[f"{k}/ar/batch1_decode_tok_per_s"] == pytest.approx(6.0)
    assert s[f"{k}/ar/decode_x_batch1"] == pytest.approx(2.0)
    assert s[f"{k}/sd/decode_x_batch1"] == pytest.approx(2.0 / 1.8)
    assert s[f"{k}/ar/x_batch1"] == pytest.approx(4 / 3)  # the prefill-included ratio is unchanged
    assert paired_repeats(lines, 2, "ar", decode=True) == [(18, 1.0, 18, 3.0), (18, 2.0, 18, 3.0)]
    t = bench_batch.batch_rows(
        {**s, "bench/arms": ["ar", "sd"], "bench/L": 3},
        lines,
        {},
        {"ar": "float32", "sd": "float32"},
    )
    assert t["decode_x_batch1"].tolist() == pytest.approx([2.0, 2.0 / 1.8])
    e = t.loc[0]
    assert e["decode_x_batch1_lo"] == pytest.approx(1.5) and e[
        "decode_x_batch1_hi"
    ] == pytest.approx(3.0)
    f = bench_batch.format_batch(t)
    assert f["tok/s at B, prefill excl."].tolist() == ["12.00", "20.00"]
    old = summarize_batches(_lines(), ["ar"])
    assert not any("decode" in key for key in old)
    t_old = bench_batch.batch_rows(
        {**old, "bench/arms": ["ar"], "bench/L": 3}, _lines(), {}, {"ar": "float32"}
    )
    assert bench_batch.format_batch(t_old)["× batch 1, prefill excl. [95% CI]"].tolist() == [""]


@pytest.mark.parametrize(
    "value",
    ["[0,1]", "[8]", "[1,1]", "[1,2.5]", "[1,true]", "3"],
)
def test_bad_batch_sizes_refused_by_name(value):
    with pytest.raises(ConfigError, match=r"method\.batch_sizes"):
        resolve_bench(f"method.batch_sizes={value}", "dataset.limit=8")


def test_batch_above_the_prompts_refused():
    with pytest.raises(ConfigError, match=r"method\.batch_sizes.*dataset\.limit"):
        resolve_bench("method.batch_sizes=[1,8]", "dataset.limit=4")


def test_default_batch_sizes_keep_the_run_id():
    """``[1]`` (the method's default; the default profile asks for ``[1, 8]``) is dropped: the config and run id of
    a bench run made before the field; other sizes are sorted into the config and change the id."""
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="run", overrides=["experiment=bench", "profile=default"])
        assert list(cfg.method.batch_sizes) == [1, 8] and cfg.dataset.limit == 8
        cfg = compose(
            config_name="run",
            overrides=["experiment=bench", "profile=default", "method.batch_sizes=[1]"],
        )
    assert list(cfg.method.batch_sizes) == [1]
    before = cfg.copy()
    with open_dict(before):
        del before.method["batch_sizes"]  # a config from before the field existed
    default = resolve_measurement(cfg, identify_models=False)
    old = resolve_measurement(before, identify_models=False)
    assert "batch_sizes" not in default["method"] and default == old
    assert run_id_of(default) == run_id_of(old)
    b8 = resolve_bench("method.batch_sizes=[8,1]", "dataset.limit=8")
    assert b8["method"]["batch_sizes"] == [1, 8]
    assert run_id_of(b8) != run_id_of(resolve_bench("method.batch_sizes=[1]", "dataset.limit=8"))
    assert run_id_of(b8) == run_id_of(resolve_bench("method.batch_sizes=[1,8]", "dataset.limit=8"))


@pytest.mark.llamacpp
def test_llamacpp_arms_share_the_pair_and_decode_together_as_alone(tiny_pair_dir, tmp_path):
    """The bench's llama.cpp arms at B=3 (the tiny pair as float32 GGUF): the batch engine is another
    LlamaCppBackend with batch_size 3 on the already loaded pair (one per engine and B), and each prompt's ids
    equal its batch-1 ids for AR and SD+DM."""
    import shutil

    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from runners.datasets.base import Sample
    from runners.measure.bench import _Arms
    from runners.models.gguf_export import export_qwen2

    for role in ("target", "draft"):
        shutil.copytree(tiny_pair_dir / role, tmp_path / role)
        export_qwen2(tmp_path / role, tmp_path / role / "model.gguf", "f32")
    spec = lambda r: {"name": r, "local_path": str(tmp_path / r), "order": ["local"]}  # noqa: E731
    c = {
        "L": 3,
        "decoding": {"seed": 0},
        "method": {
            "arms": ["ar", "lc_ar", "lc_sd_dm"],
            "criterion": "rejection",
            "dm_criterion": "dropmatch_js",
        },
        "dropmatch": {"K": 3, "p_drop": 0.3, "majority": "strict", "include_target": False},
        "pair": {
            "name": "tiny",
            "dtype": "float32",
            "target": spec("target"),
            "draft": spec("draft"),
        },
        "backend": {"name": "hf", "prefix_caching": False, "batch_size": 1},
    }
    arms = _Arms(c, log=lambda _: None)
    prompts = ["Janet has 3 apples and buys 5 more. How many?", "def add(a, b):", "12 times 7 is"]
    samples = [Sample(f"t/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(prompts)]
    be = arms.batch_backend("lc_ar", 3)
    assert be.name == "llamacpp" and be.batch_size == 3 and be.pair is arms.pair
    assert arms.batch_backend("lc_sd_dm", 3) is be and arms.batch_backend("ar", 3).name == "hf"
    for arm in ("lc_ar", "lc_sd_dm"):
        alone = [arms.run(arm, s, 20)["output_token_ids"] for s in samples]
        together = arms.run_batch(arm, samples, 20)
        assert [o["output_token_ids"] for o in together["outputs"]] == alone, arm


@pytest.mark.subprocess
def test_bench_batch_units_records_and_table(runs_root, main_env, monkeypatch):
    """experiment=bench with method.batch_sizes=[1,2] on the tiny pair: units batch2/<repeat> after the prompt
    units, our arms only, outputs equal to batch 1; results/bench/bench_batch.{md,csv} beside bench.md."""
    import json

    import pandas as pd

    from tests.helpers.cli import run_main

    args = [
        "experiment=bench",
        "pair.dtype=float32",
        "dataset.limit=2",
        "decoding.max_new_tokens=8",
        "method.timing_repeats=2",
        "method.latency_repeats=0",
        "method.arms=[ar,hf_ar,sd,sd_dm]",
        "method.batch_sizes=[1,2]",
    ]
    p = run_main(main_env, *args, multirun=True)
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = list(runs_root.iterdir())
    ids = [json.loads(x)["sample_id"] for x in (rec / "samples.jsonl").read_text().splitlines()]
    assert ids[-2:] == ["batch2/0", "batch2/1"] and len(ids) == 6
    s = json.loads((rec / "summary.json").read_text())
    assert s["complete"] and s["bench/batch_sizes"] == [1, 2]
    for arm in ("ar", "sd", "sd_dm"):
        assert s[f"bench/batch2/{arm}/tok_per_s"] > 0 and s[f"bench/batch2/{arm}/x_batch1"] > 0
    for arm in ("ar", "sd"):
        assert s[f"bench/batch2/{arm}/identical_to_batch1"] == 4, s[
            f"bench/batch2/{arm}/first_mismatches"
        ]
    assert "bench/batch2/hf_ar/tok_per_s" not in s

    monkeypatch.setenv("DROPMATCH_RESULTS", main_env["DROPMATCH_RESULTS"])
    from analysis.render import render

    render("bench", "smoke", echo=False)
    out = runs_root.parent / "bench"
    assert list(pd.read_csv(out / "bench.csv")["arm"]) == ["ar", "hf_ar", "sd", "sd_dm"]
    t = pd.read_csv(out / "bench_batch.csv")
    assert list(t["arm"]) == ["ar", "sd", "sd_dm"] and (t["B"] == 2).all()
    assert t["x_batch1"].tolist() == pytest.approx(
        [s[f"bench/batch2/{a}/x_batch1"] for a in ("ar", "sd", "sd_dm")]
    )
    md = (out / "bench_batch.md").read_text()
    assert "B=2: the first 2 prompts decoded together x 2 repeats" in md and "CPU ISA" in md
    assert "assisted generation decodes a batch of one" in md


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["dropmatch.K=0"], r"dropmatch\.K=0 .*sd_dm"),
        (["method.dm_criterion=nonsense"], r"method\.dm_criterion='nonsense'.*dropmatch_js"),
        (["method.dm_criterion=rejection"], r"method\.dm_criterion='rejection'.*DropMatch rule"),
        (
            ["method.criterion=dropmatch_js"],
            r"method\.criterion='dropmatch_js'.*no MC-dropout heads",
        ),
        (["method.arms=sd"], r"method\.arms='sd'.*a list of distinct names"),
        (["method.arms=[]"], r"method\.arms=.*a list of distinct names"),
    ],
)
def test_arm_rules_refused_by_name_before_loading(overrides, field):
    """The arms' rules and K are checked in the config (no model loads in ``_resolve``): a rule the arm's label
    would misname, or an SD+DM arm without heads, is refused naming the field and the allowed values."""
    with pytest.raises(ConfigError, match=field):
        resolve_bench(*overrides)


def test_arms_without_dropmatch_take_any_k():
    """``dropmatch.K=0`` is fine when no arm reads the heads."""
    c = resolve_bench("dropmatch.K=0", "method.arms=[ar,sd,hf_assisted]")
    assert c["method"]["arms"] == ["ar", "sd", "hf_assisted"]
