"""Ctrl-C during a run of ``python -m runners.main``: one line on stderr and exit status 130, no traceback."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf


def test_ctrl_c_in_a_run_prints_one_line_and_exits_130(monkeypatch, capsys):
    """Before: the KeyboardInterrupt's traceback. The line says what is kept: a run's record holds every sample
    appended before the interrupt, and a rerun resumes at the first sample without one (test_sw_resume.py)."""
    import runners.main as m

    def interrupted_run(cfg, **_):
        raise KeyboardInterrupt

    monkeypatch.setattr(m, "job_of", lambda cfg: m.Job(lambda *a, **k: {}, interrupted_run))
    with pytest.raises(SystemExit) as e:
        m.main(OmegaConf.create({}))  # Hydra passes a given config straight to the task function
    assert e.value.code == 130
    out, err = capsys.readouterr()
    assert err == (
        "interrupted; finished runs and the samples already recorded are kept, rerun the same command to "
        "resume\n"
    )
    assert out == ""
