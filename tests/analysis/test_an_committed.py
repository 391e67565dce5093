"""Auditable results: every committed artefact rebuilds byte for byte (md, csv, tex) from the committed run
records its manifest lists, to the same manifest (the same runs and the same files: a render from the committed
records adds and removes nothing), and its folder holds exactly the files its manifest lists; records of a
committed artefact are committed too; .gitignore keeps them tracked."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from analysis.render import ARTEFACTS, render
from runners.paths import REPO_ROOT
from tests.helpers.records import item_run, item_sample, run_cfg

RESULTS = REPO_ROOT / "results"
COMPARED = (".md", ".csv", ".tex")


def rebuild_diffs(results: Path, name: str, out: Path) -> list[str]:
    """Render ``name`` from ``results/runs`` into ``out`` with the manifest's profile; what differs: the
    md/csv/tex files whose bytes differ, and ``manifest.json: <key> ...`` for each manifest entry that changed
    (runs or source runs added or dropped, files added or dropped, another profile)."""
    man = json.loads((results / name / "manifest.json").read_text())
    render(name, man["profile"], runs_root=results / "runs", out_root=out, echo=False)
    new_man = json.loads((out / name / "manifest.json").read_text())
    diffs = []
    for f in man["files"]:
        if Path(f).suffix in COMPARED:
            old, new = results / name / f, out / name / f
            if not new.is_file() or old.read_bytes() != new.read_bytes():
                diffs.append(f)
    for key in sorted(set(man) | set(new_man)):
        old_v, new_v = man.get(key), new_man.get(key)
        if isinstance(old_v, list) or isinstance(new_v, list):
            added = sorted(set(new_v or []) - set(old_v or []))
            dropped = sorted(set(old_v or []) - set(new_v or []))
            if added or dropped:
                diffs.append(f"manifest.json: {key} added {added}, dropped {dropped}")
        elif old_v != new_v:
            diffs.append(f"manifest.json: {key} {old_v!r} -> {new_v!r}")
    return diffs


def unlisted_files(d: Path) -> list[str]:
    """Files in an artefact folder that its ``manifest.json`` does not list (stale outputs of an earlier
    render), and listed files that are missing (prefixed ``missing:``)."""
    listed = set(json.loads((d / "manifest.json").read_text())["files"])
    present = {p.name for p in d.iterdir() if p.is_file() and p.name != "manifest.json"}
    return sorted(present - listed) + [f"missing: {f}" for f in sorted(listed - present)]


def _git(*args: str) -> subprocess.CompletedProcess | None:
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        return None
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def _tracked(path: Path) -> bool | None:
    p = _git("ls-files", "--error-unmatch", str(path.relative_to(REPO_ROOT)))
    return None if p is None else p.returncode == 0


def _locally_changed(name: str) -> bool:
    """``results/<name>/`` differs from the commit (re-rendered here, e.g. by ``./reproduce.sh table6`` on a CPU
    whose engine decoded new runs): False without git."""
    p = _git("status", "--porcelain", "--", f"results/{name}")
    return p is not None and p.returncode == 0 and bool(p.stdout.strip())


def _committed_results(dest: Path) -> Path:
    """The commit's ``results/`` (tracked files only) written under ``dest``: what a clone of it holds."""
    blob = subprocess.run(
        ["git", "archive", "--format=tar", "HEAD", "results"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        try:
            tar.extractall(dest, filter="data")
        except (
            TypeError
        ):  # Python < 3.11.4 has no extraction filters; the archive is the repository's own
            tar.extractall(dest)
    return dest / "results"


@pytest.mark.parametrize("name", list(ARTEFACTS))
def test_committed_artefact_rebuilds_from_committed_records(name, tmp_path):
    if _locally_changed(name):
        # the working copy was re-rendered from local runs: check the committed artefact, from the commit's records
        results = _committed_results(tmp_path / "head")
        man = json.loads((results / name / "manifest.json").read_text())
        absent = [
            r
            for r in [*man["runs"], *man.get("source_runs", [])]
            if not (results / "runs" / r / "summary.json").is_file()
        ]
        assert not absent, (
            f"results/{name}/ is committed but the records of runs {absent[:5]} are not"
        )
        assert unlisted_files(results / name) == []
        assert rebuild_diffs(results, name, tmp_path / "out") == []
        return
    d = RESULTS / name
    if not d.is_dir():
        pytest.skip(f"no results/{name}/ in this checkout")
    if not (d / "manifest.json").is_file():
        pytest.skip(
            f"results/{name}/ was rendered before the driver wrote manifests (its runs are not listed); "
            f"regenerate it: ./reproduce.sh {name}"
        )
    runs = json.loads((d / "manifest.json").read_text())["runs"]
    missing = [r for r in runs if not (RESULTS / "runs" / r / "summary.json").is_file()]
    if missing:
        pytest.skip(
            f"records of {len(missing)} of the {len(runs)} runs behind results/{name}/ are absent from "
            f"results/runs/ (e.g. {missing[0]})"
        )
    if _tracked(d / "manifest.json"):
        sources = json.loads((d / "manifest.json").read_text()).get(
            "source_runs", []
        )  # e.g. Fig. 3's decodes
        untracked = [
            r for r in [*runs, *sources] if _tracked(RESULTS / "runs" / r / "summary.json") is False
        ]
        assert not untracked, (
            f"results/{name}/ is committed but the records of runs {untracked[:5]} are not"
        )
    assert unlisted_files(d) == [], f"results/{name}/ holds files its manifest does not list"
    assert rebuild_diffs(RESULTS, name, tmp_path) == []


def test_rebuild_detects_an_extra_run_and_stale_files(results, tmp_path):
    """A run record that the committed artefact does not hold but its select() takes (a new table, a new
    row) changes the rebuilt manifest, and a file left by an earlier render is reported."""
    for m, L, rounds in (("sd", 5, [3, 3]), ("dropmatch", 5, [3, 4])):
        samples = [item_sample(f"g/{i}", rounds, L, wall_s=1.0) for i in range(3)]
        item_run(
            results, m, run_cfg(m, "gsm8k", L=L, p_drop=0.3 if m == "dropmatch" else None), samples
        )
    render("table6", "default", echo=False)
    assert rebuild_diffs(results, "table6", tmp_path / "a") == []
    assert unlisted_files(results / "table6") == []
    samples = [item_sample(f"g/{i}", [2, 2], 5, wall_s=1.0) for i in range(3)]
    item_run(results, "dm-p0.1", run_cfg("dropmatch", "gsm8k", L=5, p_drop=0.1), samples)
    diffs = rebuild_diffs(results, "table6", tmp_path / "b")
    assert "manifest.json: runs added ['dm-p0.1'], dropped []" in diffs
    assert any(d.startswith("manifest.json: files added ['table6_p0.1_K5.csv'") for d in diffs)
    (results / "table6" / "old_plot.png").write_bytes(b"x")
    (results / "table6" / "table6.tex").unlink()
    assert unlisted_files(results / "table6") == ["old_plot.png", "missing: table6.tex"]


def test_rebuild_is_byte_identical_and_detects_a_changed_record(results, tmp_path):
    """The check above on synthetic records: a second render matches; an edited record does not."""
    for m, L, rounds in (("sd", 5, [3, 3]), ("dropmatch", 5, [3, 4])):
        samples = [
            item_sample(f"g/{i}", rounds, L, wall_s=[4.0 + 0.1 * i, 4.2, 4.1]) for i in range(4)
        ]
        item_run(
            results, m, run_cfg(m, "gsm8k", L=L, p_drop=0.3 if m == "dropmatch" else None), samples
        )
    render("table6", "default", echo=False)
    assert rebuild_diffs(results, "table6", tmp_path / "a") == []
    rec = results / "runs" / "dropmatch" / "samples.jsonl"
    # an edit that keeps the record possible (render refuses impossible counters before any diff)
    rec.write_text(rec.read_text().replace('"correct": 1.0', '"correct": 0.0', 1))
    assert "table6.md" in rebuild_diffs(results, "table6", tmp_path / "b")


def test_run_records_are_not_git_ignored():
    p = _git("check-ignore", "-q", "--no-index", "results/runs/0123abcd/summary.json")
    if p is None:
        pytest.skip("not a git checkout")
    for f in ("config.json", "meta.json", "samples.jsonl", "summary.json"):
        assert (
            _git("check-ignore", "-q", "--no-index", f"results/runs/0123abcd/{f}").returncode == 1
        ), f
    for f in (
        "results/runs/0123abcd/.lock",
        "results/runs/0123abcd/.summary.json.tmp1.host",
        "results/hydra/x",
        "results/wandb/x",
    ):
        assert _git("check-ignore", "-q", "--no-index", f).returncode == 0, f


def _committed_markdown() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*/*.md") if p.parent.name != "runs")


@pytest.mark.skipif(not _committed_markdown(), reason="no committed artefacts in this checkout")
@pytest.mark.parametrize("md", _committed_markdown(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_committed_table_and_figure_names_its_runs(md):
    """The shared provenance footer (analysis.footer.provenance_lines) under every table and figure, the decoding
    seed included (before: frontier.md had none of it, and no footer named the decoding seed)."""
    text = md.read_text(encoding="utf-8")
    for line in (
        "- date (UTC): ",
        "- decoding seed (decoding.seed): ",
        "- git commits of the runs: ",
    ):
        assert line in text, f"{md.name} lacks {line.strip()!r}"


def test_committed_bench_tables_show_no_interval_for_one_repeat():
    """A rate timed once has no spread (before: '± 0.00')."""
    for md in sorted((RESULTS / "bench").glob("bench*.md")):
        runs = json.loads((RESULTS / "bench" / "manifest.json").read_text())["runs"]
        repeats = {
            json.loads((RESULTS / "runs" / r / "summary.json").read_text()).get("bench/repeats")
            for r in runs
        }
        if repeats == {1}:
            text = md.read_text(encoding="utf-8")
            assert "± 0.00" not in text and "(1 repeat, no interval)" in text, md.name


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON (RFC 8259)")


def test_every_committed_record_file_is_strict_json():
    """jq, JavaScript, Go and strict JSON parsers read every committed JSON / JSON-lines file: no bare NaN or
    Infinity (a non-finite number is written as null; ``python -m runners.records.strict_json`` rewrites older
    files)."""
    import subprocess

    # committed files only: a user's own ignored folders (results/stale, hydra/) are not ours to check
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", "*.json", "*.jsonl"],
        cwd=RESULTS,
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = sorted(RESULTS / f for f in listed.stdout.split("\0") if f)
    if not files:
        pytest.skip("no committed results in this checkout")
    bad = []
    for p in files:
        text = p.read_text(encoding="utf-8")
        for n, part in enumerate(text.split("\n") if p.suffix == ".jsonl" else [text], start=1):
            if not part.strip():
                continue
            try:
                json.loads(part, parse_constant=_refuse_constant)
            except ValueError as e:
                bad.append(
                    f"{p.relative_to(RESULTS)}{f' line {n}' if p.suffix == '.jsonl' else ''}: {e}"
                )
    assert bad == [], f"{len(bad)} not strict JSON, e.g. {bad[:3]}"
