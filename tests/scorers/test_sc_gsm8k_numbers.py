"""GSM8K answers written as people write numbers: the numerically normalised match (math-verify) is primary,
lm-eval's string ``exact_match`` stays in every record as the comparable number, and Table 6 shows the primary
with lm-eval's number beside it in the CSV."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import runners.scorers  # noqa: F401  (registration)
from runners.datasets.base import Sample
from runners.registry import SCORERS, build

# (output, reference): each a correct answer that lm-eval's exact_match string comparison scores 0
PEOPLE_WRITE = [
    ("The final answer is $18.00", "18"),
    ("The final answer is 18...", "18"),
    ("So she makes $18 a day. The final answer is $18.00.", "18"),
    ("The final answer is 1,200.00", "1200"),
    ("The final answer is 18.0", "18"),
]
# correct answers that lm-eval already scores 1: must stay 1
ALREADY_RIGHT = [
    ("The final answer is 18.", "18"),
    ("The final answer is 1,200", "1200"),
    ("The final answer is $1,200", "1200"),
    ("The final answer is 18", "18"),
    ("The final answer is -3", "-3"),
]
WRONG = [
    ("The final answer is 17", "18"),
    ("The final answer is $17.00", "18"),
    ("The final answer is 1,201.", "1200"),
    ("The final answer is 18.5", "18"),
    ("The final answer is 120", "1200"),
]


def gsm8k_sample(gold: str, i: int = 0) -> Sample:
    """A GSM8K item as the dataset builds it (``reference`` is lm-eval's doc)."""
    return Sample(
        f"gsm8k/test/{i}",
        [{"role": "user", "content": "q"}],
        {"question": f"question {i}", "answer": f"Reasoning.\n#### {gold}"},
        {"lm_eval_task": "gsm8k_cot_llama", "target": gold},
    )


def score(key: str, cases: list[tuple[str, str]]) -> list[dict[str, Any]]:
    sc = build(SCORERS, {"name": key})
    return sc.score([gsm8k_sample(g, i) for i, (_, g) in enumerate(cases)], [o for o, _ in cases])


class TestGsm8kCotLlama:
    def test_numbers_as_people_write_them_score_one(self) -> None:
        res = score("lm_eval_gsm8k_cot_llama", PEOPLE_WRITE)
        assert [r["correct"] for r in res] == [1] * len(PEOPLE_WRITE)
        assert [r["math_verify,strict-match"] for r in res] == [1.0] * len(PEOPLE_WRITE)
        # lm-eval's own number is kept as it scores (string comparison: 0 for these)
        assert [r["exact_match,strict-match"] for r in res] == [0.0] * len(PEOPLE_WRITE)
        assert [r["filtered,strict-match"] for r in res][:2] == ["$18.00", "18..."]

    def test_right_stays_right_and_wrong_stays_wrong(self) -> None:
        right = score("lm_eval_gsm8k_cot_llama", ALREADY_RIGHT)
        assert [r["correct"] for r in right] == [1] * len(ALREADY_RIGHT)
        assert [r["exact_match,strict-match"] for r in right] == [1.0] * len(ALREADY_RIGHT)
        wrong = score("lm_eval_gsm8k_cot_llama", WRONG)
        assert [r["correct"] for r in wrong] == [0] * len(WRONG)
        assert all(r["math_verify,none"] == 0.0 for r in wrong)

    def test_the_format_the_prompt_asks_for_is_still_required(self) -> None:
        """The primary keeps strict-match's extraction: no "The final answer is" -> 0 (math_verify,none: 1)."""
        (r,) = score("lm_eval_gsm8k_cot_llama", [("I think it is $18.00", "18")])
        assert r["correct"] == 0 and r["filtered,strict-match"] == "[invalid]"
        assert r["math_verify,none"] == 1.0

    def test_aggregate_names_primary_and_comparable(self) -> None:
        cases = PEOPLE_WRITE[:2] + ALREADY_RIGHT[:1] + WRONG[:1]
        sc = build(SCORERS, {"name": "lm_eval_gsm8k_cot_llama"})
        per = sc.score(
            [gsm8k_sample(g, i) for i, (_, g) in enumerate(cases)], [o for o, _ in cases]
        )
        agg = sc.aggregate(per)
        assert agg["metric"] == "math_verify,strict-match"
        assert agg["comparable_metric"] == "exact_match,strict-match"
        assert agg["accuracy"] == agg["math_verify,strict-match"] == pytest.approx(0.75)
        assert agg["exact_match,strict-match"] == pytest.approx(0.25)
        assert agg["math_verify_stderr,strict-match"] == pytest.approx(agg["accuracy_stderr"])

    def test_a_pending_alarm_survives_scoring(self) -> None:
        """math-verify's time limit uses SIGALRM; a timer the caller set (pytest-timeout, a job limit) is
        re-armed afterwards instead of being cancelled."""
        fired: list[int] = []
        old = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
        try:
            signal.setitimer(signal.ITIMER_REAL, 3.0)
            score("lm_eval_gsm8k_cot_llama", PEOPLE_WRITE[:1])
            assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 3.0
            deadline = time.monotonic() + 5
            while not fired and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fired == [1]
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


class TestEagleGsm8k:
    def test_punctuation_after_the_answer_is_not_the_answer(self) -> None:
        """lm-eval's flexible-extract takes the last run of ``[$0-9.,]{2,}``: "..." or ".," after the answer."""
        cases = [
            ("So Allen will be 109 years old. Hope this helps...", "109"),
            ("He pays 1,200 dollars in total, i.e., a lot", "1200"),
            ("She earns $18.00 per day.", "18"),
        ]
        res = score("eagle_gsm8k_exact_match", cases)
        assert [r["filtered,flexible-extract"] for r in res] == ["...", ".,", "$18.00"]
        assert [r["exact_match,flexible-extract"] for r in res] == [0.0, 0.0, 0.0]
        assert [r["correct"] for r in res] == [1, 1, 1]
        wrong = score("eagle_gsm8k_exact_match", [("So Allen will be 108 years old...", "109")])
        assert wrong[0]["correct"] == 0

    def test_aggregate_names_primary_and_comparable(self) -> None:
        sc = build(SCORERS, {"name": "eagle_gsm8k_exact_match"})
        agg = sc.aggregate(sc.score([gsm8k_sample("18")], ["It is $18.00."]))
        assert agg["metric"] == "math_verify,none" and agg["accuracy"] == 1.0
        assert agg["comparable_metric"] == "exact_match,flexible-extract"
        assert agg["exact_match,flexible-extract"] == 0.0


def _record(root: Path, run_id: str, method: str, L: int, per: list[dict], agg: dict) -> None:
    """A finished run record of ``method`` on gsm8k with the scorer's per-item and aggregate quality."""
    from runners.records.counters import SpecDecodeCounters

    d = root / "runs" / run_id
    d.mkdir(parents=True)
    cfg = {
        "pair": {"name": "tiny", "target": {"name": "T"}, "draft": {"name": "D"}},
        "dataset": {"name": "gsm8k"},
        "method": {"name": method},
        "backend": {"name": "hf"},
        "profile": {"name": "default"},
        "L": L,
        "dropmatch": {"p_drop": 0.3, "K": 5, "path": 0} if method == "dropmatch" else {},
        "trace": False,
        "decoding": {"temperature": 0.0, "seed": 0, "max_new_tokens": 64},
    }
    samples = []
    for i, q in enumerate(per):
        c = SpecDecodeCounters(num_speculative_tokens=L)
        if L:
            c.observe_draft(L, 2)
        samples.append(
            {
                "sample_id": f"gsm8k/test/{i}",
                "spec": c.to_dict(),
                "speed": {"num_output_tokens": 8, "wall_s": 1.0 + 0.1 * i, "prefill_s": 0.0},
                "quality": q,
            }
        )
    summary = {
        "run_id": run_id,
        "num_samples": len(per),
        "num_expected": len(per),
        "complete": True,
        "device": "Test CPU",
        "date_utc": "2026-11-30T08:00:00+00:00",
        "git_sha": "abc1234def",
        **{f"quality/{k}": v for k, v in agg.items()},
    }
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


def test_table6_accuracy_is_the_primary_and_the_csv_keeps_strict_match(tmp_path: Path) -> None:
    """Table 6's accuracy is the scorer's primary (math_verify,strict-match); its CSV carries lm-eval's
    strict-match as comparable_pct; the footer says which is which."""
    from analysis.render import render

    cases = PEOPLE_WRITE[:2] + ALREADY_RIGHT[:1] + WRONG[:1]  # primary 3/4, strict-match 1/4
    sc = build(SCORERS, {"name": "lm_eval_gsm8k_cot_llama"})
    per = sc.score([gsm8k_sample(g, i) for i, (_, g) in enumerate(cases)], [o for o, _ in cases])
    agg = sc.aggregate(per)
    for run_id, method, L in (("ar0", "ar", 0), ("sd5", "sd", 5), ("dm5", "dropmatch", 5)):
        _record(tmp_path, run_id, method, L, per, agg)
    art = render("table6", "default", runs_root=tmp_path / "runs", out_root=tmp_path, echo=False)
    table = art.tables[0]
    data = table.data
    assert set(data["benchmark"]) == {"gsm8k"} and len(data) == 3
    assert list(data["accuracy_pct"]) == pytest.approx([75.0] * 3)
    assert list(data["comparable_pct"]) == pytest.approx([25.0] * 3)
    assert set(data["comparable_metric"]) == {"exact_match,strict-match"}
    assert set(table.display["GSM8K Acc"].str.split().str[0]) == {"75.0"}
    footer = "\n".join(table.footer)
    assert "math_verify,strict-match is primary, exact_match,strict-match comparable" in footer
    csv = (tmp_path / "table6" / "table6.csv").read_text()
    assert "comparable_pct" in csv.splitlines()[0]
