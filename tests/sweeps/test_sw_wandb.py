"""W&B offline runs hold what ``runners/loggers/wandb_logger.py`` promises, read back with wandb's own reader.

The reader is ``wandb leet inspect --json <offline run dir>`` (it decodes the ``run-<id>.wandb`` log).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.cli import run_dirs, run_main

wandb = pytest.importorskip("wandb")

HISTORY_KEYS = {
    "sample/index",
    "sample/tau",
    "sample/acceptance_rate",
    "sample/num_output_tokens",
    "sample/tok_per_s",
    "sample/wall_s",
    "sample/num_drafts",
    "sample/num_accepted_tokens",
    "run/num_samples",
    "run/tau",
    "run/tok_per_s",
}
SUMMARY_KEYS = {
    "spec/mean_acceptance_length",
    "spec/acceptance_rate",
    "speed/tok_per_s",
    "quality/accuracy",
    "complete",
    "num_samples",
    "run_id",
    "spec/counters/num_drafts",
}


def read_offline_run(run_dir: Path) -> dict:
    """``{"run": run record, "config": merged config, "summary": merged summary, "history": [rows]}``."""
    exe = Path(sys.executable).with_name("wandb")
    out = subprocess.run(
        [str(exe), "leet", "inspect", "--json", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    res: dict = {"run": None, "config": {}, "summary": {}, "history": [], "artifacts": []}
    for line in out.splitlines():
        rec = json.loads(line)
        kind = rec.get("type")
        if kind == "run":
            res["run"] = rec["run"]
            res["config"].update(rec["run"].get("config", {}).get("update", {}))
        elif kind == "config":
            res["config"].update(rec["config"].get("update", {}))
        elif kind == "summary":
            res["summary"].update(rec["summary"].get("update", {}))
        elif kind == "history":
            res["history"].append(rec["history"]["item"])
        elif kind == "artifact":
            res["artifacts"].append(rec["artifact"])
    return res


def offline_runs(results: Path) -> list[Path]:
    return sorted((results / "wandb").glob("offline-run-*"))


@pytest.mark.subprocess
@pytest.mark.slow
def test_offline_run_holds_config_history_summary_and_curve(main_env):
    results = Path(main_env["DROPMATCH_RESULTS"])
    p = run_main(
        main_env,
        "method=dropmatch",
        "L=3",
        "dataset.limit=2",
        "artefact=wandb_check",
        "logger=wandb",
        "logger.mode=offline",
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (record,) = run_dirs(results)
    summary = json.loads((record / "summary.json").read_text())
    (wb_dir,) = offline_runs(results)
    got = read_offline_run(wb_dir)

    assert (
        got["run"]["run_id"] == record.name
    )  # W&B id = run id (a resumed record continues its W&B run)
    assert got["run"]["run_group"] == "wandb_check"  # the artefact
    cfg = got["config"]
    assert cfg["run_id"] == record.name and cfg["L"] == 3 and cfg["method"]["name"] == "dropmatch"
    assert cfg["dropmatch"] == json.loads((record / "config.json").read_text())["dropmatch"]
    assert (cfg["dropmatch"]["K"], cfg["dropmatch"]["p_drop"]) == (5, 0.3)
    assert cfg["pair"]["name"] == "tiny" and cfg["dataset"]["limit"] == 2

    rows = [r for r in got["history"] if "sample/index" in r]
    assert [r["sample/index"] for r in rows] == [1, 2]
    assert HISTORY_KEYS <= set(rows[0])
    assert SUMMARY_KEYS <= set(got["summary"])
    assert got["summary"]["spec/mean_acceptance_length"] == pytest.approx(
        summary["spec/mean_acceptance_length"]
    )
    assert rows[-1]["run/tau"] == pytest.approx(summary["spec/mean_acceptance_length"])

    (curve,) = [r for r in got["history"] if "spec/per_position_rate_table.path" in r]
    assert "_wandb.visualize.spec/per_position_rate" in got["config"]  # the line plot panel
    assert curve["spec/per_position_rate_table._type"] == "table-file"
    table_file = wb_dir / "files" / curve["spec/per_position_rate_table.path"]
    table = json.loads(table_file.read_text())
    assert table["columns"] == ["position", "per_position_rate"]
    assert [r[1] for r in table["data"]] == pytest.approx(summary["spec/per_position_rate"])
    assert len(table["data"]) == 3


@pytest.mark.subprocess
@pytest.mark.slow
def test_runs_of_one_sweep_share_a_group(main_env):
    results = Path(main_env["DROPMATCH_RESULTS"])
    p = run_main(
        main_env,
        "method=sd,dropmatch",
        "L=2",
        "logger=wandb",
        "logger.mode=offline",
        multirun=True,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    groups = {read_offline_run(d)["run"]["run_group"] for d in offline_runs(results)}
    (sweep_dir,) = (results / "hydra" / "multirun").iterdir()
    assert groups == {f"sweep-{sweep_dir.name}"}
    assert len(offline_runs(results)) == 2


@pytest.mark.subprocess
def test_log_artefact_offline(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from analysis.wandb_artefact import log_artefact

    monkeypatch.delenv("DROPMATCH_WANDB", raising=False)
    df = pd.DataFrame({"Method": ["SD", "SD+DM"], "tau": [2.1, 2.9]})
    assert log_artefact("table6", df) is None  # no logger configured: a no-op

    fig_path = tmp_path / "fig3.png"
    plt.plot([1, 2, 3], [0.9, 0.7, 0.5])
    plt.savefig(fig_path)
    plt.close("all")
    monkeypatch.setenv("DROPMATCH_WANDB", "offline")
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path))
    run_dir = log_artefact("table6", df, [fig_path])
    got = read_offline_run(Path(run_dir))
    assert got["run"]["run_group"] == "table6" and got["run"]["job_type"] == "analysis"
    (row,) = [r for r in got["history"] if "table._type" in r]
    assert row["table._type"] == "table-file" and row["table.nrows"] == 2
    assert row["figure/fig3._type"] == "image-file"
    (art,) = [a for a in got["artifacts"] if a["name"] == "table6"]
    assert art["type"] == "artefact"
    assert {c["path"] for c in art["manifest"]["contents"]} == {"table.csv", "fig3.png"}


@pytest.mark.subprocess
def test_offline_resume_leaves_one_complete_history(tmp_path, monkeypatch):
    """A run killed after 2 samples and resumed: W&B offline cannot resume, so the resumed session writes a second
    offline directory. Before: it held only sample 3 (and syncing it replaced the first directory's history).
    Now the newest directory holds samples 1-3 at steps 1-3 with whole-run totals."""
    import time

    from runners.loggers.wandb_logger import WandbLogger
    from runners.records.record import RunRecord

    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path))
    cfg = {"method": {"name": "sd"}, "dataset": {"name": "gsm8k"}, "L": 2, "artefact": None}
    rec = RunRecord(tmp_path / "runs", cfg)

    def sample(i: int) -> dict:
        return {
            "sample_id": f"s{i}",
            "spec": {
                "num_speculative_tokens": 2,
                "num_drafts": 2,
                "num_accepted_tokens": 1 + i,
                "num_draft_tokens": 4,
                "num_accepted_tokens_per_pos": [2, i - 1] if i else [1, 0],
            },
            "speed": {"num_output_tokens": 6, "wall_s": 1.0},
            "quality": {"exact_match": float(i % 2)},
        }

    with rec:  # first session: two samples, then the process is killed (the logger never finishes)
        rec.open({})
        first = WandbLogger({"mode": "offline"}, rec.run_id, cfg)
        for i in range(2):
            rec.append(sample(i))
            first.log_sample(sample(i))
        first.finish()
    time.sleep(1.1)  # offline dirs are named by the second they start
    with RunRecord(tmp_path / "runs", cfg) as again:  # the resumed session
        again.open({})
        logger = WandbLogger({"mode": "offline"}, again.run_id, cfg)
        again.append(sample(2))
        logger.log_sample(sample(2))
        logger.finish()
    dirs = offline_runs(tmp_path)
    assert len(dirs) == 2 and all(d.name.endswith(rec.run_id) for d in dirs)
    rows = [r for r in read_offline_run(dirs[-1])["history"] if "sample/index" in r]
    assert [(r["_step"], r["sample/index"], r["run/num_samples"]) for r in rows] == [
        (1, 1, 1),
        (2, 2, 2),
        (3, 3, 3),
    ]
    assert [r["sample/num_accepted_tokens"] for r in rows] == [1, 2, 3]
    assert [r["sample/quality/exact_match"] for r in rows] == [0.0, 1.0, 0.0]
    assert rows[-1]["run/tau"] == pytest.approx(1 + 6 / 6)  # (1 + 2 + 3) accepted over 3 x 2 rounds
    assert [
        r["sample/index"] for r in read_offline_run(dirs[0])["history"] if "sample/index" in r
    ] == [1, 2]


@pytest.mark.subprocess
def test_online_without_a_key_is_one_clear_error_and_the_run_resumes(main_env, tmp_path):
    """``logger=wandb`` online with no API key anywhere wandb looks (a fresh HOME, no WANDB_API_KEY): wandb's own
    verdict in one line naming the ways out, exit 2, no traceback; the same run then finishes with logger=none."""
    env = {k: v for k, v in main_env.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path / "home"), WANDB_CONFIG_DIR=str(tmp_path / "home" / "wandb"))
    args = ("method=sd", "L=2", "dataset.limit=1", "artefact=wandb_check")
    p = run_main(env, *args, "logger=wandb", "logger.mode=online")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "logger=wandb (logger.mode=online) could not start: No API key configured" in p.stderr
    assert "logger.mode=offline" in p.stderr and "logger=none" in p.stderr
    (record,) = run_dirs(Path(env["DROPMATCH_RESULTS"]))
    assert not (record / "summary.json").exists()
    p = run_main(env, *args, "logger=none")
    assert p.returncode == 0, p.stdout + p.stderr
    assert run_dirs(Path(env["DROPMATCH_RESULTS"])) == [record]
    assert json.loads((record / "summary.json").read_text())["complete"] is True
