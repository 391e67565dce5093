"""The driver (python -m analysis.render): exit codes, backend from profile/records, manifest, no absolute
paths, footers (commits, model identity, decision code), figure style, W&B offline logging."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from analysis.render import ARTEFACTS
from runners.paths import REPO_ROOT
from tests.helpers.records import (
    item_run,
    item_sample,
    run_cfg,
    similarity_line,
    summary,
    write_run,
)


def _vllm(cfg: dict) -> dict:
    cfg["backend"] = {"name": "vllm", "batch_size": 1, "spec_method": "draft_model"}
    return cfg


def _table6_runs(results, *, profile="default", backend="hf", p_drops=(0.3,), **run_kw):
    def cfg(*a, **kw):
        c = run_cfg(*a, profile=profile, **kw)
        return _vllm(c) if backend == "vllm" else c

    tag = f"{profile}-{backend}"
    item_run(
        results,
        f"ar-{tag}",
        cfg("ar", "gsm8k"),
        [item_sample("g/0", [], 0, tokens=4, wall_s=2.0)],
        **run_kw,
    )
    item_run(
        results,
        f"sd-{tag}",
        cfg("sd", "gsm8k", L=5),
        [item_sample("g/0", [3, 3], 5, wall_s=4.5)],
        **run_kw,
    )
    for p in p_drops:
        item_run(
            results,
            f"dm{p}-{tag}",
            cfg("dropmatch", "gsm8k", p_drop=p, L=5),
            [item_sample("g/0", [3, 4], 5, wall_s=4.0)],
            **run_kw,
        )


@pytest.mark.parametrize("name", list(ARTEFACTS))
def test_every_renderer_exits_nonzero_without_runs(results, name, capsys):
    from analysis.render import main

    assert main([name, "--profile", "paper"]) == 1
    err = capsys.readouterr().err
    assert (
        f"[render] {name}: no complete runs for profile=paper" in err
        and f"./reproduce.sh {name}" in err
    )
    assert not (results / name).exists()


def _profile_entries():
    from analysis import equality, render
    from analysis.tables import table6
    from runners.judging import cli as judging

    return {
        "render": lambda p: render.main(["table6", "--profile", p]),
        "tables.table6": lambda p: render.cli("table6", ["--profile", p]),
        "table6.main": lambda p: table6.main(["--profile", p]),
        "equality": lambda p: equality.main(["--profile", p]),
        "judging": lambda p: judging.main(["table7", "--profile", p]),
    }


@pytest.mark.parametrize("entry", ["render", "tables.table6", "table6.main", "equality", "judging"])
def test_a_mistyped_profile_is_refused_by_every_entry(results, capsys, entry):
    """Before: 'no runs' (render, judging) or an empty result (equality, table6.main) for ``--profile defualt``."""
    _table6_runs(results)
    with pytest.raises(SystemExit) as e:
        _profile_entries()[entry]("defualt")
    assert e.value.code == 2
    names = sorted(f.stem for f in (REPO_ROOT / "conf" / "profile").glob("*.yaml"))
    assert f"--profile: unknown profile 'defualt'; allowed: {', '.join(names)}, any" in (
        capsys.readouterr().err
    )
    assert not (results / "table6").exists()


def test_profile_load_refuses_an_unknown_profile():
    from analysis.artefact import Profile

    with pytest.raises(
        ValueError, match=r"^unknown profile 'defualt'; allowed: default, .*smoke, any$"
    ):
        Profile.load("defualt")
    assert Profile.load("any") == Profile(None, None)


@pytest.mark.subprocess
def test_cli_exit_codes(results):
    run = [sys.executable, "-m", "analysis.render"]
    env = {"DROPMATCH_RESULTS": str(results), "PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    p = subprocess.run(
        [*run, "table6", "--profile", "paper"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert (
        p.returncode == 1 and "no complete runs for profile=paper (its backend: vllm)" in p.stderr
    )
    p = subprocess.run([*run, "table99"], env=env, capture_output=True, text=True, cwd=REPO_ROOT)
    assert p.returncode == 2 and "unknown artefact 'table99'" in p.stderr
    p = subprocess.run([*run, "tabel6"], env=env, capture_output=True, text=True, cwd=REPO_ROOT)
    assert p.returncode == 2 and "unknown artefact 'tabel6' (did you mean table6?)" in p.stderr
    _table6_runs(results)
    p = subprocess.run(
        [sys.executable, "-m", "analysis.tables.table6", "--profile", "default"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert p.returncode == 0, p.stderr
    assert (results / "table6" / "table6.md").is_file()
    # the terminal names the folder the files went to, as a path the user can open from anywhere
    files = len(json.loads((results / "table6" / "manifest.json").read_text())["files"])
    said = f"wrote {files} files and manifest.json to {(results / 'table6').resolve()}/"
    assert said in p.stdout + p.stderr


def test_backend_from_profile_then_records(results):
    """profile=paper selects vLLM (conf/profile/paper.yaml): its vLLM runs are tabulated, not the default hf."""
    from analysis.render import render

    _table6_runs(results, profile="paper", backend="vllm")
    _table6_runs(results, profile="paper", backend="hf")
    art = render("table6", "paper", echo=False)
    assert set(art.runs["backend"]) == {"vllm"}
    assert "backend: vllm; profile: paper" in (results / "table6" / "table6.md").read_text()
    # default profile names no backend: hf (the artefact's default) when present, else what the records hold
    _table6_runs(results, profile="default", backend="vllm")
    assert set(render("table6", "default", echo=False).runs["backend"]) == {"vllm"}


def test_manifest_and_stale_files(results):
    import shutil

    from analysis.render import render

    _table6_runs(results, p_drops=(0.1, 0.3))
    render("table6", "default", echo=False)
    man = json.loads((results / "table6" / "manifest.json").read_text())
    assert man["profile"] == "default" and sorted(man["runs"]) == [
        "ar-default-hf",
        "dm0.1-default-hf",
        "dm0.3-default-hf",
        "sd-default-hf",
    ]
    assert "table6_p0.1_K5.csv" in man["files"] and "table6_per_position.png" in man["files"]
    shutil.rmtree(results / "runs" / "dm0.1-default-hf")
    render("table6", "default", echo=False)
    assert not (
        results / "table6" / "table6_p0.1_K5.csv"
    ).exists()  # no stale table of a setting now gone
    assert (results / "table6" / "table6.csv").exists()


ABSOLUTE = re.compile(r"(^|[\s(\"'=:])/(tmp|home|work|root|Users|var|usr|opt|mnt)/")


def test_no_absolute_paths_in_any_artefact(results):
    from analysis.render import render

    _table6_runs(results, p_drops=(0.1, 0.3))
    same = [[1.0] * 3] * 3
    for p in (0.1, 0.3):
        write_run(
            results,
            f"sim-{p}",
            run_cfg("similarity", "spec_bench", p_drop=p, K=3),
            summary(float("nan")),
            [similarity_line("spec_bench/test/81", same, same)],
        )
    for name in ("table6", "sensitivity", "fig3"):
        render(name, "default", echo=False)
    assert (results / "fig3" / "fig3.md").read_text().count(
        "![fig3](fig3.png)"
    ) == 1  # relative image link
    texts = [p for p in results.glob("*/*") if p.suffix in (".md", ".csv", ".tex", ".json")]
    assert len(texts) > 8
    for p in texts:
        text = p.read_text()
        assert (
            str(results) not in text and str(REPO_ROOT) not in text and not ABSOLUTE.search(text)
        ), p.name


def test_footer_commits_identity_and_decision_code(results):
    """Runs from two commits, pinned weights from meta, and two decision-code fingerprints: all said."""
    from analysis.render import render

    ident = {
        "target": {
            "sha256": "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "dtype": "bfloat16",
        },
        "draft": {"sha256": "1d9614638d18024d0fbb36575a15f1302a3adf044df1034", "dtype": "bfloat16"},
    }
    meta = {
        "git_sha": "1111111111aa",
        "model_identity": ident,
        "decision_code": {"sha256": "d" * 64},
    }
    item_run(
        results,
        "sd",
        run_cfg("sd", "gsm8k", L=5),
        [item_sample("g/0", [3], 5)],
        meta=meta,
        git_sha="1111111111aa",
    )
    item_run(
        results,
        "dm",
        run_cfg("dropmatch", "gsm8k", p_drop=0.3, L=5),
        [item_sample("g/0", [4], 5)],
        meta={**meta, "git_sha": "2222222222bb", "decision_code": "e" * 64},
        git_sha="2222222222bb",
    )
    render("table6", "default", echo=False)
    md = (results / "table6" / "table6.md").read_text()
    assert (
        "git commits of the runs: 1111111111 (1 run), 2222222222 (1 run) -- 2 commits in one table"
        in md
    )
    assert "span several commits" not in md
    assert (
        "model identity (qwen25coder_0.5b_1.5b): draft dtype bfloat16, sha256 1d9614638d18, "
        "target dtype bfloat16, sha256 cc324af070c2"
    ) in md
    line = next(x for x in md.splitlines() if "decision code" in x)
    assert line.startswith("- decision code fingerprints (per rule@backend): ")
    assert "dddddddddddd" in line and "eeeeeeeeeeee" in line and "MIXED" not in line


def test_footer_says_mixed_only_within_one_rule_and_backend():
    """Each run's fingerprint covers its own rule and backend, so SD and DM differ by design; two SD runs made by
    different code are MIXED."""
    import pandas as pd

    from analysis.footer import decision_lines

    runs = pd.DataFrame(
        {
            "criterion": ["rejection", "dropmatch_js", "rejection"],
            "method": ["sd", "dropmatch", "sd"],
            "backend": ["hf", "hf", "hf"],
            "decision_code": ["aaaaaaaaaaaa", "bbbbbbbbbbbb", "aaaaaaaaaaaa"],
        }
    )
    assert decision_lines(runs) == [
        "decision code fingerprints (per rule@backend): dropmatch_js@hf bbbbbbbbbbbb, "
        "rejection@hf aaaaaaaaaaaa"
    ]
    runs.loc[2, "decision_code"] = "cccccccccccc"
    (mixed,) = decision_lines(runs)
    assert mixed.startswith(
        "MIXED decision code: rejection@hf: aaaaaaaaaaaa (1 run), cccccccccccc (1 run)"
    )


def test_footer_one_run_spanning_two_commits(results):
    """A run started at one commit and finished at another (the commit moved while it ran) is one run at two
    commits, not two runs (seen: a bench run while records were committed)."""
    from analysis.render import render

    item_run(
        results,
        "ar",
        run_cfg("ar", "gsm8k"),
        [item_sample("g/0", [], 0, tokens=4)],
        meta={"git_sha": "1111111111aa"},
        git_sha="2222222222bb",
    )  # Table 6 shows SD only beside DM runs
    render("table6", "default", echo=False)
    md = (results / "table6" / "table6.md").read_text()
    assert (
        "git commits of the runs: 1111111111 (1 run), 2222222222 (1 run) -- 2 commits in one table "
        "(1 of the 1 runs span several commits)"
    ) in md


def test_git_dirty_ignores_results(tmp_path, monkeypatch):
    """Rewritten records under results/ are data and README edits prose: the dirty flag reads code changes only."""
    import subprocess

    import runners.records.provenance as prov

    def git(*a):
        subprocess.run(["git", *a], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "summary.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(prov, "REPO_ROOT", tmp_path)
    (tmp_path / "README.md").write_text("v1\n")
    git("add", "README.md")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "readme")
    (tmp_path / "results" / "summary.json").write_text('{"rescored": 1}')
    (tmp_path / "README.md").write_text("v2\n")
    assert prov.git_state()["git_dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert prov.git_state()["git_dirty"] is True


def test_model_identity_from_pair_config_when_meta_lacks_it():
    from analysis.load import model_identity

    cfg = {
        "pair": {
            "dtype": "float32",
            "target": {"name": "T", "pinned": {"sha256": "ab" * 32}},
            "draft": {"name": "D", "hub_id": "org/D", "revision": "0123456789abcdef0123"},
        }
    }
    assert (
        model_identity(cfg, {}, {})
        == "target sha256 abababababab, draft org/D@0123456789ab, dtype float32"
    )


def test_figures_follow_the_style(results):
    from analysis import style
    from analysis.artefact import Profile
    from analysis.load import load_runs
    from analysis.tables import table6

    for ds in ("gsm8k", "mmlu", "humaneval"):
        item_run(results, f"sd-{ds}", run_cfg("sd", ds, L=5), [item_sample(f"{ds}/0", [3, 1], 5)])
        item_run(
            results,
            f"dm-{ds}",
            run_cfg("dropmatch", ds, p_drop=0.3, L=5),
            [item_sample(f"{ds}/0", [4, 2], 5)],
        )
    art = table6.build(table6.select(load_runs(), Profile("default")))
    (f,) = art.figures
    axes = f.fig.axes
    assert [ax.get_title() for ax in axes] == ["GSM8K", "MMLU", "HumanEval"]  # table order
    # SD's rounds accepted 3 and 1 of 5: no round reached position 4, so position 5 is n/a (not a 0)
    na = "SD L=5: i ≥ 5 n/a\n(no round's accepted prefix reached i - 1)"
    assert [[t.get_text() for t in ax.texts] for ax in axes] == [[na, "(a)"]] * 1 + [
        [na, "(b)"],
        [na, "(c)"],
    ]
    assert f.fig.texts == [] and f.fig._suptitle is None  # no provenance inside the plot
    sd = f.data[(f.data["dataset"] == "gsm8k") & (f.data["method"] == "sd")]
    assert sd["verified"].tolist() == [True, True, True, True, False]
    assert [ln.get_xdata().tolist() for ln in axes[0].lines][0] == [1, 2, 3, 4]  # SD: 5 not drawn
    assert "(a) GSM8K, (b) MMLU, (c) HumanEval" in f.caption
    assert f.fig.get_figwidth() == style.WIDTH["double"]
    colors = {line.get_color() for line in axes[0].lines}
    assert colors == {style.COLORS[0], style.COLORS[1]}
    assert axes[0].xaxis.label.get_fontfamily()[0] == "serif"
    rates = f.data[(f.data["dataset"] == "gsm8k") & (f.data["method"] == "dropmatch")][
        "rate"
    ].tolist()
    assert rates == [1.0, 1.0, 0.5, 0.5, 0.0]  # rounds accepting 4 and 2 of 5


def test_reproduce_passes_only_the_profile():
    text = (REPO_ROOT / "reproduce.sh").read_text()
    assert '-m analysis.render "$name" --profile "$profile"' in text
    assert "--p-drop" not in text and "--backend" not in text


def _leet(run_dir) -> list[dict]:
    exe = sys.executable.rsplit("/", 1)[0] + "/wandb"
    out = subprocess.run(
        [exe, "leet", "inspect", "--json", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.subprocess
def test_wandb_offline_logs_every_table_and_figure(results, monkeypatch):
    pytest.importorskip("wandb")
    from analysis.render import render

    _table6_runs(results)
    monkeypatch.setenv("DROPMATCH_WANDB", "offline")
    render("table6", "default", echo=False)
    runs = sorted((results / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    names = {}
    for d in runs:
        for rec in _leet(d):
            if rec.get("type") == "artifact" and not rec["artifact"]["name"].startswith(
                "run-"
            ):  # not wandb.Table's
                a = rec["artifact"]
                names[a["name"]] = {c["path"] for c in a["manifest"]["contents"]}
    assert names == {
        "table6": {"table.csv"},
        "table6_per_position": {"table.csv", "table6_per_position.png", "table6_per_position.pdf"},
    }


def test_footer_names_the_metric_as_scored(results):
    """A footer says which metric the scorer recorded (and its note), not the one the artefact meant to use
    (seen: Table 1 said "EvalPlus pass@1" while HumanEval was scored by its original check())."""
    from analysis.render import render

    extra = {
        "quality/metric": "pass@1,check",
        "quality/note": "HumanEval+ data unavailable offline",
    }
    item_run(results, "sd", run_cfg("sd", "humaneval", L=5), [item_sample("h/0", [3], 5)], **extra)
    item_run(
        results,
        "dm",
        run_cfg("dropmatch", "humaneval", p_drop=0.3, L=5),
        [item_sample("h/0", [4], 5)],
        **extra,
    )
    render("table6", "default", echo=False)
    md = (results / "table6" / "table6.md").read_text()
    assert "quality metric (as scored): pass@1,check (2 runs)" in md
    assert "scorer note: HumanEval+ data unavailable offline" in md


def test_table6_other_p_k_tables_come_from_table6s_setting(results):
    """A further (p_drop, K) table is rendered only from DM runs at the first table's items and cap (seen: the
    sensitivity sweep's GSM8K runs, at another cap, rendered as Table 6 at p_drop 0.1, K=1)."""
    from analysis.render import render

    item_run(results, "sd", run_cfg("sd", "gsm8k", L=5), [item_sample("g/0", [3], 5)])
    item_run(
        results, "dm", run_cfg("dropmatch", "gsm8k", p_drop=0.3, L=5), [item_sample("g/0", [4], 5)]
    )
    same = run_cfg("dropmatch", "gsm8k", p_drop=0.5, K=5, L=5)
    item_run(results, "dm-same", same, [item_sample("g/0", [4], 5)])
    other = run_cfg("dropmatch", "gsm8k", p_drop=0.1, K=1, L=5)
    other["decoding"]["max_new_tokens"] = 128  # another artefact's cap
    item_run(results, "dm-other", other, [item_sample("g/0", [2], 5)])
    render("table6", "default", echo=False)
    names = sorted(p.name for p in (results / "table6").glob("*.md"))
    assert "table6_p0.5_K5.md" in names and not any("p0.1_K1" in n for n in names), names


