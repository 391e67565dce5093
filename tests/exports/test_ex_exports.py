"""Exports and rescoring on a real (tiny-pair) run: lm-eval reads our results, rescoring is stable, Spec-Bench layout.

The run decodes 3 bundled GSM8K items with the tiny random pair (outputs are noise), then the test writes
known answers into the records (2 right, 1 wrong) and rescores, so every number checked below is a real
grade of real text by lm-eval's own task.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from runners.paths import REPO_ROOT


@pytest.fixture(scope="module")
def run_dir(tiny_pair_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import os

    from runners.run import run

    results = tmp_path_factory.mktemp("results")
    old = {k: os.environ.get(k) for k in ("DROPMATCH_RESULTS", "DROPMATCH_TINY_PAIR")}
    os.environ.update(DROPMATCH_RESULTS=str(results), DROPMATCH_TINY_PAIR=str(tiny_pair_dir))
    try:
        with initialize_config_dir(config_dir=str(REPO_ROOT / "conf"), version_base="1.3"):
            cfg = compose(
                "run",
                overrides=[
                    "pair=tiny",
                    "profile=smoke",
                    "dataset=gsm8k",
                    "dataset.limit=3",
                    "method=sd",
                    "L=3",
                    "progress=quiet",
                ],
            )
        summary = run(cfg, log=lambda *_: None)
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return results / "runs" / summary["run_id"]


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]


def results_json(run_dir: Path) -> dict[str, Any]:
    (path,) = sorted((run_dir / "lm_eval").glob("results_*.json"))
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def graded_run(run_dir: Path) -> Path:
    """The run with known outputs: items 0 and 1 answered right, item 2 wrong; then rescored."""
    from runners.rescore import _rewrite_jsonl, rescore_run

    recs = records(run_dir)
    for i, rec in enumerate(recs):
        gold = rec["reference"]["answer"].split("####")[-1].strip()
        rec["output_text"] = f"Some steps. The final answer is {gold if i < 2 else int(gold) + 1}"
    _rewrite_jsonl(run_dir / "samples.jsonl", recs)
    rescore_run(run_dir)
    return run_dir


def test_run_writes_every_export_and_the_prompt(run_dir: Path) -> None:
    recs = records(run_dir)
    assert len(recs) == 3
    for rec in recs:
        p = rec["prompt"]
        assert (
            p["text"].startswith("<|im_start|>user\nGiven the following problem")
            and p["num_tokens"] > 100
        )
        assert len(p["token_ids_sha256"]) == 64
    assert sorted(x.name for x in (run_dir / "lm_eval").iterdir())[0].startswith("results_")
    assert len(list((run_dir / "spec_bench").glob("*.jsonl"))) == 1


def test_lm_eval_reads_our_results(graded_run: Path) -> None:
    """lm-eval's own helpers find, parse and tabulate the files; the numbers are the rescored summary's."""
    import datasets
    from lm_eval.utils import (
        get_latest_filename,
        get_results_filenames,
        get_sample_results_filenames,
        make_table,
    )

    names = [str(p) for p in (graded_run / "lm_eval").iterdir()]
    results_file = get_latest_filename(get_results_filenames(names))
    (samples_file,) = get_sample_results_filenames(names)
    assert "gsm8k_cot_llama" in samples_file
    res = json.loads(Path(results_file).read_text())
    summary = json.loads((graded_run / "summary.json").read_text())
    ours = res["results"]["gsm8k_cot_llama"]
    assert summary["quality/comparable_metric"] == "exact_match,strict-match"
    assert (
        ours["exact_match,strict-match"]
        == pytest.approx(2 / 3)
        == summary["quality/exact_match,strict-match"]
    )
    assert ours["exact_match_stderr,strict-match"] == pytest.approx(
        summary["quality/exact_match_stderr,strict-match"]
    )
    # the cap the outputs were generated under (profile=smoke: 16 tokens), not the task's own
    assert res["configs"]["gsm8k_cot_llama"]["generation_kwargs"]["max_gen_toks"] == 16
    assert res["config"]["gen_kwargs"]["max_gen_toks"] == 16
    assert (
        res["n-shot"]["gsm8k_cot_llama"] == 8
        and res["higher_is_better"]["gsm8k_cot_llama"]["exact_match"]
    )
    from runners.datasets.lm_eval_tasks import load_tasks

    task = load_tasks({"gsm8k_cot_llama": [records(graded_run)[0]["reference"]]})["gsm8k_cot_llama"]
    assert (
        res["versions"]["gsm8k_cot_llama"] == task.VERSION
        and res["n-samples"]["gsm8k_cot_llama"]["effective"] == 3
    )
    assert res["config"]["model_args"]["pretrained"] == "tiny-random-qwen2-target"
    table = make_table(res)
    assert "gsm8k_cot_llama" in table and "0.6667" in table and "strict-match" in table
    rows = datasets.load_dataset("json", data_files=samples_file, split="train")
    assert len(rows) == 6  # 3 docs x 2 filters, as lm-eval logs them
    strict = [r for r in rows if r["filter"] == "strict-match"]
    assert sorted(r["exact_match"] for r in strict) == [0.0, 1.0, 1.0]
    recs = {r["reference"]["question"]: r for r in records(graded_run)}
    for r in strict:  # lm-eval's logged prompt is the one the run recorded; its response our output
        rec = recs[r["doc"]["question"]]
        assert r["arguments"]["gen_args_0"]["arg_0"] == rec["prompt"]["text"]
        assert r["resps"] == [[rec["output_text"]]]


def test_rescore_is_stable_when_nothing_changed(graded_run: Path) -> None:
    from runners.rescore import rescore_run

    before_summary = json.loads((graded_run / "summary.json").read_text())
    before = [r["quality"] for r in records(graded_run)]
    after_summary = rescore_run(graded_run)
    assert [r["quality"] for r in records(graded_run)] == before
    q = lambda s: {k: v for k, v in s.items() if k.startswith("quality/")}  # noqa: E731
    assert q(after_summary) == q(before_summary)
    assert after_summary["quality/scorer_versions"]["lm_eval"] == "0.4.13"
    assert after_summary["speed/wall_s"] == before_summary["speed/wall_s"]  # speed fields untouched
    assert [r["correct"] for r in before] == [1, 1, 0]


def test_spec_bench_answer_file(run_dir: Path) -> None:
    (path,) = (run_dir / "spec_bench").glob("*.jsonl")
    answers = [json.loads(x) for x in path.read_text().splitlines()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert path.name == "tiny-random-qwen2-target-sd-L3-float32-temperature-0.0.jsonl"
    assert len(answers) == 3 and all(len(a["choices"]) == 1 for a in answers)
    lengths = [x for a in answers for x in a["choices"][0]["accept_lengths"]]
    assert sum(lengths) / len(lengths) == pytest.approx(summary["spec/mean_acceptance_length"])
    assert (
        sum(a["choices"][0]["new_tokens"][0] for a in answers) == summary["speed/num_output_tokens"]
    )
    assert (
        sum(a["choices"][0]["decoding_steps"][0] for a in answers)
        == summary["spec/counters"]["num_drafts"]
    )
    assert {a["category"] for a in answers} == {"gsm8k"}


def test_run_killed_during_its_exports_resumes_to_write_them(
    tiny_pair_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed while its exports were written had its summary already: the rerun skipped it as finished and
    the exports stayed missing. The summary now comes after them: the killed run is unfinished, and the rerun
    writes the exports and the summary without decoding again."""
    import runners.run as run_module
    from runners.config.overrides import compose_run

    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path))
    monkeypatch.setenv("DROPMATCH_TINY_PAIR", str(tiny_pair_dir))
    cfg = compose_run(
        ["pair=tiny", "profile=smoke", "dataset=gsm8k", "dataset.limit=2", "method=sd", "L=3"]
        + ["progress=quiet"]
    )
    real = run_module.write_exports

    def killed(*args, **kwargs):
        real(
            *args, **kwargs
        )  # the Spec-Bench file and lm-eval's are written, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "write_exports", killed)
    with pytest.raises(KeyboardInterrupt):
        run_module.run(cfg, log=lambda *_: None)
    (rdir,) = (tmp_path / "runs").iterdir()
    assert not (rdir / "summary.json").exists()
    lines = (rdir / "samples.jsonl").read_text()
    assert len(lines.splitlines()) == 2
    for f in [*rdir.glob("lm_eval/*"), *rdir.glob("spec_bench/*")]:
        f.unlink()

    monkeypatch.setattr(run_module, "write_exports", real)
    monkeypatch.setattr(run_module, "load_pair", lambda *a, **k: pytest.fail("decoded again"))
    summary = run_module.run(cfg, log=lambda *_: None)
    assert summary["complete"] is True and summary["num_samples"] == 2
    assert (rdir / "samples.jsonl").read_text() == lines
    (results,) = rdir.glob("lm_eval/results_*.json")
    assert (
        "json-messages" not in results.read_text()
    )  # the prompts rendered by the target's tokenizer, as a run does
    assert len(list(rdir.glob("spec_bench/*.jsonl"))) == 1
    assert json.loads((rdir / "summary.json").read_text())["complete"] is True


