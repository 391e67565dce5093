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


def test_the_newest_judge_wins_over_one_with_more_runs(tmp_path, monkeypatch):
    """A judge rebuilt on more data whose runs cover part of an artefact so far: its runs are shown, not the
    older judge's more numerous ones."""
    import json

    import analysis.autojudge as aj

    monkeypatch.setattr(aj, "results_dir", lambda: tmp_path)
    for key, date in (("old", "2026-12-01T14:00:00+00:00"), ("new", "2026-12-02T15:00:00+00:00")):
        d = tmp_path / "autojudge" / "judges" / key
        d.mkdir(parents=True)
        (d / "judge.json").write_text(json.dumps({"date_utc": date}))
    runs = frame(
        [("s", "sd", None, "r/s"), ("n1", "autojudge", "new", "r/n1")]
        + [(f"o{i}", "autojudge", "old", f"r/o{i}") for i in range(3)]
    )
    assert list(one_judge(runs)["run_id"]) == ["s", "n1"]