def _tamper(run_dir, edit) -> None:
    """Rewrite the first line of a record's samples.jsonl with ``edit(line)`` (its summary left as written)."""
    path = run_dir / "samples.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    edit(lines[0])
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def _set(path: str, value):
    def edit(line):
        *parents, key = path.split(".")
        d = line
        for p in parents:
            d = d[p]
        d[key] = value

    return edit


@pytest.mark.parametrize(
    "edit, said",
    [
        # seen: tau = 25.75 rendered at L = 10
        (
            _set("spec.num_accepted_tokens", 99),
            "spec.num_accepted_tokens 99 > num_draft_tokens 10; "
            "allowed: 0 ≤ num_accepted_tokens ≤ num_draft_tokens",
        ),
        (
            _set("spec.num_draft_tokens", 11),
            "spec.num_draft_tokens 11 > num_drafts × L = 2 × 5; "
            "allowed: 0 ≤ num_draft_tokens ≤ num_drafts × L",
        ),
        (
            _set("spec.num_accepted_tokens_per_pos", [2, 2, 3, 0, 0]),
            "spec.num_accepted_tokens_per_pos[2] 3 with 2 rounds; "
            "allowed: 0 ≤ num_accepted_tokens_per_pos[2] ≤ num_accepted_tokens_per_pos[1] = 2 "
            "(prefix counts)",
        ),
        (_set("accepted_per_round", [3, 6]), "accepted_per_round[1] 6 with L = 5; allowed: 0 ≤"),
        # seen: a traceback from the paired accuracy statistic, rc 1
        (
            _set("quality.correct", 7),
            "quality.correct 7 is out of range; allowed: 0 or 1 (true/false; null or NaN: not scored)",
        ),
        # well-formed and in range, but the counters count more tokens than the output holds
        (
            _set("output_token_ids", [1] * 5),
            "spec.num_drafts + spec.num_accepted_tokens rounds 2 + accepted 7 != emitted 4; allowed: "
            "num_drafts + num_accepted_tokens = len(output_token_ids) - 1 + eos_removed",
        ),
    ],
    ids=["accepted>drafted", "drafted>rounds*L", "per_pos", "per_round", "correct", "identity"],
)
def test_render_refuses_an_impossible_sample(results, capsys, edit, said):
    """A well-formed line with an impossible value: exit 2, the file, sample, field and allowed range named
    (before: rendered as tau above L + 1, or a traceback with rc 1)."""
    from analysis.render import main

    _table6_runs(results)
    _tamper(results / "runs" / "dm0.3-default-hf", edit)
    assert main(["table6"]) == 2
    err = capsys.readouterr().err
    assert "[render] table6: record error: " in err and "Traceback" not in err
    assert f"dm0.3-default-hf/samples.jsonl (sample 'g/0'): {said}" in err
    assert not (results / "table6").exists()


