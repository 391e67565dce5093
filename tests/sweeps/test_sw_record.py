"""Run identity and crash safety of ``runners/records/record.py`` (no models; fast)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from runners.paths import REPO_ROOT
from runners.records.record import RunLockedError, RunRecord, read_samples
from runners.records.run_id import run_id_of
from tests.helpers.records import item_sample

CFG = {
    "pair": {"name": "tiny", "target": {"local_path": "/a/target"}},
    "dataset": {"name": "gsm8k", "limit": 3},
    "method": {"name": "sd"},
    "L": 3,
    "decoding": {"temperature": 0.0, "seed": 0},
}


def line(sample_id: str) -> dict:
    """A complete decode line (the records' lines are checked against their schema when read)."""
    return item_sample(sample_id, [1], 3)


class TestRunId:
    def test_same_config_same_id(self):
        assert run_id_of(dict(CFG)) == run_id_of(json.loads(json.dumps(CFG)))

    @pytest.mark.parametrize(
        "extra",
        [
            {"logger": {"name": "wandb"}},
            {"hydra": {"x": 1}},
            {"launcher": "slurm"},
            {"artefact": "table6"},
            {"progress": "quiet"},
        ],
    )
    def test_bookkeeping_fields_do_not_change_id(self, extra):
        assert run_id_of({**CFG, **extra}) == run_id_of(CFG)

    def test_source_location_does_not_change_id(self):
        moved = json.loads(json.dumps(CFG))
        moved["pair"]["target"]["local_path"] = "/scratch/elsewhere/target"
        assert run_id_of(moved) == run_id_of(CFG)

    @pytest.mark.parametrize(
        "key,value",
        [
            ("L", 4),
            ("decoding", {"temperature": 0.0, "seed": 1}),
            ("dataset", {"name": "gsm8k", "limit": 4}),
        ],
    )
    def test_computation_fields_change_id(self, key, value):
        assert run_id_of({**CFG, key: value}) != run_id_of(CFG)

    def test_ids_of_earlier_records_are_kept(self):
        """Canonical numbers (0 vs 0.0) must not move the id of a config that did not change: this is the
        id the code before the rule gave CFG (temperature 0.0, ints elsewhere)."""
        assert run_id_of(CFG) == "92584caf1af7"

    @pytest.mark.parametrize(
        "path,a,b",
        [
            ("decoding.temperature", 0, 0.0),
            ("decoding.top_p", 1, 1.0),
            ("dropmatch.p_drop", 0, 0.0),
            ("backend.gpu_memory_utilization", 1, 1.0),
            ("L", 3, 3.0),
            ("dataset.limit", 3, 3.0),
        ],
    )
    def test_int_and_integral_float_are_one_run(self, path, a, b):
        """Before: ``decoding.temperature=0`` (an int) and the default 0.0 gave two ids (ca904c70ff4c vs
        92584caf1af7), so a rerun did not find its finished run."""

        def with_value(v):
            c = json.loads(json.dumps(CFG))
            *parents, leaf = path.split(".")
            node = c
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = v
            return c

        assert run_id_of(with_value(a)) == run_id_of(with_value(b))
        assert run_id_of(with_value(a)) != run_id_of(
            with_value(0.5)
        )  # a different value still differs

    @pytest.mark.parametrize(
        "a,b",
        [
            (["decoding.temperature=0"], ["decoding.temperature=0.0"]),
            (["dropmatch.p_drop=0"], ["dropmatch.p_drop=0.0"]),
            (["decoding.top_p=1"], []),
            (["decoding.temperature=0"], []),
        ],
    )
    def test_cli_spellings_of_one_number_are_one_run(self, a, b, monkeypatch):
        from hydra import compose, initialize_config_dir

        from runners.config.resolve import resolve_run_config

        monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/x")

        def rid(*extra):
            with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
                return run_id_of(
                    resolve_run_config(
                        compose(
                            "run",
                            overrides=[
                                "pair=tiny",
                                "profile=smoke",
                                "dataset=gsm8k",
                                "method=dropmatch",
                                *extra,
                            ],
                        )
                    )
                )

        assert rid(*a) == rid(*b)

    def test_profile_cap_of_one_benchmark_changes_only_its_runs(self, monkeypatch):
        """Raising HumanEval's cap in a profile must not invalidate the finished GSM8K runs of a sweep."""
        from hydra import compose, initialize_config_dir

        from runners.config.resolve import resolve_run_config

        monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/x")

        def rid(dataset, *extra):
            with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
                return run_id_of(
                    resolve_run_config(
                        compose(
                            "run",
                            overrides=[
                                "pair=tiny",
                                "profile=default",
                                f"dataset={dataset}",
                                "method=sd",
                                *extra,
                            ],
                        )
                    )
                )

        bumped = "profile.max_new_tokens.humaneval=999"
        assert rid("gsm8k", bumped) == rid("gsm8k")
        assert rid("humaneval", bumped) != rid("humaneval")
        assert rid("gsm8k", "profile=smoke") != rid("gsm8k")  # the profile's name stays in the id

    def test_resolved_hydra_config_is_plain_json(self, tmp_path, monkeypatch):
        """A composed DictConfig resolves to plain containers (no stringified sub-configs in config.json)."""
        from hydra import compose, initialize_config_dir

        from runners.config.resolve import resolve_run_config

        monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/x")
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = compose("run", overrides=["pair=tiny", "profile=smoke"])
        c = resolve_run_config(cfg)
        for key in ("pair", "dataset", "backend", "profile", "method"):
            assert isinstance(c[key], dict), key
        assert c["pair"]["target"]["local_path"] == "/x/target"
        monkeypatch.setenv("DROPMATCH_TINY_PAIR", "/y")
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            c2 = resolve_run_config(compose("run", overrides=["pair=tiny", "profile=smoke"]))
        assert run_id_of(c2) == run_id_of(c)


class TestRecord:
    def test_torn_last_line_is_cut_and_appending_continues(self, tmp_path, caplog):
        rec = RunRecord(tmp_path, CFG)
        with rec:
            rec.open({})
            rec.append(line("a"))
        with open(rec.samples_path, "ab") as f:
            f.write(b'{"sample_id": "b", "output_te')  # a kill in the middle of a write
        assert [s["sample_id"] for s in read_samples(rec.samples_path)] == ["a"]
        with RunRecord(tmp_path, CFG) as rec2:
            with caplog.at_level("WARNING", logger="runners.records.record"):
                rec2.open({})
            assert rec2.done_ids() == {"a"}
            rec2.append(line("b"))
        # the repair is said: a resumed run decodes that sample again
        assert (
            f"[run {rec.run_id}] dropped a torn last line of samples.jsonl (29 bytes" in caplog.text
        )
        lines = rec.samples_path.read_text().splitlines()
        assert [json.loads(x)["sample_id"] for x in lines] == ["a", "b"]

    def test_readers_keep_first_line_per_sample(self, tmp_path):
        p = tmp_path / "samples.jsonl"
        p.write_text(
            '{"sample_id": "a", "v": 1}\n{"sample_id": "a", "v": 2}\n{"sample_id": "b", "v": 3}\n'
        )
        assert [(s["sample_id"], s["v"]) for s in read_samples(p)] == [("a", 1), ("b", 3)]

    def test_second_writer_is_refused_until_the_first_closes(self, tmp_path):
        first = RunRecord(tmp_path, CFG)
        first.open({})
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
            RunRecord(tmp_path, CFG).open({})
        first.close()
        with RunRecord(tmp_path, CFG) as again:
            again.open({})

    @pytest.mark.subprocess
    def test_lock_of_a_killed_process_is_released(self, tmp_path):
        code = textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(REPO_ROOT)!r})
            from runners.records.record import RunRecord
            r = RunRecord({str(tmp_path)!r}, {CFG!r}); r.open({{}}); print("locked", flush=True); time.sleep(60)
        """)
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        try:
            assert p.stdout.readline().strip() == "locked"
            with pytest.raises(RunLockedError):
                RunRecord(tmp_path, CFG).open({})
        finally:
            p.kill()
            p.wait()
        with RunRecord(tmp_path, CFG) as r:
            r.open({})

    def test_meta_keeps_first_session_and_lists_resumes(self, tmp_path):
        for i in range(2):
            with RunRecord(tmp_path, CFG) as r:
                r.open({"date_utc": f"day{i}"})
                r.append(line(f"s{i}"))
        meta = json.loads((r.dir / "meta.json").read_text())
        assert meta["date_utc"] == "day0"
        assert [s["num_done_at_start"] for s in meta["sessions"]] == [0, 1]

    def test_finished_summary_is_detected(self, tmp_path):
        with RunRecord(tmp_path, CFG) as r:
            r.open({})
            assert r.existing_summary() is None
            r.write_summary({"complete": False})
            assert r.existing_summary() is None
            r.write_summary({"complete": True, "num_expected": 1})
        assert RunRecord(tmp_path, CFG).existing_summary()["num_expected"] == 1


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from runners.records.record import RunRecord
    r = RunRecord({dir!r}, {cfg!r})
    r.open({{}})
    done = r.done_ids()
    for i in range({n}):
        sid = f"s{{i:03d}}"
        if sid in done:
            continue
        r.append({{**{line!r}, "sample_id": sid, "output_text": "x" * (i * 9973 % 200000)}})  # up to 200 KB
        print(sid, flush=True)
    r.close()
""")


