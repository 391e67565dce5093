"""The benchmark run (method=bench): the transformers arms, the summary by hand, records, resume, the table."""

from __future__ import annotations

import json
import math
import re

import pandas as pd
import pytest

from runners.measure.bench_summary import first_mismatch, summarize_bench
from runners.records.bench_lines import decision_per_pass, decision_share, uses_meter
from tests.helpers.cli import run_main


@pytest.fixture(scope="module")
def tiny(tiny_pair_dir):
    import runners.datasets  # noqa: F401
    from runners.config.resolve import resolve_run_config  # noqa: F401  (registries)
    from runners.models.loader import load_pair
    from runners.registry import DATASETS, build

    pair = load_pair(
        {
            "name": "tiny",
            "target": {
                "name": "t",
                "local_path": str(tiny_pair_dir / "target"),
                "order": ["local"],
            },
            "draft": {"name": "d", "local_path": str(tiny_pair_dir / "draft"), "order": ["local"]},
        }
    )
    from omegaconf import OmegaConf

    from runners.paths import REPO_ROOT

    ds = OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf" / "dataset" / "gsm8k.yaml"))
    sample = build(DATASETS, {**ds, "limit": 1}).load()[0]
    ids = pair.tokenizer.apply_chat_template(
        sample.messages, add_generation_prompt=True, tokenize=True
    )
    return pair, sample, [int(i) for i in (ids["input_ids"] if hasattr(ids, "keys") else ids)]


def test_hf_assisted_drafts_exactly_L_and_equals_ar(tiny):
    """transformers reads the assistant's settings from draft.generation_config: pinned there, every round but
    the last few (near the cap) drafts exactly L tokens; greedy outputs of both transformers arms and of our
    AR loop are the same ids; the draft's generation config is restored."""
    import criteria.rules  # noqa: F401
    from criteria.dropout_heads import HeadSpec
    from criteria.registry import CRITERIA
    from runners.backends.hf_loop import HFLoopBackend
    from runners.backends.output import end_of_sequence_ids
    from runners.measure.bench_arms import hf_generate, our_generate

    pair, sample, prompt = tiny
    eos = sorted(end_of_sequence_ids(pair.tokenizer, pair.target.generation_config.eos_token_id))
    before = pair.draft.generation_config.to_dict()
    L, cap = 3, 40
    a = hf_generate(
        pair.target, prompt, eos_ids=eos, pad_id=eos[0], max_new_tokens=cap, draft=pair.draft, L=L
    )
    assert pair.draft.generation_config.to_dict() == before
    rounds = a["rounds"]
    assert rounds >= 1 and L * (rounds - L) <= a["draft_forwards"] <= L * rounds
    assert a["tokens"] == len(a["output_token_ids"]) and 0 < a["decode_s"] <= a["seconds"]
    ar = hf_generate(pair.target, prompt, eos_ids=eos, pad_id=eos[0], max_new_tokens=cap)
    ours = our_generate(
        HFLoopBackend(pair, prefix_caching=False),
        sample,
        L=0,
        rule=(CRITERIA.get("autoregressive")(), HeadSpec()),
        max_new_tokens=cap,
        seed=0,
    )
    assert a["output_token_ids"] == ar["output_token_ids"] == ours["output_token_ids"]
    assert all(math.isfinite(x["seconds"]) and x["seconds"] > 0 for x in (a, ar, ours))


def test_first_mismatch():
    assert first_mismatch([1, 2, 3], [1, 2, 3]) is None
    assert first_mismatch([1, 2, 3], [1, 5, 3]) == (1, 2, 5)
    assert first_mismatch([1, 2], [1, 2, 7]) == (2, -1, 7)


def _arm(ids, seconds, rounds=0, accepted=0, verify_s=0.0, criterion_s=0.0, audit_s=0.0):
    return {
        "output_token_ids": ids,
        "tokens": len(ids),
        "seconds": seconds,
        "decode_tokens": len(ids) - 1,
        "decode_s": seconds / 2,
        "rounds": rounds,
        "accepted": accepted,
        "verify_passes": rounds,
        "verify_s": verify_s,
        "criterion_s": criterion_s,
        "audit_s": audit_s,
    }


