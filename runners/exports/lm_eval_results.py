"""A run's outputs as lm-evaluation-harness results: ``results_<date>.json`` + ``samples_<task>_<date>.jsonl``.

Written by lm-eval itself, so any lm-eval tooling reads them (``lm_eval.utils.make_table``, the
``get_results_filenames`` / ``get_sample_results_filenames`` helpers, ``datasets.load_dataset("json")``
on the samples): ``lm_eval.simple_evaluate`` runs the run's lm-eval tasks (our docs, via
:func:`runners.datasets.lm_eval_tasks.load_tasks`) against :class:`ReplayLM`, an ``lm_eval.api.model.LM``
that answers each request with the output this run generated, and ``lm_eval.loggers.EvaluationTracker``
writes the files exactly as ``lm_eval --output_path <dir>/results.json --log_samples`` does (results /
groups / configs / versions / n-shot / higher_is_better / n-samples / config / task_hashes ...).

Requests are matched to outputs by ``(task name, doc index)``. When the target tokenizer is given, the
replayed model renders contexts with its chat template exactly as lm-eval's HFLM does, and each context
lm-eval builds is checked against the prompt the run recorded (``record["prompt"]["text"]``): a different
prompt (another lm-eval version or task config) raises :class:`PromptMismatchError` instead of scoring
outputs that answered another prompt.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.datasets.base import Sample
from runners.datasets.lm_eval_tasks import LM_EVAL_VERSION, load_tasks, task_manager
from runners.sweep.console import to_stderr

logger = logging.getLogger(__name__)

LM_EVAL_DIR = "lm_eval"
LM_EVAL_LOGGERS = (
    "lm_eval",
    "lm-eval",
)  # lm-eval's loggers (modules' __name__, and its "lm-eval" one)
# lm-eval group whose aggregate_metric_list a multi-task dataset reports under (MMLU's 57 subjects)
PARENT_GROUPS = {"mmlu_llama_": "mmlu_llama", "mmlu_": "mmlu_generative"}


class PromptMismatchError(RuntimeError):
    """lm-eval now builds a different prompt than the one the stored output answered."""


def replay_lm(
    outputs: Mapping[tuple[str, int], str],
    tokenizer: Any = None,
    prompts: Mapping[tuple[str, int], str] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> Any:
    """An ``lm_eval.api.model.LM`` that replays stored generations.

    Args:
        outputs: ``{(task name, doc index): generated text}``.
        tokenizer: the target tokenizer (renders contexts as HFLM does); ``None`` renders the chat
            messages as JSON.
        prompts: ``{(task name, doc index): recorded prompt text}`` to check each context against.
        chat_template_kwargs: the pair's chat-template options (``pair.chat_template_kwargs``), as the run used.
    """
    from lm_eval.api.model import LM

    class ReplayLM(LM):
        def __init__(self) -> None:
            super().__init__()
            self.tokenizer = tokenizer

        def generate_until(self, requests: list[Any]) -> list[str]:
            out = []
            for r in requests:
                key = (r.task_name, r.doc_id)
                want = (prompts or {}).get(key)
                if tokenizer is not None and want is not None and r.args[0] != want:
                    raise PromptMismatchError(
                        f"{key}: lm-eval's prompt differs from the recorded one "
                        f"(recorded {len(want)} chars, now {len(r.args[0])})"
                    )
                out.append(outputs[key])
            return out

        def loglikelihood(self, requests: list[Any]) -> list[Any]:
            raise NotImplementedError("replayed runs are generate_until only")

        loglikelihood_rolling = loglikelihood

        def apply_chat_template(
            self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
        ) -> str:
            if tokenizer is None:
                return json.dumps(chat_history, ensure_ascii=False)
            return tokenizer.apply_chat_template(
                chat_history,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=not add_generation_prompt,
                **dict(chat_template_kwargs or {}),
            )

        @property
        def tokenizer_name(self) -> str:
            return str(getattr(tokenizer, "name_or_path", "replay")).replace("/", "__")

        def chat_template(self, chat_template: bool | str = False) -> str:
            return str(getattr(tokenizer, "chat_template", None) or "json-messages")

    return ReplayLM()


def _parent_group(task_names: Sequence[str]) -> dict[str, Any] | None:
    """``GroupConfig`` fields of the registered parent group (MMLU: its name, alias, aggregate_metric_list,
    metadata), else None."""
    if len(task_names) < 2:
        return None

    for prefix, parent in PARENT_GROUPS.items():
        if all(t.startswith(prefix) for t in task_names):
            entry = task_manager().task_index.get(parent)
            cfg = dict(entry.cfg or {}) if entry else {}
            return {
                "group": parent,
                "aggregate_metric_list": cfg.get("aggregate_metric_list")
                or [{"metric": "exact_match", "aggregation": "mean", "weight_by_size": True}],
                "metadata": cfg.get("metadata") or {},
            }
    return None


def write_lm_eval_results(
    run_dir: Path,
    samples: Sequence[Sample],
    records: Mapping[str, Mapping[str, Any]],
    config: Mapping[str, Any],
    tokenizer: Any = None,
) -> Path:
    """Write ``<run_dir>/lm_eval/results_<date>.json`` and ``samples_<task>_<date>.jsonl`` (old ones removed).

    Args:
        samples: the dataset's samples (``meta["lm_eval_task"]`` set) in canonical order.
        records: ``{sample_id: run record}`` (``output_text``, ``prompt``); samples without one are skipped.
        config: the run's resolved config (``config.json``): model, method and decoding go to ``config``.
        tokenizer: target tokenizer, or None (see :func:`replay_lm`).

    Returns:
        The results JSON path.

    Raises:
        PromptMismatchError: lm-eval now builds another prompt than a recorded one.
        ValueError: no sample has an lm-eval task.
    """
    import lm_eval
    from lm_eval.loggers import EvaluationTracker

    by_task, outputs, prompts = _replayed(samples, records)
    specs = _task_specs(by_task, config)
    out_dir = Path(run_dir) / LM_EVAL_DIR
    if out_dir.exists():
        shutil.rmtree(out_dir)
    pair, method = config.get("pair") or {}, config.get("method") or {}
    model_args = {
        "pretrained": (pair.get("target") or {}).get("name"),
        "draft": (pair.get("draft") or {}).get("name"),
        "dtype": pair.get("dtype"),
        "method": method.get("name"),
        "L": config.get("L"),
        "dropmatch": config.get("dropmatch"),
        "run_id": config.get("run_id") or Path(run_dir).name,
    }
    tracker = EvaluationTracker(output_path=str(out_dir / "results.json"))
    with to_stderr(*LM_EVAL_LOGGERS):  # its progress lines and prints: stdout stays the run's own
        results = lm_eval.simple_evaluate(
            model=replay_lm(
                outputs, tokenizer, prompts, (config.get("pair") or {}).get("chat_template_kwargs")
            ),
            model_args=model_args,
            tasks=specs,
            task_manager=task_manager(),
            apply_chat_template=True,
            fewshot_as_multiturn=True,
            log_samples=True,
            evaluation_tracker=tracker,
            gen_kwargs=None,
            bootstrap_iters=100000,
        )
        if results is None:
            raise RuntimeError("lm_eval.simple_evaluate returned no results")
        cap = config.get("decoding", {}).get("max_new_tokens")
        results["config"]["gen_kwargs"] = {
            "max_gen_toks": cap,
            "temperature": config.get("decoding", {}).get("temperature"),
        }
        # the task config lm-eval writes holds the task's own cap; the outputs were generated under the run's
        for task_config in results["configs"].values():
            if cap is not None and isinstance(task_config.get("generation_kwargs"), dict):
                task_config["generation_kwargs"]["max_gen_toks"] = int(cap)
        results["dropmatch"] = {
            "run_id": model_args["run_id"],
            "lm_eval_version_tested": LM_EVAL_VERSION,
            "note": "outputs generated by dropmatch-bench and replayed through lm-eval's evaluator",
        }
        logged = results.pop("samples")
        tracker.save_results_aggregated(results=results, samples=logged)
        for task_name in results["configs"]:
            tracker.save_results_samples(task_name=task_name, samples=logged[task_name])
    found = sorted(out_dir.glob("results_*.json"))
    if not found:
        raise RuntimeError(f"EvaluationTracker wrote no results file under {out_dir}")
    return found[-1]


def _replayed(
    samples: Sequence[Sample], records: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, list[Sample]], dict, dict]:
    """The recorded samples by lm-eval task, and their outputs and prompt texts keyed ``(task, index)``.

    Raises:
        ValueError: no sample has an lm-eval task.
    """
    by_task: dict[str, list[Sample]] = {}
    for s in samples:
        if s.sample_id in records and (s.meta or {}).get("lm_eval_task"):
            by_task.setdefault(s.meta["lm_eval_task"], []).append(s)
    if not by_task:
        raise ValueError("no sample of this run has an lm-eval task (meta['lm_eval_task'])")
    outputs, prompts = {}, {}
    for name, group in by_task.items():
        for i, s in enumerate(group):
            rec = records[s.sample_id]
            outputs[(name, i)] = str(rec.get("output_text") or "")
            if (rec.get("prompt") or {}).get("text"):
                prompts[(name, i)] = rec["prompt"]["text"]
    return by_task, outputs, prompts


def _task_specs(by_task: Mapping[str, list[Sample]], config: Mapping[str, Any]) -> list[Any]:
    """lm-eval tasks over the recorded docs; MMLU's subject tasks under their registered group (its
    size-weighted aggregation)."""
    from lm_eval.api.group import Group

    overrides = (
        {"num_fewshot": int(config["dataset"]["num_fewshot"])}
        if config["dataset"].get("num_fewshot") is not None
        else {}
    )
    docs = {name: [dict(s.reference) for s in group] for name, group in by_task.items()}
    tasks = load_tasks(docs, overrides)
    parent = _parent_group(list(by_task))
    specs: list[Any] = list(tasks.values())
    if parent:
        group = Group.from_config(parent)
        for task in specs:
            group.add(task)
        specs = [group]
    return specs
