"""Tables 5, 7, 10 and the equality check rebuilt from hand-written vLLM run records (no models)."""

from __future__ import annotations

import pandas as pd

from analysis_fixtures import write_run

EAGLE = "qwen25coder_1.5b_eagle3_random"
SDPAIR = "qwen25coder_0.5b_1.5b"


def cfg(method, dataset, *, L, pair=SDPAIR, B=1, spec="draft_model", random_head=False, mnt=16):
    dm = {"p_drop": 0.3, "K": 5, "path": 0} if method.startswith("dropmatch") else {"unused": True}
    return {"pair": {"name": pair, "eagle3_random_head": random_head}, "dataset": {"name": dataset},
            "method": {"name": method}, "backend": {"name": "vllm", "batch_size": B, "spec_method": spec},
            "profile": {"name": "default"}, "L": L, "dropmatch": dm,
            "decoding": {"temperature": 0.0, "seed": 0, "max_new_tokens": mnt}}


def summ(n, tps, tau, *, total=None, acc=None):
    return {"num_samples": n, "num_expected": n, "complete": True, "quality/accuracy": acc,
            "spec/mean_acceptance_length": tau, "speed/tok_per_s": tps,
            "speed/tok_per_s_total": tps if total is None else total,
            "device": "Test CPU", "date_utc": "2026-11-30T08:00:00+00:00", "git_sha": "abc1234def"}


def samples(ids_per_sample):
    return [{"sample_id": f"s{i}", "output_token_ids": ids} for i, ids in enumerate(ids_per_sample)]


def test_table5_ratio_per_batch_size(results):
    from analysis.tables import table5

    for B, sd, dm in ((1, 2.0, 2.4), (2, 1.5, 1.65), (4, 1.0, 1.2)):
        write_run(results, f"sd{B}", cfg("sd", "gsm8k", L=10, B=B), summ(4, sd, 3.0, total=sd), samples([[1, 2]] * 4))
        write_run(results, f"dm{B}", cfg("dropmatch", "gsm8k", L=10, B=B), summ(4, dm, 3.5, total=dm), samples([[1]] * 4))
    write_run(results, "ar4", cfg("ar", "gsm8k", L=0, B=4), summ(4, 1.0, 1.0), samples([[1, 2]] * 4))
    t = table5.main(["--profile", "default"])
    assert list(t["Batch size"]) == [1, 2, 4]
    assert list(t["SD"]) == ["1.00×"] * 3
    assert list(t["SD+DM"]) == ["1.20×", "1.10×", "1.20×"]
    assert t.iloc[2]["SD tok/s"] == "4.00"   # B * tok_per_s_total
    md = (results / "table5" / "table5.md").read_text()
    assert "4/4 samples identical over 1 SD runs; 2 SD runs without an AR reference run" in md


def test_table7_eagle_rows_quality_and_random_head_note(results):
    from analysis.tables import table7

    for L in (3, 5):
        for ds in ("eagle_gsm8k", "mt_bench", "alpaca"):
            kw = dict(L=L, pair=EAGLE, spec="eagle3", random_head=True)
            acc = 0.5 if ds == "eagle_gsm8k" else float("nan")
            write_run(results, f"e{L}{ds}", cfg("sd", ds, **kw), summ(2, 2.0, 1.1, acc=acc), samples([[5, 6]]))
            write_run(results, f"d{L}{ds}", cfg("dropmatch_naive", ds, **kw), summ(2, 3.0, 1.6, acc=acc), samples([[5]]))
    write_run(results, "ar", cfg("ar", "mt_bench", L=0, pair=EAGLE, spec="eagle3", random_head=True),
              summ(2, 1.0, 1.0), samples([[5, 7]]))
    t = table7.main(["--profile", "default"])
    assert list(zip(t["L"], t["Method"])) == [(3, "EAGLE3"), (3, "EAGLE3+DM"), (5, "EAGLE3"), (5, "EAGLE3+DM")]
    assert t.iloc[1]["GSM8K Q"] == "50.0" and t.iloc[1]["MT-Bench Q"] == "n.j."
    assert t.iloc[1]["Alpaca speedup"] == "1.50×" and t.iloc[0]["Alpaca speedup"] == "1.00×"
    md = (results / "table7" / "table7.md").read_text()
    assert "EAGLE3 head: random init (mechanism check, not a speed claim)" in md
    assert "quality: not judged offline" in md
    assert "DIVERGENCE" in md and "(s0, token 1)" in md   # mt_bench SD [5, 6] vs AR [5, 7]


def test_table10_arms(results):
    from analysis.tables import table10

    write_run(results, "e", cfg("sd", "komt_bench", L=7, pair=EAGLE, spec="eagle3", random_head=True),
              summ(1, 2.0, 1.1), samples([[1]]))
    write_run(results, "s", cfg("sd", "komt_bench", L=7), summ(1, 3.0, 2.0), samples([[1]]))
    write_run(results, "sdm", cfg("dropmatch_naive", "komt_bench", L=7), summ(1, 4.0, 2.5), samples([[1]]))
    t = table10.main(["--profile", "default"])
    assert list(t["Method"]) == ["EAGLE3", "SD", "SD+DM (naive)"]
    assert list(t["vs EAGLE3"]) == ["1.00×", "1.50×", "2.00×"]
    md = (results / "table10" / "table10.md").read_text()
    assert "random init" in md and "KoMT-Bench" in md


def test_equality_first_divergence():
    from analysis.equality import compare_outputs, first_divergence

    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    r = compare_outputs({"a": [1, 2], "b": [3]}, {"a": [1, 2], "b": [4], "c": [0]})
    assert r == {"n": 2, "equal": 1, "divergences": [("b", 0)]}


def test_load_runs_has_spec_method(results):
    from analysis.load import load_runs

    write_run(results, "e", cfg("sd", "komt_bench", L=7, pair=EAGLE, spec="eagle3", random_head=True),
              summ(1, 2.0, 1.1), samples([[1]]))
    r = load_runs()
    assert isinstance(r, pd.DataFrame) and r.iloc[0]["spec_method"] == "eagle3" and bool(r.iloc[0]["eagle3_random_head"])
