"""The note ``reproduce.sh`` prints when an artefact left out runs its own command decoded or reused
(:mod:`runners.sweep.shown`): seen, ``./reproduce.sh table6 ... dataset.limit=20`` printed a table of older runs
with n = 1, exit 0, and nothing said so."""

from __future__ import annotations

import json
import os
import time

from runners.sweep.job_status import STATUS_FILE
from runners.sweep.shown import left_out, main, note, sweep_runs


def _job(results, sweep, num, status, run_id, overrides, mtime=None):
    d = results / "hydra" / "multirun" / sweep / str(num)
    d.mkdir(parents=True)
    f = d / STATUS_FILE
    f.write_text(json.dumps({"status": status, "run_id": run_id, "overrides": overrides}))
    if mtime is not None:
        os.utime(f, (mtime, mtime))


def _manifest(results, artefact, runs):
    (results / artefact).mkdir(parents=True)
    (results / artefact / "manifest.json").write_text(
        json.dumps({"artefact": artefact, "runs": runs})
    )


def test_runs_of_the_command_the_table_left_out_are_named(tmp_path, monkeypatch, capsys):
    since = time.time() - 5
    _job(tmp_path, "s1", 0, "done", "aaa", ["L=5", "dataset.limit=20", "experiment=table6"])
    _job(tmp_path, "s1", 1, "skipped", "bbb", ["L=5", "method=sd", "experiment=table6"])
    _job(tmp_path, "s1", 2, "failed", "ccc", ["L=5", "experiment=table6"])  # not on record
    _job(tmp_path, "s1", 3, "done", "ddd", ["experiment=table7"])  # another artefact's sweep
    _job(
        tmp_path, "s0", 0, "done", "old", ["experiment=table6"], mtime=since - 100
    )  # an earlier command
    made = sweep_runs(tmp_path, since, ["table6"])
    assert made == {
        "aaa": ["L=5", "dataset.limit=20", "experiment=table6"],
        "bbb": ["L=5", "method=sd", "experiment=table6"],
    }
    _manifest(tmp_path, "table6", ["bbb", "old"])
    missing = left_out(made, tmp_path / "table6" / "manifest.json")
    assert missing == {"aaa": made["aaa"]}
    line = note("table6", made, missing)
    assert line.startswith(
        "[reproduce] note: table6 does not show 1 of the 2 runs this command decoded or reused "
        "(e.g. run aaa: L=5 dataset.limit=20); it shows the runs on record its own selection picks"
    )
    for rid in (
        "aaa",
        "bbb",
        "old",
    ):  # an earlier command's run is on record: the table may show it instead
        (tmp_path / "runs" / rid).mkdir(parents=True)
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path))
    assert main(["table6", "--since", str(since), "--sweeps", "table6"]) == 0
    assert capsys.readouterr().err.strip() == line


def test_in_a_new_directory_the_note_names_the_artefact_s_own_rule(tmp_path, monkeypatch, capsys):
    """Seen: AR and SD decoded into an empty results directory; Table 6 showed AR alone (SD only beside
    DropMatch runs at its L) and the note advised a new directory, which it already was."""
    since = time.time() - 5
    _job(tmp_path, "s1", 0, "done", "ar1", ["method=ar", "experiment=table6"])
    _job(tmp_path, "s1", 1, "done", "sd1", ["method=sd", "experiment=table6"])
    for rid in ("ar1", "sd1"):
        (tmp_path / "runs" / rid).mkdir(parents=True)
    _manifest(tmp_path, "table6", ["ar1"])
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path))
    assert main(["table6", "--since", str(since), "--sweeps", "table6"]) == 0
    err = capsys.readouterr().err.strip()
    assert "(e.g. run sd1: method=sd); no other runs are on record here" in err
    assert "DROPMATCH_RESULTS" not in err
    assert err.endswith(
        "Table 6 shows SD only at a draft length L with DropMatch runs (its rows compare SD with SD + DM at each "
        "L): add method=dropmatch to the sweep at that L."
    )


def test_a_measurement_s_source_runs_count_as_shown(tmp_path):
    """Fig. 3 lists its single-path decodes under ``source_runs``: no note for them."""
    since = time.time() - 5
    _job(tmp_path, "s1", 0, "done", "path1", ["experiment=fig3"])
    _job(tmp_path, "s2", 0, "done", "sim1", ["experiment=fig3_measure"])
    made = sweep_runs(tmp_path, since, ["fig3", "fig3_measure"])
    (tmp_path / "fig3").mkdir()
    (tmp_path / "fig3" / "manifest.json").write_text(
        json.dumps({"runs": ["sim1"], "source_runs": ["path1"]})
    )
    assert len(made) == 2 and left_out(made, tmp_path / "fig3" / "manifest.json") == {}


def test_no_note_when_every_run_is_shown_or_there_is_no_manifest(tmp_path):
    since = time.time() - 5
    _job(tmp_path, "s1", 0, "done", "aaa", ["experiment=frontier/fly"])
    made = sweep_runs(tmp_path, since, ["frontier/fly", "frontier/baselines"])
    assert left_out(made, tmp_path / "frontier" / "manifest.json") == {}  # nothing rendered
    _manifest(tmp_path, "frontier", ["aaa"])
    missing = left_out(made, tmp_path / "frontier" / "manifest.json")
    assert missing == {} and note("frontier", made, missing) is None