def test_summarize_bench_by_hand():
    ids = list(range(10))
    lines = []
    for rep in (0, 1):
        for pid in ("a", "b"):
            lines.append(
                {
                    "kind": "prompt",
                    "prompt_id": pid,
                    "repeat": rep,
                    "prompt_tokens": 100,
                    "model": {"dtype": "float32", "threads": 2},
                    "loadavg_1min": 1.5,
                    "arms": {
                        "ar": _arm(ids, 2.0, rounds=9, verify_s=0.9),
                        "sd": _arm(ids, 1.0, rounds=3, accepted=6, verify_s=0.6, criterion_s=0.03),
                        "sd_dm": _arm(
                            ids[:4] + [99] + ids[5:],
                            0.5,
                            rounds=2,
                            accepted=7,
                            verify_s=0.5,
                            criterion_s=0.1,
                            audit_s=0.02,
                        ),
                    },
                }
            )
    s = summarize_bench(lines, ["ar", "sd", "sd_dm"], L=5, context=64)
    assert s["bench/ar/tok_per_s"] == pytest.approx(5.0) and s[
        "bench/sd/tok_per_s"
    ] == pytest.approx(10.0)
    assert s["bench/sd/x_ar"] == pytest.approx(2.0) and s[
        "bench/sd/x_ar_repeat_std"
    ] == pytest.approx(0.0)
    assert s["bench/sd/x_ar_median"] == pytest.approx(2.0) and s[
        "bench/sd_dm/x_ar_median"
    ] == pytest.approx(4.0)
    assert s["bench/sd/tau"] == pytest.approx(1 + 6 / 3) and s["bench/sd_dm/tau"] == pytest.approx(
        1 + 7 / 2
    )
    assert s["bench/sd/identical_to_ar"] == 4 and s["bench/sd_dm/identical_to_ar"] == 0
    assert s["bench/sd_dm/first_mismatches"][0] == {
        "prompt_id": "a",
        "repeat": 0,
        "position": 4,
        "ar_token": 4,
        "arm_token": 99,
    }
    # in the loop: SD verify 0.2 s/pass vs AR 0.1 s/step; DM (0.25 + 0.05) - SD (0.2 + 0.01) = 0.09 s = 45% of 0.2
    assert s["bench/in_situ/verify_over_decode"] == pytest.approx(2.0)
    assert s["bench/in_situ/dm_overhead_share"] == pytest.approx(0.45)
    # the audit apart: 0.02 s over 2 passes = 0.01 s/pass = 5% of SD's 0.2 s verify pass; in the footer
    assert s["bench/in_situ/dm_audit_share"] == pytest.approx(0.05)
    from analysis.tables.bench import cost_note

    s.update({"model/dtype": "float32", "bench/L": 5, "bench/prompt_tokens_mean": 100.0})
    assert "its exactness audit 5.0% more" in cost_note(s, [])
    # the decision alone: DM 0.05 s of criterion per pass less SD's 0.01 = 0.04 s = 20% of SD's 0.2 s verify pass
    # (the 0.05 s/pass the two arms' forwards differ by is not the decision)
    assert s["bench/in_situ/dm_decision_share"] == pytest.approx(0.2)
    note = cost_note(s, lines)
    assert "20.0% [20.0, 20.0] (in the loop: SD+DM's decision seconds per pass less SD's" in note
    assert "forward's own variation: 45.0%" in note
    old = [
        {
            **ln,
            "arms": {
                a: {k: v for k, v in r.items() if k != "criterion_s"} for a, r in ln["arms"].items()
            },
        }
        for ln in lines
    ]
    assert "/ n/a (in the loop" in cost_note(s, old)  # lines recorded without decision seconds
    assert s["bench/ar/deterministic"] and s["bench/num_prompts"] == 2 and s["bench/repeats"] == 2