@pytest.mark.subprocess
def test_sigkill_during_appends_loses_nothing_reported_and_duplicates_nothing(tmp_path):
    """Kill a writer at random instants many times; every id it reported is on disk exactly once."""
    n, rng = 60, random.Random(0)
    code = WRITER.format(root=str(REPO_ROOT), dir=str(tmp_path), cfg=CFG, n=n, line=line("-"))
    reported: set[str] = set()
    run_dir = RunRecord(tmp_path, CFG).dir
    for _ in range(25):
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.03, 0.25))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        reported |= set(out.split())
        on_disk = (
            [
                json.loads(x)["sample_id"]
                for x in (run_dir / "samples.jsonl").read_text().split("\n")[:-1]
            ]
            if (run_dir / "samples.jsonl").exists()
            else []
        )
        assert len(on_disk) == len(set(on_disk)), "duplicate sample lines"
        assert reported <= set(on_disk), "a reported sample is missing"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    ids = [json.loads(x)["sample_id"] for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert ids == sorted(ids) and len(ids) == n == len(set(ids))
    assert (run_dir / "samples.jsonl").read_bytes().endswith(b"\n")


@pytest.mark.parametrize("mode,lines", [("log", 10), ("quiet", 0)])
def test_progress_lines_carry_rate_tau_and_eta(mode, lines):
    from runners.records.counters import SpecDecodeCounters
    from runners.sweep.progress import RunProgress

    out: list[str] = []
    p = RunProgress(20, "sd L=3 gsm8k n=20", mode, out.append)
    c = SpecDecodeCounters(num_speculative_tokens=3)
    c.observe_draft(3, 2)
    for _ in range(20):
        p.update(5, c, "[run x]")
    p.close()
    assert len(out) == lines
    if lines:
        assert (
            out[0].startswith("[run x] 2/20 samples, ")
            and "tau 3.00" in out[0]
            and "ETA 0:00:00" in out[-1]
        )
