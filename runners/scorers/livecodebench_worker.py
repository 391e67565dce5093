"""LiveCodeBench sandbox worker: extracts and executes generated programs outside the harness.

Run as a script by :mod:`runners.scorers.livecodebench_scorer` (``python livecodebench_worker.py IN.json OUT.json``)
in a fresh interpreter (standard library + EvalPlus's guards, never torch). Each job runs in a forked child
under EvalPlus's ``reliability_guard`` (memory limit, destructive os / shutil / subprocess calls disabled) and
``create_tempdir``, as the project's HumanEval sandbox (``evalplus_worker.py``); the child is killed when it
outlives its limit.

Grading follows LiveCodeBench's harness (``lcb_runner/evaluation/testing_util.py``), re-implemented here:
the code is the last fenced block of the answer; every test runs with a per-test time limit (6 s); the answer
passes iff every test passes (pass@1 with one greedy sample).
* call-based (``fn_name`` set, LeetCode): the program is prefixed with the harness's star imports, ``Solution()``
  is built when the code defines it, each input line is a JSON argument, the result (a tuple read as a list)
  must equal the JSON output;
* stdin: the program runs as one function body with the test input on stdin; stdout and the expected output are
  compared line by line after stripping, exactly or, failing that, as whitespace-separated decimals.

Job: ``{"id", "output", "fn_name", "inputs", "outputs"}``; settings: ``timeout_s``, ``n_workers``.
Result: ``{"id", "code", "status": "pass" | "fail" | "timeout", "error"?}``.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

IMPORTS = (
    "string",
    "re",
    "datetime",
    "collections",
    "heapq",
    "bisect",
    "copy",
    "math",
    "random",
    "statistics",
    "itertools",
    "functools",
    "operator",
    "io",
    "sys",
    "json",
)
PRELUDE = (
    "".join(f"from {m} import *\n" for m in IMPORTS + ("builtins", "typing"))
    + "".join(f"import {m}\n" for m in IMPORTS)
    + "sys.setrecursionlimit(50000)\n"
)
_PASS, _FAIL, _TIMEOUT, _UNKNOWN = 0, 1, 2, 3


def extract_code(answer: str) -> str:
    """The last fenced code block (between the last two lines that start with three backticks); '' if none."""
    lines = answer.split("\n")
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    return "\n".join(lines[fences[-2] + 1 : fences[-1]]) if len(fences) >= 2 else ""


def as_function(code: str) -> str:
    """Stdin programs: drop a trailing ``if __name__ == '__main__':`` guard, put the body in ``wrapped_function``."""
    import ast

    try:
        tree = ast.parse(code)
        body = list(tree.body)
        if (
            body
            and isinstance(body[-1], ast.If)
            and ast.unparse(body[-1].test).strip() == "__name__ == '__main__'"
        ):
            body = body[:-1] + list(body[-1].body)
        imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
        rest = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))] or [ast.Pass()]
        fn = ast.FunctionDef(
            name="wrapped_function",
            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=rest,
            decorator_list=[],
            lineno=1,
        )
        return PRELUDE + "\n" + ast.unparse(ast.Module(body=imports + [fn], type_ignores=[]))
    except Exception:
        return code


def lines_equal(got: str, want: str) -> bool:
    from decimal import Decimal, InvalidOperation

    a, b = (
        [x.strip() for x in got.strip().split("\n")],
        [x.strip() for x in want.strip().split("\n")],
    )
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            if [Decimal(t) for t in x.split()] != [Decimal(t) for t in y.split()]:
                return False
        except InvalidOperation:
            return False
    return True


def run_tests(job: dict[str, Any], timeout_s: float) -> int:
    """Inside the guarded child: run every test; ``_PASS``, ``_FAIL`` or ``_TIMEOUT``."""
    import io
    import types
    from unittest import mock

    from evalplus.eval.utils import TimeoutException, time_limit

    code = extract_code(job["output"] or "")
    if not code.strip():
        return _FAIL
    try:
        module = types.ModuleType("solution")
        if job.get("fn_name"):
            with time_limit(timeout_s):
                exec(PRELUDE + "\n" + code, module.__dict__)
            target = module.__dict__["Solution"]() if "class Solution" in code else module
            method = getattr(target, job["fn_name"])
            for inp, out in zip(job["inputs"], job["outputs"]):
                args = [json.loads(line) for line in inp.split("\n")]
                with time_limit(timeout_s):
                    got = method(*args)
                if (list(got) if isinstance(got, tuple) else got) != json.loads(out):
                    return _FAIL
            return _PASS
        with time_limit(timeout_s):
            exec(as_function(code), module.__dict__)
        fn = module.__dict__["wrapped_function"]
        for inp, out in zip(job["inputs"], job["outputs"]):
            buf, lines = io.StringIO(), iter(inp.split("\n"))
            with (
                mock.patch("sys.stdin", io.StringIO(inp)),
                mock.patch("sys.stdout", buf),
                mock.patch("builtins.input", lambda *a, lines=lines: next(lines)),
            ):
                try:
                    with time_limit(timeout_s):
                        fn()
                except SystemExit:
                    pass
            if not lines_equal(buf.getvalue(), out):
                return _FAIL
        return _PASS
    except TimeoutException:
        return _TIMEOUT
    except BaseException:
        return _FAIL


def _child(job: dict[str, Any], timeout_s: float, stat: Any) -> None:
    from evalplus.eval import query_maximum_memory_bytes
    from evalplus.eval.utils import create_tempdir, reliability_guard

    with create_tempdir():
        reliability_guard(maximum_memory_bytes=query_maximum_memory_bytes())
        stat.value = run_tests(job, timeout_s)


def grade(job: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    timeout_s = float(settings.get("timeout_s", 6.0))
    stat = multiprocessing.Value("i", _UNKNOWN)
    proc = multiprocessing.Process(target=_child, args=(job, timeout_s, stat))
    proc.start()
    proc.join(timeout=timeout_s * (len(job["inputs"]) + 1) + 5)
    overran = proc.is_alive()
    if overran:
        proc.kill()
        time.sleep(0.1)
    status = {_PASS: "pass", _FAIL: "fail", _TIMEOUT: "timeout"}.get(
        stat.value, "timeout" if overran else "fail"
    )
    return {"id": job["id"], "code": extract_code(job["output"] or ""), "status": status}


def main(in_path: str, out_path: str) -> None:
    with open(in_path, encoding="utf-8") as f:
        payload = json.load(f)
    settings = payload["settings"]
    with ProcessPoolExecutor(max_workers=max(1, int(settings.get("n_workers", 1)))) as pool:
        results = list(pool.map(grade, payload["jobs"], [settings] * len(payload["jobs"])))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"results": results}, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