def test_decision_share_uses_the_round_meter_where_recorded():
    """With the meter's parts in both arms the bench's decision share is Table 6's: rule seconds per pass less SD's,
    over SD's forward + plain LM head per pass; one line without them and the criterion seconds decide instead."""
    from analysis.tables.bench import cost_note

    ids = list(range(10))
    sd = {**_arm(ids, 1.0, rounds=3, accepted=6, verify_s=0.6, criterion_s=0.09), "plain_s": 0.06}
    dm = {**_arm(ids, 0.5, rounds=2, accepted=7, verify_s=0.5, criterion_s=0.2), "plain_s": 0.04}
    lines = [
        {
            "kind": "prompt",
            "prompt_id": pid,
            "repeat": 0,
            "arms": {"sd": {**sd, "rule_s": 0.01}, "sd_dm": {**dm, "rule_s": 0.1}},
        }
        for pid in ("a", "b")
    ]
    assert uses_meter(lines, "sd_dm", "sd")
    # (0.1 / 2 - 0.01 / 3) / ((0.6 + 0.06) / 3) = 0.04667 / 0.22
    assert decision_share(decision_per_pass(lines, "sd_dm", "sd")) == pytest.approx(
        (0.05 - 0.01 / 3) / 0.22
    )
    s = {"model/dtype": "bfloat16", "bench/L": 5, "bench/num_prompts": 2, "bench/repeats": 1}
    s["bench/prompt_tokens_mean"] = 100.0
    assert "21.2% [21.2, 21.2] (in the loop: SD+DM's seconds after the plain logits" in cost_note(
        s, lines
    )
    lines[1]["arms"]["sd"]["rule_s"] = (
        None  # one arm of one line unmetered: the older measure for all lines
    )
    assert not uses_meter(lines, "sd_dm", "sd")
    # (0.2 / 2 - 0.09 / 3) / (0.6 / 3)
    assert decision_share(decision_per_pass(lines, "sd_dm", "sd")) == pytest.approx(0.35)


@pytest.mark.subprocess
def test_bench_records_resume_and_table(runs_root, main_env, monkeypatch):
    """experiment=bench on the tiny pair (float32, 1 prompt, 2 repeats, 2 latency repeats): one record with 4
    lines, every greedy arm equal to AR; rerun skipped; a cut record resumes; results/bench from the record."""
    args = [
        "experiment=bench",
        "pair.dtype=float32",
        "dataset.limit=1",
        "decoding.max_new_tokens=12",
        "method.timing_repeats=2",
        "method.latency_repeats=2",
        "method.context=16",
    ]
    p = run_main(main_env, *args, multirun=True)
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = list(runs_root.iterdir())
    s = json.loads((rec / "summary.json").read_text())
    assert (
        s["complete"]
        and s["num_samples"] == 4
        and s["bench/num_lines"] == 2
        and s["model/dtype"] == "float32"
    )
    for arm in ("ar", "hf_ar", "sd", "hf_assisted", "sd_dm"):
        assert 0 < s[f"bench/{arm}/tok_per_s"] < 1e6 and math.isfinite(
            s[f"bench/{arm}/decode_tok_per_s"]
        )
    for arm in ("hf_ar", "sd", "hf_assisted"):
        assert s[f"bench/{arm}/identical_to_ar"] == 2, s[f"bench/{arm}/first_mismatches"]
    assert (
        s["bench/latency/verify_over_decode"] > 0
        and s["bench/in_situ/dm_overhead_share"] == s["bench/in_situ/dm_overhead_share"]
    )
    assert "1 runs: 0 done, 1 skipped" in run_main(main_env, *args, multirun=True).stderr

    lines = (rec / "samples.jsonl").read_text().splitlines(keepends=True)
    (rec / "samples.jsonl").write_text(lines[0])
    (rec / "summary.json").unlink()
    resumed = run_main(main_env, *args, multirun=True)
    assert resumed.returncode == 0 and "1 done, 3 to go" in resumed.stdout + resumed.stderr
    assert len((rec / "samples.jsonl").read_text().splitlines()) == 4

    monkeypatch.setenv("DROPMATCH_RESULTS", main_env["DROPMATCH_RESULTS"])
    from analysis.render import render

    art = render("bench", "smoke", echo=False)
    assert list(art.runs["run_id"]) == [rec.name]
    t = pd.read_csv(runs_root.parent / "bench" / "bench.csv")
    assert list(t["arm"]) == ["ar", "hf_ar", "sd", "hf_assisted", "sd_dm"]
    assert pd.api.types.is_float_dtype(t["tok_per_s"]) and (t["tok_per_s"] > 0).all()
    assert t.loc[t["arm"] == "ar", "x_ar"].item() == 1.0
    s = json.loads((rec / "summary.json").read_text())
    for arm in (
        "sd",
        "sd_dm",
        "hf_assisted",
    ):  # the ratios are the summary's; one prompt: a zero-width interval
        x = t[t["arm"] == arm].iloc[0]
        assert x["x_ar"] == pytest.approx(s[f"bench/{arm}/x_ar"]) and x["x_ar_lo"] == pytest.approx(
            x["x_ar"]
        )
    md = (runs_root.parent / "bench" / "bench.md").read_text()
    assert "transformers assisted generation" in md and "verify(L+1)/decode" in md
    # the record names the decision code of every arm that decides in our loop, and the footer prints it
    code = json.loads((rec / "meta.json").read_text())["decision_code"]
    assert (
        "autoregressive@hf" in code["rules"] and len(code["rules"]) == len(set(code["rules"])) >= 2
    )
    assert s["decision_code"] == code["fingerprint"]
    assert f"{'+'.join(code['rules'])} {code['fingerprint'][:12]}" in md
    assert (
        re.search(r"n \(prompts x repeats\) per block: \S+ float32 L=\d+: 1x2", md)
        and "× our AR [95% CI]" in md
    )