@pytest.mark.parametrize(
    "key, value, said",
    [
        ("spec/mean_acceptance_length", 25.75, "25.75 is out of range; allowed: 1 ≤ τ ≤ L + 1 = 6"),
        ("quality/accuracy", 7.0, "7.0 is out of range; allowed: 0 ≤ score ≤ 1"),
        (
            "spec/counters",
            {
                "num_speculative_tokens": 5,
                "num_drafts": 2,
                "num_draft_tokens": 10,
                "num_accepted_tokens": 12,
                "num_accepted_tokens_per_pos": [2, 2, 2, 2, 2],
            },
            ".num_accepted_tokens 12 > num_draft_tokens 10",
        ),
    ],
    ids=["tau", "accuracy", "counters"],
)
def test_render_refuses_an_impossible_summary(results, capsys, key, value, said):
    """The summary's own numbers (what load_runs reads for every run) are held to the same ranges."""
    from analysis.render import main

    _table6_runs(results)
    path = results / "runs" / "dm0.3-default-hf" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: value}))
    assert main(["table6"]) == 2
    err = capsys.readouterr().err
    assert f"dm0.3-default-hf/summary.json: {key}" in err and said in err
    assert "[render] table6: record error: " in err and "Traceback" not in err


@pytest.mark.parametrize(
    "name, text, said",
    [
        ("summary.json", '{"bad', "summary.json: not readable as JSON ("),
        ("config.json", "[1, 2]", "config.json: not a JSON object"),
    ],
    ids=["torn-summary", "config-not-object"],
)
def test_render_refuses_a_record_file_that_is_not_json(results, capsys, name, text, said):
    """A torn or foreign ``summary.json`` / ``config.json`` (seen: a JSONDecodeError traceback, rc 1, which reads
    as "no runs"): exit 2, the file named, nothing written."""
    from analysis.render import main

    _table6_runs(results)
    (results / "runs" / "dm0.3-default-hf" / name).write_text(text)
    assert main(["table6"]) == 2
    err = capsys.readouterr().err
    assert "[render] table6: record error: " in err and "Traceback" not in err
    assert f"dm0.3-default-hf/{said}" in err
    assert not (results / "table6").exists()


