"""A HumanEval run in EvalPlus's own layouts: ``samples.jsonl`` (its input) and ``eval_results.json`` (its output).

``samples.jsonl`` holds ``{"task_id", "solution"}`` per problem (the sanitized code our scorer graded),
which ``evalplus.evaluate --dataset humaneval --samples <file>`` accepts as is (it needs all 164 problems).
``eval_results.json`` follows ``evalplus.evaluate``'s file (``date``, ``eval: {task_id: [{task_id, solution,
base_status, plus_status, base_fail_tests, plus_fail_tests}]}``, ``pass_at_k``) and is written only when
EvalPlus's evaluator graded the run (HumanEval+ present); a run graded by HumanEval's original check()
tests gets ``check_results.json`` instead, so no file claims to be EvalPlus's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.records.io import dumps

EVALPLUS_DIR = "evalplus"


def write_evalplus_files(
    run_dir: Path, records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]
) -> Path:
    """Write ``<run_dir>/evalplus/samples.jsonl`` plus the results file; return the samples path."""
    out_dir = Path(run_dir) / EVALPLUS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.iterdir():
        old.unlink()
    rows = []
    for rec in records:
        q, ref = rec.get("quality") or {}, rec.get("reference") or {}
        rows.append(
            {
                "task_id": ref.get("task_id", rec["sample_id"]),
                "solution": q.get("solution", ""),
                "base_status": q.get("status,base"),
                "plus_status": q.get("status,plus"),
                "check_status": q.get("status,check"),
            }
        )
    with open(out_dir / "samples.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(dumps({"task_id": r["task_id"], "solution": r["solution"]}) + "\n")
    evalplus_ran = any(r["base_status"] is not None for r in rows)
    if evalplus_ran:
        body = {
            "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "eval": {
                r["task_id"]: [
                    {
                        "task_id": r["task_id"],
                        "solution": r["solution"],
                        "base_status": r["base_status"],
                        "plus_status": r["plus_status"],
                        "base_fail_tests": [],
                        "plus_fail_tests": [],
                    }
                ]
                for r in rows
            },
            "pass_at_k": {
                "base": {"pass@1": summary.get("quality/pass@1,base")},
                "plus": {"pass@1": summary.get("quality/pass@1,plus")},
            },
        }
        (out_dir / "eval_results.json").write_text(dumps(body, indent=2))
    else:
        body = {
            "note": summary.get("quality/note"),
            "pass@1,check": summary.get("quality/pass@1,check"),
            "eval": {r["task_id"]: r["check_status"] for r in rows},
        }
        (out_dir / "check_results.json").write_text(dumps(body, indent=2))
    return out_dir / "samples.jsonl"
