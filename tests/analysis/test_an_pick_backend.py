"""Which engine's runs a table shows when the profile's backend is ``auto`` (chosen per machine)."""

from __future__ import annotations

import pandas as pd

from analysis.artefact import Profile, pick_backend


def _runs(rows):
    return pd.DataFrame(rows, columns=["run_id", "backend", "artefact", "date_utc"])


def test_auto_profile_shows_the_engine_of_the_artefacts_newest_run():
    runs = _runs(
        [
            ("a", "hf", "table6", "2026-12-01T10:00:00"),
            ("b", "hf", "table1", "2026-12-01T11:00:00"),
            ("c", "hf", "table1", "2026-12-01T12:00:00"),
            ("d", "llamacpp", "table6", "2026-12-02T02:00:00"),
        ]
    )
    auto = Profile("default", "auto")
    # Table 6 decoded again on llama.cpp: its newest run's engine, not the older (and more numerous) hf records
    assert list(pick_backend(runs, auto, "hf", artefact="table6")["run_id"]) == ["d"]
    # Table 1 sharing that run keeps its own engine
    assert set(pick_backend(runs, auto, "hf", artefact="table1")["run_id"]) == {"a", "b", "c"}
    # no run made for the artefact: most runs, ties to the newest
    assert set(pick_backend(runs, auto, "hf", artefact="fig3")["backend"]) == {"hf"}
    tie = _runs([("a", "hf", "x", "2026-12-01"), ("d", "llamacpp", "x", "2026-12-02")])
    assert list(pick_backend(tie, auto, artefact="y")["backend"]) == ["llamacpp"]
    # a fixed profile backend still wins
    assert set(pick_backend(runs, Profile("p", "hf"), artefact="table6")["backend"]) == {"hf"}


def test_the_default_profile_is_read_as_auto():
    assert Profile.load("default").backend == "auto"
