"""The sweep's final line after Ctrl-C: a job interrupted after its run completed (SystemExit 130 skips Hydra's
``on_job_end``, where the end status used to be the only status written) counts as done, not unreported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf


class _Record:
    def __init__(self, d: Path) -> None:
        self.run_id, self.dir = d.name, d

    def existing_summary(self):
        try:
            s = json.loads((self.dir / "summary.json").read_text())
        except OSError:
            return None
        return s if s.get("complete") else None


def _job_config(sweep: Path, num: int):
    return OmegaConf.create(
        {
            "hydra": {
                "mode": "RunMode.MULTIRUN",
                "runtime": {"output_dir": str(sweep / str(num))},
                "job": {"num": num},
                "overrides": {"task": [f"seed={num}"]},
            }
        }
    )


def _complete(record_dir: Path) -> None:
    record_dir.mkdir(parents=True, exist_ok=True)
    (record_dir / "summary.json").write_text(json.dumps({"complete": True}))


@pytest.fixture
def summary_line(monkeypatch, tmp_path, capsys):
    """``(start(num, record_dir, finished_before), end(num), report() -> the final line)`` of one sweep."""
    import runners.sweep.callbacks as cb

    sweep = tmp_path / "sweep"
    s = cb.SweepSummary()
    s.sweep_dir, s.total, s.t0 = str(sweep), None, 0.0

    def start(num: int, record_dir: Path, finished_before: bool = False) -> None:
        monkeypatch.setattr(cb, "_finished_run", lambda cfg: (_Record(record_dir), finished_before))
        s.on_job_start(_job_config(sweep, num))

    def end(num: int) -> None:
        from hydra.core.utils import JobReturn, JobStatus

        ret = JobReturn()
        ret.status, ret.return_value = JobStatus.COMPLETED, 1.0
        s.on_job_end(_job_config(sweep, num), ret)

    def report() -> str:
        capsys.readouterr()
        s._reported = False
        s._report("stopped")
        err = capsys.readouterr().err
        return next(line for line in err.splitlines() if "runs:" in line)

    return start, end, report


def test_run_completed_before_ctrl_c_counts_as_done(summary_line, tmp_path):
    start, end, report = summary_line
    runs = tmp_path / "runs"
    start(0, runs / "aaa")  # job 0 starts ...
    _complete(runs / "aaa")  # ... its record completes, then Ctrl-C: SystemExit(130), no on_job_end
    assert "1 runs: 1 done, 0 skipped, 0 concurrent, 0 failed, 0 unreported" in report()


def test_started_job_counts_by_its_record(summary_line, tmp_path):
    """Interrupted mid-run (record incomplete): unreported; complete before it started: skipped; a job that
    ended normally keeps its end status."""
    start, end, report = summary_line
    runs = tmp_path / "runs"
    start(0, runs / "a")
    (runs / "a").mkdir(parents=True)  # samples only, no complete summary
    _complete(runs / "b")
    start(1, runs / "b", finished_before=True)
    start(2, runs / "c")
    _complete(runs / "c")
    end(2)
    line = report()
    assert "3 runs: 1 done, 1 skipped, 0 concurrent, 0 failed, 1 unreported" in line, line
    status = json.loads((tmp_path / "sweep" / "2" / ".dropmatch_status.json").read_text())
    assert status["status"] == "done" and status["run_id"] == "c"
    assert sorted(p.name for p in (tmp_path / "sweep" / "0").iterdir()) == [
        ".dropmatch_status.json"
    ]  # no temporary file left behind


def test_unreadable_status_is_unreported(tmp_path):
    from runners.sweep.callbacks import read_statuses

    (tmp_path / "0" / ".hydra").mkdir(parents=True)  # a job dir whose status was never written
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / ".dropmatch_status.json").write_text('{"status": "started"}')
    assert read_statuses(tmp_path)["unreported"] == 2


def test_refused_job_is_counted_and_not_sent_to_a_rerun(
    summary_line, tmp_path, capsys, monkeypatch
):
    """A job that refuses its config once it runs (``runners.main`` calls ``write_refused``) replaces its
    ``started`` status with ``refused`` and the error; the sweep's lines count it and say the same command would
    refuse again, without the advice to rerun it."""
    from hydra.core.hydra_config import HydraConfig

    import runners.sweep.callbacks as cb
    from runners.sweep.job_status import write_refused

    start, end, report = summary_line
    start(0, tmp_path / "runs" / "a")
    cfg = _job_config(tmp_path / "sweep", 0)
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: cfg.hydra))
    write_refused("method.batch_sizes holds 8 but dataset gsm8k has 4 prompts")
    status = json.loads((tmp_path / "sweep" / "0" / ".dropmatch_status.json").read_text())
    assert status["status"] == "refused" and "has 4 prompts" in status["error"]
    assert status["run_id"] == "a"  # the started entry's fields are kept
    assert "1 runs: 0 done, 0 skipped, 0 concurrent, 0 failed, 0 unreported, 1 refused" in report()
    s = cb.SweepSummary()
    s.sweep_dir, s.total, s.t0 = str(tmp_path / "sweep"), None, 0.0
    capsys.readouterr()
    s._report("stopped")
    err = capsys.readouterr().err
    assert "refused their config" in err and "rerun the same command" not in err


def test_write_refused_outside_a_multirun_writes_nothing(tmp_path, monkeypatch):
    from hydra.core.hydra_config import HydraConfig

    from runners.sweep.job_status import write_refused

    single = OmegaConf.create({"mode": "RunMode.RUN", "runtime": {"output_dir": str(tmp_path)}})
    monkeypatch.setattr(HydraConfig, "get", staticmethod(lambda: single))
    write_refused("anything")
    assert list(tmp_path.iterdir()) == []
