"""Auditable results: every committed artefact rebuilds byte for byte (md, csv, tex) from the committed run
records its manifest lists; records of a committed artefact are committed too; .gitignore keeps them tracked."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from analysis.render import ARTEFACTS, render
from runners.paths import REPO_ROOT
from tests.helpers.records import item_run, item_sample, run_cfg

RESULTS = REPO_ROOT / "results"
COMPARED = (".md", ".csv", ".tex")


def rebuild_diffs(results: Path, name: str, out: Path) -> list[str]:
    """Render ``name`` from ``results/runs`` into ``out`` with the manifest's profile; the files that differ."""
    man = json.loads((results / name / "manifest.json").read_text())
    render(name, man["profile"], runs_root=results / "runs", out_root=out, echo=False)
    diffs = []
    for f in man["files"]:
        if Path(f).suffix in COMPARED:
            old, new = results / name / f, out / name / f
            if not new.is_file() or old.read_bytes() != new.read_bytes():
                diffs.append(f)
    return diffs


def _git(*args: str) -> subprocess.CompletedProcess | None:
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        return None
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)


def _tracked(path: Path) -> bool | None:
    p = _git("ls-files", "--error-unmatch", str(path.relative_to(REPO_ROOT)))
    return None if p is None else p.returncode == 0


@pytest.mark.parametrize("name", list(ARTEFACTS))
def test_committed_artefact_rebuilds_from_committed_records(name, tmp_path):
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
    assert rebuild_diffs(RESULTS, name, tmp_path) == []


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
    rec.write_text(
        rec.read_text().replace('"num_accepted_tokens": 7', '"num_accepted_tokens": 6', 1)
    )
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
