"""One reader of ``samples.jsonl`` for every consumer (:func:`runners.records.schema.read_samples`), each line
checked against its record's schema: a damaged record is reported with its file, line and field before anything
is skipped, decoded, scored or tabulated; a line torn by a kill at the end of the file is the only damage
repaired silently (no models; the CLI test runs ``python -m runners.main`` on the tiny pair config)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runners.paths import REPO_ROOT
from runners.records.record import RunRecord
from runners.records.schema import RecordError, read_samples
from tests.helpers.cli import run_main
from tests.helpers.records import item_run, item_sample, run_cfg

CFG = run_cfg("sd", "gsm8k", L=3)


def _lines(path: Path) -> list[str]:
    return path.read_text().split("\n")


def _record(tmp_path: Path, n: int = 3) -> Path:
    """A finished decode record of ``n`` items (item ``i`` accepted ``i`` drafts in one round), in the
    directory :class:`RunRecord` gives ``CFG`` under ``tmp_path / "runs"``."""
    run_id = RunRecord(tmp_path / "runs", CFG).run_id
    return item_run(
        tmp_path, run_id, CFG, [item_sample(f"gsm8k/test/{i}", [i], 3) for i in range(n)]
    )


def _rewrite_line(path: Path, index: int, edit) -> None:
    lines = _lines(path)
    rec = json.loads(lines[index])
    edit(rec)
    lines[index] = json.dumps(rec)
    path.write_text("\n".join(lines))


class TestOneReader:
    def test_every_consumer_keeps_the_first_line_and_drops_a_torn_last_line(self, tmp_path):
        """Before: ``analysis.equality.read_outputs`` took the last line of a duplicated id and raised on a torn
        last line, while the record and the table loaders took the first and skipped it."""
        from analysis.counter_checks import counter_faults
        from analysis.equality import read_outputs
        from analysis.load import load_items
        from runners.exports import read_run

        d = _record(tmp_path, n=2)
        first = json.loads(_lines(d / "samples.jsonl")[0])
        dup = {**first, "output_token_ids": [7, 7, 7], "speed": {**first["speed"], "wall_s": 9.0}}
        with open(d / "samples.jsonl", "a") as f:
            f.write(json.dumps(dup) + "\n")
            f.write('{"sample_id": "gsm8k/test/2", "spec": {"num_dr')  # a kill mid-write
        ids = ["gsm8k/test/0", "gsm8k/test/1"]

        assert read_outputs(d) == {
            "gsm8k/test/0": first["output_token_ids"],
            "gsm8k/test/1": [1, 1, 1],
        }
        assert [s["sample_id"] for s in read_samples(d / "samples.jsonl")] == ids
        assert list(load_items(d)["sample_id"]) == ids
        assert list(load_items(d)["wall_s"]) == [1.0, 1.0]  # the first line's time, not 9.0
        assert [s["sample_id"] for s in read_run(d)[1]] == ids
        assert [s["sample_id"] for s in RunRecord(tmp_path / "runs", CFG).samples()] == ids
        assert counter_faults(d) == []

    def test_no_consumer_parses_samples_jsonl_itself(self):
        """Every reader of a record's lines goes through read_samples (a second parser would drift again)."""
        own = []
        for py in [*(REPO_ROOT / "runners").rglob("*.py"), *(REPO_ROOT / "analysis").rglob("*.py")]:
            text = py.read_text()
            if "samples.jsonl" in text and re.search(r"json\.loads\(\s*(line|raw)", text):
                own.append(str(py.relative_to(REPO_ROOT)))
        assert own == ["runners/records/schema.py"]


class TestCheckedLines:
    def test_wrong_type_names_file_line_sample_and_field(self, tmp_path):
        d = _record(tmp_path)
        _rewrite_line(d / "samples.jsonl", 1, lambda r: r["speed"].update(num_output_tokens="many"))
        with pytest.raises(RecordError) as e:
            read_samples(d / "samples.jsonl")
        assert str(e.value) == (
            f"{d / 'samples.jsonl'} line 2 (sample 'gsm8k/test/1'): speed.num_output_tokens \"many\" is "
            "not an integer; expected by the DecodeLine schema (runners/records/schema.py)"
        )

    def test_missing_required_field_is_named(self, tmp_path):
        d = _record(tmp_path)
        _rewrite_line(d / "samples.jsonl", 0, lambda r: r.pop("spec"))
        with pytest.raises(RecordError, match=r"line 1 \(sample 'gsm8k/test/0'\): spec is missing"):
            read_samples(d / "samples.jsonl")

    def test_torn_line_in_the_middle_is_an_error_not_a_skip(self, tmp_path):
        """Before: silently skipped (and its item decoded again while the junk line stayed)."""
        d = _record(tmp_path)
        lines = _lines(d / "samples.jsonl")
        lines[1] = lines[1][:40]
        (d / "samples.jsonl").write_text("\n".join(lines))
        with pytest.raises(
            RecordError, match=r"samples.jsonl line 2: not a JSON object .*only the last line"
        ):
            read_samples(d / "samples.jsonl")

    def test_measurement_records_are_checked_against_their_own_schema(self, tmp_path):
        from tests.helpers.records import similarity_line, write_run

        cfg = run_cfg("similarity", "gsm8k")  # method.measure: similarity
        good = similarity_line("p0", [[1.0, 0.5], [0.5, 1.0]], [[1.0, 0.2], [0.3, 1.0]])
        d = write_run(tmp_path, "m1", cfg, {"complete": True}, [good])
        assert read_samples(d / "samples.jsonl") == [good]
        bad = {**good, "cosine": [[1.0, "x"], [0.5, 1.0]]}
        write_run(tmp_path, "m1", cfg, {"complete": True}, [bad])
        with pytest.raises(
            RecordError, match=r"cosine\[0\]\[1\] \"x\" is not a number.*SimilarityLine"
        ):
            read_samples(d / "samples.jsonl")

    def test_committed_records_all_read(self):
        """Every record the repository ships matches its schema (the schema describes what the writers write)."""
        roots = [REPO_ROOT / "results" / "runs", REPO_ROOT / "results" / "autojudge" / "mining"]
        paths = [p for r in roots for p in sorted(r.glob("*/samples.jsonl"))]
        assert len(paths) > 100
        for p in paths:
            assert read_samples(p), p


