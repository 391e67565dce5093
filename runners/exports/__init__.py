"""Run records in formats other tools read: lm-eval results + samples, a Spec-Bench answer file, EvalPlus files.

``write_exports(run_dir)`` writes, next to ``config.json`` / ``samples.jsonl`` / ``summary.json``:

* ``lm_eval/results_<date>.json`` + ``lm_eval/samples_<task>_<date>.jsonl`` for GSM8K / MMLU / IFEval /
  EAGLE-GSM8K runs (:mod:`runners.exports.lm_eval_results`, written by lm-eval's own evaluator and tracker);
* ``spec_bench/<model_id>.jsonl`` for every run (:mod:`runners.exports.spec_bench`);
* ``evalplus/samples.jsonl`` + EvalPlus's results file for HumanEval runs (:mod:`runners.exports.evalplus_samples`).

They are derived files: ``./reproduce.sh rescore <run>`` (:mod:`runners.rescore`) rewrites them from the records.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import runners.datasets  # noqa: F401  (registration)
import runners.scorers  # noqa: F401
from runners.datasets.base import Sample
from runners.exports.evalplus_samples import write_evalplus_files
from runners.exports.lm_eval_results import write_lm_eval_results
from runners.exports.spec_bench import write_spec_bench_answers
from runners.models.sources import resolve_model_dir
from runners.records.record import read_samples
from runners.registry import DATASETS, SCORERS, build

logger = logging.getLogger(__name__)


def read_run(run_dir: Path) -> tuple[dict, list[dict], dict]:
    """``(config, sample records in file order, summary or {})`` of a run directory."""

    run_dir = Path(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return config, read_samples(run_dir / "samples.jsonl"), summary


def dataset_samples(config: dict) -> tuple[Any, list[Sample]]:
    """The run's dataset, rebuilt from its config, and its samples (prompts as the installed lm-eval builds them)."""

    dataset = build(DATASETS, config["dataset"])
    return dataset, dataset.load()


def target_tokenizer(config: dict) -> Any:
    """The run's target tokenizer (lets the lm-eval export render and check the real prompts), or None."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            resolve_model_dir(config["pair"]["target"], log=logger.info)
        )
    except Exception as e:  # model source gone: export with JSON-rendered prompts, unchecked
        logger.warning(
            "no target tokenizer for %s (%s: %s); prompts in the lm-eval export are JSON messages",
            config.get("pair", {}).get("name"),
            type(e).__name__,
            e,
        )
        return None


def write_exports(
    run_dir: Path,
    samples: Sequence[Sample] | None = None,
    tokenizer: Any = None,
    summary: dict | None = None,
) -> dict[str, str]:
    """Write every export that applies to the run; return ``{kind: path}``.

    Args:
        samples: the run's dataset samples (rebuilt from ``config.json`` when None).
        tokenizer: the target tokenizer (lets the lm-eval export render and check the real prompts).
        summary: the run's summary (read from ``summary.json`` when None: a run writes its exports before it).

    Raises:
        runners.exports.lm_eval_results.PromptMismatchError: lm-eval now builds another prompt.
    """

    run_dir = Path(run_dir)
    config, records, stored = read_run(run_dir)
    summary = stored if summary is None else summary
    paths = {"spec_bench": str(write_spec_bench_answers(run_dir, records, config))}
    if samples is None:
        _, samples = dataset_samples(config)
    by_id = {r["sample_id"]: r for r in records}
    if (
        any((s.meta or {}).get("lm_eval_task") for s in samples)
        or config["dataset"].get("scorer") == "eagle_gsm8k_exact_match"
    ):
        samples = [_with_task(s, config) for s in samples]
        paths["lm_eval"] = str(write_lm_eval_results(run_dir, samples, by_id, config, tokenizer))
    if config["dataset"].get("scorer") == "evalplus_humaneval":
        paths["evalplus"] = str(
            write_evalplus_files(
                run_dir,
                [r for r in records if r["sample_id"] in {s.sample_id for s in samples}],
                summary,
            )
        )
    logger.info("exports of %s: %s", run_dir.name, paths)
    return paths


def _with_task(sample: Sample, config: dict) -> Sample:
    """EAGLE's GSM8K set is graded by lm-eval's ``gsm8k`` task: name it so the lm-eval export covers it."""
    if (sample.meta or {}).get("lm_eval_task"):
        return sample

    task = getattr(SCORERS.get(config["dataset"]["scorer"]), "task_name", "")
    return Sample(
        sample.sample_id,
        sample.messages,
        sample.reference,
        {**(sample.meta or {}), "lm_eval_task": task},
    )
