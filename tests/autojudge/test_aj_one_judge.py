"""Auto-Judge artefacts use one judge: runs of an earlier judge left in runs/ are not mixed in."""

from __future__ import annotations

import pandas as pd

from analysis.autojudge import one_judge


def frame(rows):
    return pd.DataFrame(rows, columns=["run_id", "method", "judge_key", "run_dir"])


def test_the_judge_with_most_runs_is_kept_with_every_sd_run(tmp_path):
    runs = frame(
        [
            ("s", "sd", None, str(tmp_path / "runs" / "s")),
            ("a1", "autojudge", "new", str(tmp_path / "runs" / "a1")),
            ("a2", "autojudge_dropmatch", "new", str(tmp_path / "runs" / "a2")),
            ("old", "autojudge", "old", str(tmp_path / "runs" / "old")),
        ]
    )
    assert list(one_judge(runs)["run_id"]) == ["s", "a1", "a2"]


def test_on_a_tie_the_judge_with_a_record_wins(tmp_path, monkeypatch):
    import json

    import analysis.autojudge as aj

    monkeypatch.setattr(aj, "results_dir", lambda: tmp_path)
    d = tmp_path / "autojudge" / "judges" / "kept"
    d.mkdir(parents=True)
    (d / "judge.json").write_text(json.dumps({"date_utc": "2026-12-01T14:00:00+00:00"}))
    runs = frame(
        [
            ("x", "autojudge", "gone", str(tmp_path / "runs" / "x")),
            ("y", "autojudge", "kept", str(tmp_path / "runs" / "y")),
        ]
    )
    assert list(one_judge(runs)["run_id"]) == ["y"]


def test_one_judge_is_left_alone(tmp_path):
    runs = frame([("s", "sd", None, "r/s"), ("a", "autojudge", "k", "r/a")])
    assert one_judge(runs).equals(runs)
