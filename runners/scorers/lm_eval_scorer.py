"""Scorers that grade with lm-evaluation-harness's own code: GSM8K, MMLU (generative), IFEval.

Paper: Table 6 (accuracy "via lm-evaluation-harness").

* ``lm_eval_gsm8k_cot_llama``: task ``gsm8k_cot_llama``; filters ``strict-match`` (regex
  ``The final answer is (-?[$0-9.,]{2,})|(-?[0-9]+)``) and ``flexible-extract`` (last number),
  metric ``exact_match`` (ignore case, strip ``,`` ``$`` ``.``$ and ``#### ``). Primary:
  ``exact_match,strict-match``.
* ``lm_eval_mmlu_generative``: tasks ``mmlu_*_generative``; filter ``get_response`` (first line,
  whitespace stripped), ``exact_match`` against the gold letter (ignore case and punctuation).
  Primary: ``exact_match,get_response``.
* ``lm_eval_ifeval``: ``lm_eval.tasks.ifeval.utils.process_results``; prompt- and instruction-level,
  strict and loose. Primary: ``prompt_level_strict_acc,none``. NLTK's Punkt data comes from
  :mod:`runners.scorers.nltk_punkt` (offline, pinned), never from ``nltk.download``.

Filters, metrics and their arguments are read from the installed lm-eval task YAMLs and run through
lm-eval's ``build_filter_ensemble`` / ``get_metric``: nothing is re-implemented. Each sample's
``reference`` must be the lm-eval doc (as the matching dataset builds it).
"""

from __future__ import annotations

import math
import random
from typing import Any

from runners.datasets.base import Sample
from runners.datasets.lm_eval_tasks import render, task_config
from runners.registry import SCORERS
from runners.scorers.base import as_text, check_aligned, mean, mean_stderr, summary

NON_KWARGS = ("metric", "aggregation", "higher_is_better", "hf_evaluate")


class LmEvalGenerateScorer:
    """Grades a ``generate_until`` lm-eval task through its ``filter_list`` and ``metric_list``.

    Per-sample keys: ``"<metric>,<filter>"`` (0.0/1.0) for every metric and filter,
    ``"filtered,<filter>"`` (the extracted answer), ``"target"`` (gold), ``"correct"`` (primary, 0/1).
    """

    task_yaml: str = ""
    metric: str = ""
    higher_is_better: bool = True

    def __init__(self) -> None:
        self._pipeline: tuple[list[Any], list[tuple[str, Any, dict[str, Any]]]] | None = None

    def _build(self) -> tuple[list[Any], list[tuple[str, Any, dict[str, Any]]]]:
        if self._pipeline is None:
            from lm_eval.api.registry import get_metric
            from lm_eval.filters import build_filter_ensemble

            cfg = task_config(self.task_yaml)
            ensembles = [build_filter_ensemble(f["name"], [[step["function"], {k: v for k, v in step.items()
                                                                                if k != "function"}]
                                                           for step in f["filter"]])
                         for f in cfg["filter_list"]]
            metrics = [(m["metric"], get_metric(m["metric"], bool(m.get("hf_evaluate"))),
                        {k: v for k, v in m.items() if k not in NON_KWARGS}) for m in cfg["metric_list"]]
            self._pipeline = (ensembles, metrics)
        return self._pipeline

    def _score_one(self, doc: dict[str, Any], output: str) -> dict[str, Any]:
        from lm_eval.api.instance import Instance

        ensembles, metrics = self._build()
        gold = render(task_config(self.task_yaml)["doc_to_target"], doc)
        inst = Instance(request_type="generate_until", doc=doc, arguments=("", {}), idx=0, resps=[output])
        out: dict[str, Any] = {"target": gold}
        for ens in ensembles:
            ens.apply([inst])
            result = inst.filtered_resps[ens.name]
            out[f"filtered,{ens.name}"] = result
            for name, fn, kwargs in metrics:
                value = fn(references=[type(result)(gold)], predictions=[result], **kwargs)
                out[f"{name},{ens.name}"] = float(value[name] if isinstance(value, dict) else value)
        return out

    def score(self, samples: list[Sample], outputs: list[str]) -> list[dict[str, Any]]:
        check_aligned(samples, outputs)
        results = []
        for sample, output in zip(samples, outputs):
            try:
                res = self._score_one(sample.reference, as_text(output))
                res["correct"] = int(res.get(self.metric, 0.0) > 0.0)
            except Exception as exc:  # malformed output or reference: score 0, never raise
                res = {"correct": 0, self.metric: 0.0, "error": f"{type(exc).__name__}: {exc}"}
            results.append(res)
        return results

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        agg = summary(self.metric, self.higher_is_better, per_sample)
        keys = sorted({k for r in per_sample for k, v in r.items()
                       if "," in k and not k.startswith("filtered,") and isinstance(v, float)})
        for key in keys:
            values = [float(r.get(key, 0.0)) for r in per_sample]
            name, _, filt = key.partition(",")
            agg[key] = mean(values)
            agg[f"{name}_stderr,{filt}"] = mean_stderr(values)
        return agg