def test_changed_prompt_is_detected(run_dir: Path, tmp_path: Path, tiny_pair_dir: Path) -> None:
    """Outputs that answered another prompt are not rescored as if they answered lm-eval's current one."""
    import shutil

    from transformers import AutoTokenizer

    from runners.exports import write_exports
    from runners.exports.lm_eval_results import PromptMismatchError
    from runners.rescore import _rewrite_jsonl

    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    tok = AutoTokenizer.from_pretrained(tiny_pair_dir / "target")
    write_exports(copy, tokenizer=tok)  # recorded prompts == lm-eval's: fine
    recs = records(copy)
    recs[1]["prompt"]["text"] = recs[1]["prompt"]["text"].replace(
        "Given the following", "Consider the following"
    )
    _rewrite_jsonl(copy / "samples.jsonl", recs)
    with pytest.raises(PromptMismatchError):
        write_exports(copy, tokenizer=tok)


def test_rescore_cli_selectors(run_dir: Path) -> None:
    from runners.rescore import main, select_runs

    root = run_dir.parent
    assert select_runs([run_dir.name], root) == [run_dir] == select_runs([str(run_dir)], root)
    with pytest.raises(LookupError):
        select_runs(["no_such_run"], root)
    assert main(["no_such_run_or_artefact"]) == 2
