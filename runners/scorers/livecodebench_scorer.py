"""LiveCodeBench pass@1: the benchmark harness's grading, executed in the project's sandbox.

Paper: DropMatch Table 9 (LiveCodeBench pass@1); Jain et al. 2024. Generated code never runs in the harness
process: :meth:`LiveCodeBenchScorer.score` writes the jobs to a temporary file and runs
``livecodebench_worker.py`` in a fresh Python (see its docstring: EvalPlus's guards, forked children, limits;
grading rules of ``lcb_runner/evaluation/testing_util.py``). With one greedy sample pass@1 is the share passed.

Per-sample keys: ``correct`` (0/1), ``pass@1`` (0.0/1.0), ``status`` (pass / fail / timeout), ``code``.
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
from runners.scorers.base import as_text, check_aligned, summary

WORKER = Path(__file__).with_name("livecodebench_worker.py")


@SCORERS.register("livecodebench")
class LiveCodeBenchScorer:
    """Grades LiveCodeBench answers (all public + private tests must pass).

    Args:
        timeout_s: limit per test case, seconds (the harness's default 6).
        n_workers: parallel sandboxes (default: half the CPUs).
    """

    metric = "pass@1"
    higher_is_better = True

    def __init__(self, timeout_s: float = 6.0, n_workers: int | None = None) -> None:
        self.timeout_s = float(timeout_s)
        self.n_workers = int(n_workers or max(1, (os.cpu_count() or 2) // 2))

    def score(self, samples: list[Sample], outputs: list[str]) -> list[dict[str, Any]]:
        check_aligned(samples, outputs)
        jobs = [
            {
                "id": i,
                "output": as_text(o),
                "fn_name": s.reference.get("fn_name"),
                "inputs": s.reference["inputs"],
                "outputs": s.reference["outputs"],
            }
            for i, (s, o) in enumerate(zip(samples, outputs))
        ]
        if not jobs:
            return []
        limit = (
            120 + sum(self.timeout_s * (len(j["inputs"]) + 1) + 5 for j in jobs) / self.n_workers
        )
        with tempfile.TemporaryDirectory(prefix="lcb-") as tmp:
            in_path, out_path = Path(tmp) / "jobs.json", Path(tmp) / "results.json"
            in_path.write_text(
                json.dumps(
                    {
                        "jobs": jobs,
                        "settings": {"timeout_s": self.timeout_s, "n_workers": self.n_workers},
                    }
                )
            )
            proc = subprocess.run(
                [sys.executable, str(WORKER), str(in_path), str(out_path)],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=limit,
            )
            if proc.returncode != 0 or not out_path.exists():
                raise RuntimeError(
                    f"LiveCodeBench worker failed (rc={proc.returncode}): {proc.stderr.strip()[-3000:]}"
                )
            by_id = {r["id"]: r for r in json.loads(out_path.read_text())["results"]}
        out = []
        for job in jobs:
            r = by_id.get(job["id"], {"status": "fail", "code": ""})
            out.append(
                {
                    "correct": int(r["status"] == "pass"),
                    "pass@1": float(r["status"] == "pass"),
                    "status": r["status"],
                    "code": r.get("code", ""),
                }
            )
        return out

    def aggregate(self, per_sample: list[dict[str, Any]]) -> dict[str, Any]:
        agg = summary(self.metric, self.higher_is_better, per_sample)
        agg["num_timeout"] = sum(r.get("status") == "timeout" for r in per_sample)
        return agg