@pytest.mark.parametrize(
    "flag, make, said",
    [
        (
            "--runs",
            lambda tmp: tmp / "nonexistent",
            "does not exist; allowed: an existing directory",
        ),
        ("--runs", lambda tmp: tmp / "afile", "is not a directory; allowed: an existing directory"),
        (
            "--out",
            lambda tmp: tmp / "afile",
            "is a file; allowed: a directory (created if missing)",
        ),
        ("--out", lambda tmp: tmp / "afile" / "sub", "(a parent of it) is a file; allowed:"),
    ],
    ids=["runs-missing", "runs-file", "out-file", "out-under-file"],
)
def test_render_refuses_unusable_runs_and_out_paths(results, tmp_path, capsys, flag, make, said):
    """Before: a traceback (--out naming a file, rc 1) or 'no complete runs' (--runs /nonexistent, rc 1)."""
    from analysis.render import main

    _table6_runs(results)
    (tmp_path / "afile").write_text("not a directory\n")
    path = make(tmp_path)
    assert main(["table6", flag, str(path)]) == 2
    err = capsys.readouterr().err
    assert f"[render] {flag} {path}" in err and said in err and "Traceback" not in err
    assert "no complete runs" not in err and not (results / "table6").exists()
    assert (tmp_path / "afile").read_text() == "not a directory\n"