@pytest.mark.subprocess
@pytest.mark.parametrize(
    "override, field",
    [
        ("method.arms=[sd,hf_assisted]", "method.arms"),
        ("backend.prefix_caching=true", "prefix_caching"),
        ("decoding.temperature=0.7", "decoding.temperature"),
    ],
)
def test_bench_bad_config_exit_2(main_env, runs_root, override, field):
    p = run_main(main_env, "experiment=bench", override, multirun=True)
    assert p.returncode == 2 and field in p.stderr, p.stderr[-2000:]
    assert not runs_root.exists() or not any(runs_root.iterdir())


@pytest.mark.parametrize("pre", ["lc_", "f32_"])
def test_summarize_bench_engine_arms_against_their_own_ar(pre):
    """llama.cpp's and the float32 arms: token equality against their own engine's AR (not ours), ratios to it,
    in-loop costs."""
    ids, other = list(range(10)), list(range(10, 20))  # the two engines' greedy outputs may differ
    lines = [
        {
            "kind": "prompt",
            "prompt_id": pid,
            "repeat": 0,
            "prompt_tokens": 100,
            "model": {
                "dtype": "float32",
                "threads": 2,
                "isa": ["avx2", "fma"],
                "gguf": {"precision": "gguf:Q4_K_M", "threads": 2},
            },  # noqa: E501
            "arms": {
                "ar": _arm(ids, 4.0, rounds=9, verify_s=0.9),
                f"{pre}ar": _arm(other, 1.0, rounds=9, verify_s=0.18),
                f"{pre}sd": _arm(other, 2.0, rounds=3, accepted=6, verify_s=0.18),
            },
        }
        for pid in ("a", "b")
    ]
    s = summarize_bench(lines, ["ar", f"{pre}ar", f"{pre}sd"], L=5, context=64)
    assert s[f"bench/{pre}ar/x_ar"] == pytest.approx(4.0) and s[
        f"bench/{pre}sd/x_{pre}ar"
    ] == pytest.approx(0.5)
    # the engine's SD equals the engine's AR; the engine's AR is compared with ours (here: the engines differ)
    assert s[f"bench/{pre}sd/identical_to_ar"] == 2 and s[f"bench/{pre}ar/identical_to_ar"] == 0
    assert s[f"bench/{pre}sd/tau"] == pytest.approx(3.0)
    # the engine in the loop: SD verify 0.06 s/pass vs AR 0.02 s/step
    assert s[f"bench/in_situ/{pre}verify_over_decode"] == pytest.approx(3.0)
    assert s["model/isa"] == ["avx2", "fma"] and s["model/gguf_precision"] == "gguf:Q4_K_M"
