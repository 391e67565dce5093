"""Records are strict JSON: a non-finite number is written as ``null`` (never a bare ``NaN``, which jq, JavaScript,
Go and strict JSON parsers refuse) and read back as NaN, as the writer had it."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from analysis.load import load_items, load_runs
from runners.records.io import atomic_write_json, dumps, get_number, strict
from runners.records.record import RunRecord
from runners.records.schema import read_samples
from tests.helpers.records import item_sample, run_cfg

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
