"""HumanEval pass@1 with EvalPlus: sanitizer, sandbox and (when available) HumanEval+ tests.

Paper: Table 1, Table 6 (HumanEval pass@1 via EvalPlus).

Generated code never runs in the harness process: :meth:`EvalplusScorer.score` writes the outputs to
a temporary file and runs ``evalplus_worker.py`` in a fresh Python (see its docstring for the
sandbox: EvalPlus's ``reliability_guard`` memory limit, time limits, forked children).

Metrics (per sample, then means):
    ``pass@1,base``: the solution (EvalPlus ``sanitize``) passes HumanEval's original
        ``check(candidate)`` tests. Always available offline. Primary (``correct``).
    ``pass@1,plus``: passes EvalPlus's base *and* plus inputs (``evalplus.evaluate.check_correctness``),
        only when the HumanEval+ file is available: ``HUMANEVAL_OVERRIDE_PATH`` or EvalPlus's cache
        (``plus="auto"``), or downloaded by EvalPlus when online (``plus=True``).
With one greedy sample per problem pass@1 is the fraction passed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from runners.datasets.base import Sample
from runners.registry import SCORERS
from runners.scorers.base import as_text, check_aligned, mean, mean_stderr, summary

WORKER = Path(__file__).with_name("evalplus_worker.py")
PLUS_MODES = ("auto", True, False)


@SCORERS.register("evalplus_humaneval")
class EvalplusScorer:
    """EvalPlus grading of HumanEval outputs.

    Args:
        base_timeout_s: wall limit of one problem's original ``check()`` run, seconds.
        plus: ``"auto"`` (HumanEval+ if its file is on disk), ``True`` (required; EvalPlus may
            download it), ``False`` (base only).
        n_workers: parallel sandboxes (default: half the CPUs, as ``evalplus.evaluate``).
        worker_timeout_s: limit for the whole worker run (``None``: derived from the job count).

    Per-sample keys: ``correct``, ``pass@1,base``, ``status,base`` (``pass``/``fail``/``timeout``),
    ``solution`` (sanitized code), ``error`` (if any); with HumanEval+: ``pass@1,plus``,
    ``status,plus``, ``status,evalplus_base``.
    """

    metric = "pass@1,base"
    higher_is_better = True

    def __init__(self, base_timeout_s: float = 10.0, plus: Any = "auto", n_workers: int | None = None,
                 worker_timeout_s: float | None = None) -> None:
        if plus not in PLUS_MODES:
            raise ValueError(f"scorer.plus={plus!r} unknown; allowed: auto, true, false")
        self.base_timeout_s = float(base_timeout_s)
        self.plus = plus
        self.n_workers = int(n_workers or max(1, (os.cpu_count() or 2) // 2))
        self.worker_timeout_s = worker_timeout_s
        self.plus_available: bool | None = None
        self.plus_error: str | None = None

    def _run_worker(self, jobs: list[dict[str, Any]]) -> dict[str, Any]:
        settings = {"base_timeout_s": self.base_timeout_s, "n_workers": self.n_workers, "plus": self.plus}
        limit = self.worker_timeout_s or 300 + len(jobs) * (self.base_timeout_s + 70) / self.n_workers
        with tempfile.TemporaryDirectory(prefix="evalplus-") as tmp:
            in_path, out_path = Path(tmp) / "jobs.json", Path(tmp) / "results.json"
            in_path.write_text(json.dumps({"jobs": jobs, "settings": settings}), encoding="utf-8")
            proc = subprocess.run([sys.executable, str(WORKER), str(in_path), str(out_path)], cwd=tmp,
                                  capture_output=True, text=True, timeout=limit)
            if proc.returncode != 0 or not out_path.exists():
                raise RuntimeError(f"EvalPlus worker failed (rc={proc.returncode}): {proc.stderr.strip()[-3000:]}")
            return json.loads(out_path.read_text(encoding="utf-8"))

    def score(self, samples: list[Sample], outputs: list[str]) -> list[dict[str, Any]]:
        check_aligned(samples, outputs)
        jobs = [{"id": i, "task_id": s.reference["task_id"], "entry_point": s.reference["entry_point"],
                 "test": s.reference["test"], "output": as_text(o)} for i, (s, o) in enumerate(zip(samples, outputs))]
        if not jobs:
            return []
        report = self._run_worker(jobs)
        self.plus_available, self.plus_error = report["plus_available"], report["plus_error"]
        by_id = {r["id"]: r for r in report["results"]}
        results = []
        for job in jobs:
            r = by_id.get(job["id"], {"status_base": "fail", "error": "no result from worker", "solution": ""})
            res: dict[str, Any] = {"status,base": r["status_base"], "pass@1,base": float(r["status_base"] == "pass"),
                                   "solution": r.get("solution", "")}
            if "status_plus" in r:
                res["status,evalplus_base"], res["status,plus"] = r["status_evalplus_base"], r["status_plus"]
                res["pass@1,plus"] = float(r["status_evalplus_base"] == "pass" and r["status_plus"] == "pass")
            if r.get("error"):
                res["error"] = r["error"]
            res["correct"] = int(res[self.metric] > 0)
            results.append(res)
        return results

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        agg = summary(self.metric, self.higher_is_better, per_sample)
        for key in ("pass@1,base", "pass@1,plus"):
            values = [float(r[key]) for r in per_sample if key in r]
            if values and len(values) == len(per_sample):
                agg[key] = mean(values)
                agg[f"{key.split(',')[0]}_stderr,{key.split(',')[1]}"] = mean_stderr(values)
        agg["num_timeout,base"] = sum(r.get("status,base") == "timeout" for r in per_sample)
        return agg