@SCORERS.register("lm_eval_gsm8k_cot_llama")
class Gsm8kCotLlamaScorer(LmEvalGenerateScorer):
    """lm-eval ``gsm8k_cot_llama`` grading; primary ``exact_match,strict-match``."""

    task_yaml = "gsm8k/gsm8k-cot-llama.yaml"
    metric = "exact_match,strict-match"


@SCORERS.register("lm_eval_mmlu_generative")
class MmluGenerativeScorer(LmEvalGenerateScorer):
    """lm-eval ``mmlu_generative`` grading (same filters / metric for every subject)."""

    task_yaml = "mmlu/generative/_default_template_yaml"
    metric = "exact_match,get_response"


IFEVAL_METRICS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")


@SCORERS.register("lm_eval_ifeval")
class IfevalScorer:
    """lm-eval IFEval grading (``process_results`` / ``agg_inst_level_acc``).

    Args:
        punkt_pinned: pinned source of the Punkt model (default ``nltk_punkt.PUNKT_PINNED``).

    Per-sample keys: ``"<metric>,none"`` for the four IFEval metrics (prompt-level: bool;
    instruction-level: list of bools) and ``"correct"`` (prompt-level strict, 0/1).

    Determinism: an IFEval checker whose kwargs are invalid draws them from Python's ``random``
    (e.g. ``keywords:letter_frequency`` with ``letter: "#"``, key 1122), so lm-eval's own score of
    such an item depends on the global RNG state. We seed ``random`` with the item's key around each
    ``process_results`` call (and restore the caller's state), so a sample always gets the same score.
    """

    metric = "prompt_level_strict_acc,none"
    higher_is_better = True

    def __init__(self, punkt_pinned: dict[str, Any] | None = None) -> None:
        self.punkt_pinned = punkt_pinned
        self._utils: Any = None

    def _lm_eval_utils(self) -> Any:
        if self._utils is None:
            from runners.scorers.nltk_punkt import PUNKT_PINNED, ensure_punkt_tab

            ensure_punkt_tab(self.punkt_pinned or PUNKT_PINNED)  # before lm-eval looks for punkt_tab
            from lm_eval.tasks.ifeval import utils

            self._utils = utils
        return self._utils

    def score(self, samples: list[Sample], outputs: list[str]) -> list[dict[str, Any]]:
        check_aligned(samples, outputs)
        utils = self._lm_eval_utils()
        results = []
        for sample, output in zip(samples, outputs):
            n_inst = len((sample.reference or {}).get("instruction_id_list", []))
            state = random.getstate()
            try:
                random.seed(f"ifeval/{(sample.reference or {}).get('key')}")  # see class docstring
                raw = utils.process_results(sample.reference, [as_text(output)])
                res = {f"{m},none": (list(map(bool, raw[m])) if m.startswith("inst") else bool(raw[m]))
                       for m in IFEVAL_METRICS}
            except Exception as exc:  # malformed output or reference: score 0, never raise
                res = {f"{m},none": ([False] * n_inst if m.startswith("inst") else False) for m in IFEVAL_METRICS}
                res["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                random.setstate(state)
            res["correct"] = int(res[self.metric])
            results.append(res)
        return results

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        agg = summary(self.metric, self.higher_is_better, per_sample)
        for m in IFEVAL_METRICS:
            if m.startswith("inst"):
                flat = [float(x) for r in per_sample for x in r.get(f"{m},none", [])]
                agg[f"{m},none"] = mean(flat) if flat else math.nan
            else:
                values = [float(r.get(f"{m},none", False)) for r in per_sample]
                agg[f"{m},none"] = mean(values)
                agg[f"{m}_stderr,none"] = mean_stderr(values)
        return agg