def test_render_all_ends_with_the_artefacts_that_had_no_runs(results, capsys):
    """`all` keeps its exit policy (0: some were written) and closes with one line naming the others."""
    from analysis.render import main

    _table6_runs(results)
    assert main(["all"]) == 0
    last = capsys.readouterr().err.strip().splitlines()[-1]
    missing = [n for n in ARTEFACTS if not (results / n).exists()]
    assert "table6" not in missing and "table1" in missing
    assert last.endswith(
        f"[render] all: {len(missing)} of {len(ARTEFACTS)} artefacts had no runs (not written): "
        + ", ".join(missing)
    )


def test_no_runs_message_counts_the_incomplete_records_it_read(results, capsys):
    """Before: 'no complete runs ... among the 0 run records read' when the only run dir was an interrupted run
    (config and samples, no summary): the count left out the records it read without a summary."""
    from analysis.render import main

    d = item_run(
        results,
        "abc123",
        run_cfg("sd", "gsm8k", L=5, profile="smoke"),
        [item_sample("g/0", [3], 5)],
    )
    (d / "summary.json").unlink()  # interrupted before its summary was written
    assert main(["table6", "--profile", "smoke"]) == 1
    err = capsys.readouterr().err
    assert (
        "no complete runs for profile=smoke among 1 run record read (1 incomplete: abc123); "
        "run ./reproduce.sh table6 profile=smoke first" in err
    ), err
    # a summary saying complete: false is read (a row) and named as incomplete too
    item_run(
        results,
        "def456",
        run_cfg("sd", "gsm8k", L=5, profile="smoke"),
        [item_sample("g/0", [3], 5)],
        complete=False,
    )
    assert main(["table6", "--profile", "smoke"]) == 1
    assert "among 2 run records read (2 incomplete: abc123, def456)" in capsys.readouterr().err
    # a complete run outside the artefact's cells (another profile) is counted as such, not called incomplete
    item_run(results, "ghi789", run_cfg("sd", "gsm8k", L=5), [item_sample("g/0", [3], 5)])
    assert main(["table6", "--profile", "smoke"]) == 1
    assert (
        "among 3 run records read (2 incomplete: abc123, def456) (1 complete, none of them a cell of "
        "table6 for this profile: see select() in analysis.tables.table6)"
    ) in capsys.readouterr().err
