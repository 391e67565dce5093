"""Records are strict JSON: a non-finite number is written as ``null`` (never a bare ``NaN``, which jq, JavaScript,
Go and strict JSON parsers refuse) and read back as NaN, so every table renders as it did from the older records
holding ``NaN``; ``python -m runners.records.strict_json`` rewrites those in place, changing nothing else."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from analysis.load import load_items, load_runs
from analysis.render import render
from runners.records import strict_json
from runners.records.io import atomic_write_json, dumps, get_number, strict
from runners.records.record import RunRecord
from runners.records.schema import read_samples
from tests.helpers.records import item_run, item_sample, run_cfg

NAN = float("nan")


def _strict_loads(text: str):
    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


class TestWriters:
    def test_non_finite_numbers_become_null_at_any_depth(self):
        value = {
            "b": NAN,
            "a": [1.0, float("inf"), (np.float32("nan"), -np.inf)],
            "c": {"d": np.float64("nan"), "e": np.array([0.5, np.nan]), "f": np.int64(3)},
            "g": "NaN",
        }
        out = strict(value)
        assert out == {
            "b": None,
            "a": [1.0, None, [None, None]],
            "c": {"d": None, "e": [0.5, None], "f": 3},
            "g": "NaN",
        }
        assert list(out) == ["b", "a", "c", "g"]  # key order kept
        text = dumps(value, sort_keys=True)
        assert "NaN" not in text.replace('"NaN"', "") and "Infinity" not in text
        assert _strict_loads(text)["c"]["f"] == 3

    def test_a_value_left_non_finite_raises_instead_of_writing_invalid_json(self):
        with pytest.raises(ValueError):
            dumps({NAN: 1})  # a float key is not converted: allow_nan=False refuses it

    def test_a_summary_with_nan_is_written_as_null_and_read_back_as_missing(self, results):
        cfg = run_cfg("sd", "gsm8k", L=3)
        rec = RunRecord(results / "runs", cfg)
        rec.dir.mkdir(parents=True)
        atomic_write_json(rec.dir / "config.json", cfg)
        samples = [item_sample(f"gsm8k/test/{i}", [1], 3, correct=NAN) for i in range(2)]
        for s in samples:
            s["speed"]["draft_s"] = NAN  # a number the line schema types as float
            rec.append(s)
        rec.write_summary(
            {
                "num_samples": 2,
                "num_expected": 2,
                "complete": True,
                "quality/accuracy": NAN,
                "quality/accuracy_stderr": np.float32("nan"),
                "speed/tok_per_s": NAN,
                "spec/acceptance_rate": None,
                "date_utc": "2026-11-30T08:00:00+00:00",
            }
        )
        for f in ("summary.json", "samples.jsonl"):
            text = (rec.dir / f).read_text()
            assert "NaN" not in text
            for line in text.splitlines() if f.endswith(".jsonl") else [text]:
                _strict_loads(line)
        summary = _strict_loads(rec.summary_path.read_text())
        assert summary["quality/accuracy"] is None
        assert math.isnan(get_number(summary, "quality/accuracy"))
        assert get_number(summary, "quality/absent") is None
        lines = read_samples(rec.samples_path)
        assert math.isnan(lines[0]["speed"]["draft_s"])  # null where the schema wants a number: NaN
        assert lines[0]["quality"]["correct"] is None
        assert load_items(rec.dir)["correct"].isna().all()
        row = load_runs(results / "runs").set_index("run_id").loc[rec.run_id]
        for col in ("accuracy", "accuracy_stderr", "q_accuracy", "q_accuracy_stderr", "tok_per_s"):
            assert isinstance(row[col], float) and math.isnan(row[col]), col
        assert row["acceptance_rate"] is None or math.isnan(row["acceptance_rate"])


def _unscored_runs(results: Path) -> None:
    """Two runs of Table 6 as records written with bare ``NaN`` (an unscored benchmark: accuracy NaN)."""
    for m, rounds in (("sd", [3, 3]), ("dropmatch", [3, 4])):
        samples = [item_sample(f"g/{i}", rounds, 5, wall_s=1.0, correct=NAN) for i in range(3)]
        cfg = run_cfg(m, "gsm8k", L=5, p_drop=0.3 if m == "dropmatch" else None)
        item_run(results, m, cfg, samples, **{"quality/score_stderr": NAN})


def _artefact_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in sorted(root.iterdir())
        if p.suffix in (".md", ".csv", ".tex")
    }


def test_the_rewrite_changes_only_nan_and_no_rendered_table(results, tmp_path):
    _unscored_runs(results)
    before = {p: p.read_text() for p in strict_json.files_under([results])}
    assert sum("NaN" in t for t in before.values()) == 4  # both summaries and sample files
    render("table6", "default", runs_root=results / "runs", out_root=tmp_path / "a", echo=False)
    assert strict_json.main(["--check", str(results)]) == 1
    assert before == {p: p.read_text() for p in before}  # --check writes nothing
    assert strict_json.main([str(results)]) == 0
    for p, old in before.items():
        new = p.read_text()
        assert new == old.replace("NaN", "null")
        for line in new.splitlines() if p.suffix == ".jsonl" else [new]:
            _strict_loads(line)
    assert strict_json.main(["--check", str(results)]) == 0
    render("table6", "default", runs_root=results / "runs", out_root=tmp_path / "b", echo=False)
    assert _artefact_bytes(tmp_path / "a" / "table6") == _artefact_bytes(tmp_path / "b" / "table6")


def test_a_file_in_another_layout_is_reported_and_left_as_it_is(tmp_path, capsys):
    odd = tmp_path / "odd.json"
    odd.write_text('{"a":  NaN}')  # no json.dumps layout writes two spaces there
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"a": 1}\n{"b": NaN, "c": "x"}\n')
    assert strict_json.main([str(tmp_path)]) == 1
    assert odd.read_text() == '{"a":  NaN}'
    assert plain.read_text() == '{"a": 1}\n{"b": null, "c": "x"}\n'
    assert "odd.json: layout not reproduced" in capsys.readouterr().out


def test_a_record_being_written_is_left_to_its_writer(results, capsys):
    cfg = run_cfg("sd", "gsm8k", L=3)
    rec = RunRecord(results / "runs", cfg)
    item_run(results, rec.run_id, cfg, [item_sample("g/0", [1], 3, correct=NAN)])
    with rec:
        rec._lock_fd = rec._try_lock()  # a live writer of this run
        assert strict_json.main([str(rec.dir)]) == 1
        assert "being written by another process" in capsys.readouterr().out
        assert "NaN" in rec.summary_path.read_text()
    assert strict_json.main([str(rec.dir)]) == 0
    assert "NaN" not in rec.summary_path.read_text()
