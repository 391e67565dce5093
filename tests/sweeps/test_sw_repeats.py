"""Throughput repeats (Spec-Bench style): ``repeats=N`` re-times every sample N times, checks the output did not
change, and the summary reports tok/s as mean +- std over the repeats (tiny pair; fast)."""

from __future__ import annotations

import json
import statistics

import pytest

from tests.helpers.cli import raw_sample_ids, run_dirs, run_main


@pytest.mark.subprocess
def test_repeats_retime_each_sample_and_report_std(main_env):
    p = run_main(
        main_env, "method=sd", "L=3", "dataset.limit=2", "decoding.max_new_tokens=8", "repeats=3"
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (run_dir,) = run_dirs(main_env["DROPMATCH_RESULTS"])
    assert sorted(raw_sample_ids(run_dir)) == ["gsm8k/test/0", "gsm8k/test/1"]
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for r in rows:
        reps = r["speed"]["wall_s_repeats"]
        assert len(reps) == 3 and all(w > 0 for w in reps) and reps[0] == r["speed"]["wall_s"]
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["speed/repeats"] == 3
    per_rep = [
        sum(r["speed"]["num_output_tokens"] / r["speed"]["wall_s_repeats"][j] for r in rows)
        / len(rows)
        for j in range(3)
    ]
    assert abs(s["speed/tok_per_s"] - sum(per_rep) / 3) < 1e-9
    # the spread over the repeats of the run's rate (three timings never coincide to the last bit)
    assert s["speed/tok_per_s_repeat_std"] == pytest.approx(statistics.stdev(per_rep), rel=1e-12)
    assert s["speed/tok_per_s_repeat_std"] > 0
