"""Tables 5, 7, 10 and the equality check rebuilt from hand-written vLLM run records (no models)."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.helpers.records import item_run, item_sample, write_run

EAGLE = "qwen25coder_1.5b_eagle3_random"
SDPAIR = "qwen25coder_0.5b_1.5b"


def cfg(
    method,
    dataset,
    *,
    L,
    pair=SDPAIR,
    B=1,
    spec="draft_model",
    random_head=False,
    mnt=16,
    backend="vllm",
):
    dm = {"p_drop": 0.3, "K": 5, "path": 0} if method.startswith("dropmatch") else {"unused": True}
    return {
        "pair": {"name": pair, "eagle3_random_head": random_head},
        "dataset": {"name": dataset},
        "method": {"name": method},
        "backend": {"name": backend, "batch_size": B, "spec_method": spec},
        "profile": {"name": "default"},
        "L": L,
        "dropmatch": dm,
        "decoding": {"temperature": 0.0, "seed": 0, "max_new_tokens": mnt},
    }


def summ(n, tps, tau, *, total=None, acc=None):
    return {
        "num_samples": n,
        "num_expected": n,
        "complete": True,
        "quality/accuracy": acc,
        "spec/mean_acceptance_length": tau,
        "speed/tok_per_s": tps,
        "speed/tok_per_s_total": tps if total is None else total,
        "device": "Test CPU",
        "date_utc": "2026-11-30T08:00:00+00:00",
        "git_sha": "abc1234def",
    }


def samples(ids_per_sample, *, tokens=4, wall=1.0, rounds=(2,), L=10, correct=1.0):
    """Records whose outputs start with ``ids`` (then a filler token, as many as the counter identity needs),
    ``tokens`` output tokens in ``wall`` seconds, accepted drafts per round."""
    out = []
    for i, ids in enumerate(ids_per_sample):
        s = item_sample(f"s{i}", list(rounds), L, tokens=tokens, wall_s=wall, correct=correct)
        s["output_token_ids"] = ids + [0] * (len(s["output_token_ids"]) - len(ids))
        out.append(s)
    return out


def vrun(results, run_id, c, recs):
    return item_run(results, run_id, c, recs, device="Test CPU")


def test_table5_ratio_per_batch_size(results):
    from analysis.render import render

    # each prompt: 4 tokens in its batch's wall time; throughput = sum(tokens) / (sum(wall) / B) = 4 B / wall
    for B, sd_wall, dm_wall in ((1, 2.0, 2.0 / 1.2), (2, 2.0, 2.0 / 1.1), (4, 4.0, 4.0 / 1.2)):
        vrun(results, f"sd{B}", cfg("sd", "gsm8k", L=10, B=B), samples([[1, 2]] * 4, wall=sd_wall))
        vrun(
            results,
            f"dm{B}",
            cfg("dropmatch", "gsm8k", L=10, B=B),
            samples([[1]] * 4, wall=dm_wall, rounds=(2, 3)),
        )
    vrun(results, "ar4", cfg("ar", "gsm8k", L=0, B=4), samples([[1, 2]] * 4, rounds=(), L=0))
    art = render("table5", "default")
    (t,) = art.tables
    d = t.data
    assert list(d["batch_size"]) == [1, 2, 4]
    assert list(d["dm_over_sd"]) == pytest.approx([1.2, 1.1, 1.2])
    assert list(d["dm_over_sd_lo"]) == pytest.approx(
        [1.2, 1.1, 1.2]
    )  # same ratio on every prompt: no width
    assert list(d["sd_tok_per_s"]) == pytest.approx([2.0, 4.0, 4.0])
    assert list(d["sd_tau"]) == [3.0] * 3 and list(d["dm_tau"]) == [3.5] * 3
    assert list(t.display["SD"]) == ["1.00×"] * 3
    assert list(t.display["SD+DM"]) == [
        "1.20 [1.20, 1.20]×",
        "1.10 [1.10, 1.10]×",
        "1.20 [1.20, 1.20]×",
    ]
    md = (results / "table5" / "table5.md").read_text()
    assert "4/4 samples identical over 1 SD runs; 2 SD runs without an AR reference run" in md
    assert "ar4" in art.runs["run_id"].tolist()  # the equality reference is listed in the manifest


def test_table7_eagle_rows_quality_and_random_head_note(results):
    from analysis.render import render

    for L in (3, 5):
        for ds in ("eagle_gsm8k", "mt_bench", "alpaca"):
            kw = dict(L=L, pair=EAGLE, spec="eagle3", random_head=True)
            acc = 0.5 if ds == "eagle_gsm8k" else float("nan")
            graded = [acc, acc] if acc != 0.5 else [1.0, 0.0]
            e = samples([[5, 6], [5, 6]], wall=2.0, rounds=(1,), L=L)
            d = samples([[5], [5]], wall=4.0 / 3.0, rounds=(2,), L=L)
            for recs in (e, d):
                for rec, q in zip(recs, graded):
                    rec["quality"]["correct"] = q
            vrun(results, f"e{L}{ds}", cfg("sd", ds, **kw), e)
            vrun(results, f"d{L}{ds}", cfg("dropmatch_naive", ds, **kw), d)
    vrun(
        results,
        "ar",
        cfg("ar", "mt_bench", L=0, pair=EAGLE, spec="eagle3", random_head=True),
        samples([[5, 7], [5, 6]], rounds=(), L=0),
    )
    (tab,) = render("table7", "default").tables
    t = tab.display
    assert list(zip(t["L"], t["Method"])) == [
        (3, "EAGLE3"),
        (3, "EAGLE3+DM"),
        (5, "EAGLE3"),
        (5, "EAGLE3+DM"),
    ]
    assert t.iloc[1]["GSM8K Q"] == "50.0 [0.0, 100.0]" and t.iloc[1]["MT-Bench Q"] == "n.j."
    assert (
        t.iloc[1]["Alpaca speedup"] == "1.50 [1.50, 1.50]×"
        and t.iloc[0]["Alpaca speedup"] == "1.00 [1.00, 1.00]×"
    )
    assert tab.data.iloc[1]["alpaca_speedup"] == pytest.approx(1.5)
    md = (results / "table7" / "table7.md").read_text()
    assert "EAGLE3 head: random init (mechanism check, not a speed claim)" in md
    assert "quality: not judged offline" in md
    assert "DIVERGENCE" in md and "(s0, token 1)" in md  # mt_bench SD [5, 6] vs AR [5, 7]


def test_table10_arms(results):
    from analysis.render import render

    vrun(
        results,
        "e",
        cfg("sd", "komt_bench", L=7, pair=EAGLE, spec="eagle3", random_head=True),
        samples([[1]], wall=2.0, L=7),
    )
    vrun(results, "s", cfg("sd", "komt_bench", L=7), samples([[1]], wall=4.0 / 3.0, L=7))
    vrun(results, "sdm", cfg("dropmatch_naive", "komt_bench", L=7), samples([[1]], wall=1.0, L=7))
    (tab,) = render("table10", "default").tables
    t = tab.display
    assert list(t["Method"]) == ["EAGLE3", "SD", "SD+DM (naive)"]
    assert list(tab.data["speedup_vs_eagle3"]) == pytest.approx([1.0, 1.5, 2.0])
    assert list(t["vs EAGLE3"]) == [
        "1.00 [1.00, 1.00]×",
        "1.50 [1.50, 1.50]×",
        "2.00 [2.00, 2.00]×",
    ]
    md = (results / "table10" / "table10.md").read_text()
    assert "random init" in md and "KoMT-Bench" in md


def test_table7_draft_model_rows_beside_the_eagle_rows(results):
    """The CPU profile's judged rows (draft-model pair, HF loop, batch 10) read SD / SD+DM, each pair's engine and
    batch size and n are in the footer, and a draft-model pair's SD-only group (Table 5's) is no row."""
    from analysis.render import render

    for ds in ("eagle_gsm8k", "mt_bench", "alpaca"):
        kw = dict(L=5, B=10, backend="hf", mnt=512)
        vrun(results, f"s{ds}", cfg("sd", ds, **kw), samples([[5, 6]] * 3, wall=2.0, L=5))
        vrun(results, f"d{ds}", cfg("dropmatch_naive", ds, **kw), samples([[5]] * 3, wall=1.0, L=5))
        kw = dict(L=3, pair=EAGLE, spec="eagle3", random_head=True)
        vrun(results, f"e{ds}", cfg("sd", ds, **kw), samples([[5]], L=3))
    vrun(results, "t5", cfg("sd", "eagle_gsm8k", L=10, B=2), samples([[5]] * 2, L=10))
    (tab,) = render("table7", "default").tables
    t = tab.display
    assert list(zip(t["Pair"], t["L"], t["Method"])) == [
        (SDPAIR, 5, "SD"),
        (SDPAIR, 5, "SD+DM"),
        (EAGLE, 3, "EAGLE3"),
    ]
    assert t.iloc[1]["MT-Bench speedup"] == "2.00 [2.00, 2.00]×"
    md = (results / "table7" / "table7.md").read_text()
    assert f"engine per pair: {SDPAIR}: hf, batch size 10; {EAGLE}: vllm, batch size 1" in md
    assert f"{SDPAIR}: Alpaca 3 (max_new_tokens 512)" in md and f"{EAGLE}: Alpaca 1" in md


def test_table10_speedups_only_on_one_engine(results):
    """An SD row on the HF loop at batch 10 has no speedup vs the vLLM EAGLE3 row (blank), one vs its own SD."""
    from analysis.render import render

    vrun(
        results,
        "e",
        cfg("sd", "komt_bench", L=7, pair=EAGLE, spec="eagle3", random_head=True),
        samples([[1]], wall=2.0, L=7),
    )
    kw = dict(L=7, B=10, backend="hf")
    vrun(results, "s", cfg("sd", "komt_bench", **kw), samples([[1]], wall=2.0, L=7))
    vrun(results, "sdm", cfg("dropmatch_naive", "komt_bench", **kw), samples([[1]], wall=1.0, L=7))
    t = render("table10", "default").tables[0].display
    assert list(t["vs EAGLE3"]) == ["1.00 [1.00, 1.00]×", "", ""]
    assert list(t["vs SD"]) == ["", "1.00 [1.00, 1.00]×", "2.00 [2.00, 2.00]×"]


def test_equality_first_divergence():
    from analysis.equality import compare_outputs, first_divergence

    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    r = compare_outputs({"a": [1, 2], "b": [3]}, {"a": [1, 2], "b": [4], "c": [0]})
    assert r == {"n": 2, "equal": 1, "divergences": [("b", 0)]}


def test_load_runs_has_spec_method(results):
    from analysis.load import load_runs

    write_run(
        results,
        "e",
        cfg("sd", "komt_bench", L=7, pair=EAGLE, spec="eagle3", random_head=True),
        summ(1, 2.0, 1.1),
        samples([[1]]),
    )
    r = load_runs()
    assert (
        isinstance(r, pd.DataFrame)
        and r.iloc[0]["spec_method"] == "eagle3"
        and bool(r.iloc[0]["eagle3_random_head"])
    )


def test_table10_only_at_lengths_with_dropmatch_runs(results):
    """An EAGLE3 SD run at L=5 (Table 7's) beside the L=7 comparison adds no ``table10_L5``: Table 10 compares
    SD + DropMatch with EAGLE3, and at L=5 there is nothing to compare."""
    from analysis.render import render

    vrun(
        results,
        "e7",
        cfg("sd", "komt_bench", L=7, pair=EAGLE, spec="eagle3", random_head=True),
        samples([[1]], wall=2.0, L=7),
    )
    vrun(results, "sdm", cfg("dropmatch_naive", "komt_bench", L=7), samples([[1]], wall=1.0, L=7))
    vrun(
        results,
        "e5",
        cfg("sd", "komt_bench", L=5, pair=EAGLE, spec="eagle3", random_head=True),
        samples([[1]], wall=2.0, L=5),
    )
    art = render("table10", "default")
    assert [t.stem for t in art.tables] == ["table10"]
    assert "e5" not in set(art.runs["run_id"])
    assert not (results / "table10" / "table10_L5.md").exists()