class TestOpenOrSkip:
    def _open(self, tmp_path: Path, num_expected: int = 3) -> tuple[dict | None, list[str]]:
        said: list[str] = []
        with RunRecord(tmp_path / "runs", CFG) as rec:
            out = rec.open_or_skip({}, num_expected=num_expected, tag="t", log=said.append)
        return out, said

    def test_finished_record_with_a_bad_line_is_an_error_not_skipped(self, tmp_path):
        """Before: "finished earlier, skipped"; rescore and the tables then failed with a bare ValueError."""
        path = _record(tmp_path) / "samples.jsonl"
        _rewrite_line(path, 2, lambda r: r["spec"].update(num_drafts=None))
        with pytest.raises(
            RecordError, match=r"line 3 \(sample 'gsm8k/test/2'\): spec.num_drafts null"
        ):
            self._open(tmp_path)

    def test_finished_record_with_a_torn_last_line_is_resumed(self, tmp_path):
        """The kill -9 case: the torn line is cut off and its item decoded again (not "finished, skipped")."""
        run_dir = _record(tmp_path)
        data = (run_dir / "samples.jsonl").read_bytes()
        (run_dir / "samples.jsonl").write_bytes(data[:-20])
        out, said = self._open(tmp_path)
        assert out is None  # opened for writing
        assert said == [
            f"[run {run_dir.name}] t: summary.json counts 3 samples but {run_dir / 'samples.jsonl'} holds 2 "
            "complete lines; the missing ones are decoded again"
        ]
        assert [s["sample_id"] for s in read_samples(run_dir / "samples.jsonl")] == [
            "gsm8k/test/0",
            "gsm8k/test/1",
        ]
        assert (run_dir / "samples.jsonl").read_bytes().endswith(b"\n")  # the torn part was cut

    def test_rescore_names_the_damage_and_rewrites_nothing(self, tmp_path, capsys):
        from runners.rescore import main as rescore

        d = _record(tmp_path)
        _rewrite_line(d / "samples.jsonl", 0, lambda r: r["speed"].update(num_output_tokens="many"))
        before = (d / "samples.jsonl").read_bytes()
        assert rescore([str(d)]) == 2
        assert (d / "samples.jsonl").read_bytes() == before


@pytest.mark.subprocess
def test_cli_refuses_a_damaged_unfinished_record_before_decoding(
    main_env, tiny_pair_dir, monkeypatch
):
    """Before: the missing items were decoded (minutes on a real pair), then the summary failed with a TypeError.
    Now: exit 2 naming the file, the line and the field; no model loaded, the record left as it was."""
    from hydra import compose, initialize_config_dir

    from runners.config.resolve import resolve_run_config

    for k in ("DROPMATCH_TINY_PAIR", "DROPMATCH_RESULTS", "DROPMATCH_CACHE"):
        monkeypatch.setenv(k, main_env[k])
    over = ["pair=tiny", "profile=smoke", "progress=log", "method=sd", "L=2", "dataset.limit=3"]
    with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
        cfg = resolve_run_config(compose("run", overrides=over))
    bad = item_sample("gsm8k/test/0", [1], 2)
    bad["speed"]["num_output_tokens"] = "many"
    with RunRecord(Path(main_env["DROPMATCH_RESULTS"]) / "runs", cfg) as rec:
        rec.open({})
        rec.append(bad)
    before = rec.samples_path.read_bytes()
    p = run_main(main_env, *over[3:], timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert (
        f"record error: {rec.samples_path} line 1 (sample 'gsm8k/test/0'): speed.num_output_tokens "
        '"many" is not an integer' in p.stderr
    ), p.stderr
    assert "Traceback" not in p.stderr and "Loading weights" not in p.stdout + p.stderr
    assert rec.samples_path.read_bytes() == before


def test_render_names_a_damaged_record_and_exits_2(results, capsys):
    """Before: the table loaders failed with a bare ValueError naming no file or sample."""
    from analysis.render import main
    from tests.helpers.records import item_run

    item_run(results, "ar", run_cfg("ar", "gsm8k"), [item_sample("g/0", [], 0, tokens=4)])
    item_run(results, "sd", run_cfg("sd", "gsm8k", L=5), [item_sample("g/0", [3, 3], 5)])
    d = item_run(
        results,
        "dm",
        run_cfg("dropmatch", "gsm8k", p_drop=0.3, L=5),
        [item_sample("g/0", [3, 4], 5)],
    )
    _rewrite_line(d / "samples.jsonl", 0, lambda r: r["quality"].clear() or r.pop("speed"))
    assert main(["table6", "--profile", "default"]) == 2
    err = capsys.readouterr().err
    assert (
        f"[render] table6: record error: {d / 'samples.jsonl'} line 1 (sample 'g/0'): speed is missing "
        "(required)" in err
    ), err
    assert not (results / "table6").exists()
