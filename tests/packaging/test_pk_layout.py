"""The tree shows the system: the import graph of the project's modules is acyclic and is their real dependency
graph, functions stay short, ``runners/`` has few loose modules, code carries no history, subprocess tests say so,
``tests/`` holds tests (measurement scripts live in ``scripts/``).

The import graph counts every import statement of ``criteria/``, ``runners/`` and ``analysis/`` (also those inside
functions), and, as Python runs them, the ``__init__`` of every package an import passes through (importing
``runners.scorers.base`` from outside ``runners.scorers`` runs ``runners/scorers/__init__.py`` first).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

from runners.paths import REPO_ROOT

PACKAGES = ("criteria", "runners", "analysis")
MAX_FUNCTION_LINES = 80
MAX_LOOSE_RUNNERS_MODULES = 6
# Third-party packages heavy enough, and optional, that the project imports them only where they are used: a
# project module that imports one at its top may itself be imported inside a function.
HEAVY_OPTIONAL = (
    "vllm",
    "lm_eval",
    "evalplus",
    "wandb",
    "sentence_transformers",
    "llama_cpp",
    "submitit",
)
# Exceptions, each with its reason. Decision code (runners/records/fingerprint.py DECISION_ROOTS) is hashed into
# the fingerprint of every record made with it: editing it for style would mark committed records stale.
LAZY_PROJECT_IMPORTS = {
    (
        "runners.backends.vllm_engine",
        "runners.backends.hf_loop",
    ): "decision code of the vLLM records",
}
LONG_FUNCTIONS = {
    "runners/backends/vllm_verify_step.py::forward": "decision code of the vLLM records",
}
# file -> lines allowed to name an issue, each with its reason
HISTORY_REFERENCES = {
    "analysis/tables/table4.py": "the committed Table 4 artefact prints these words (title and footer)",
}
HISTORY_LINES_ALLOWED = {"analysis/tables/table4.py": 3}


@cache
def modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every project module."""
    out = {}
    for pkg in PACKAGES:
        for f in sorted((REPO_ROOT / pkg).rglob("*.py")):
            out[
                ".".join(f.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
            ] = f
    return out


def _resolve(name: str) -> str | None:
    """The project module ``name`` refers to (``a.b.C`` -> ``a.b``), None for other packages."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _named(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = module if is_package else module.rpartition(".")[0]
            parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
            base = ".".join(parts + ([base] if base else []))
        names = [f"{base}.{a.name}" for a in node.names]
    return {t for n in names if n.split(".")[0] in PACKAGES and (t := _resolve(n))}


def _package_inits(target: str, importer: str) -> set[str]:
    """The non-empty package ``__init__`` modules importing ``target`` runs, except ``importer``'s own packages."""
    parts, mods, out = target.split("."), modules(), set()
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        own = importer == pkg or importer.startswith(pkg + ".")
        if pkg in mods and not own and "import" in mods[pkg].read_text():
            out.add(pkg)
    return out


@cache
def imports() -> dict[str, list[tuple[str, bool, int]]]:
    """``{module: [(imported project module, inside a function, line)]}``, package inits included."""
    out = {}
    for m, f in modules().items():
        found: list[tuple[str, bool, int]] = []

        def visit(node: ast.AST, in_fn: bool, m: str = m, f: Path = f, found: list = found) -> None:
            for ch in ast.iter_child_nodes(node):
                if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    visit(ch, True)
                elif isinstance(ch, (ast.Import, ast.ImportFrom)):
                    for t in _named(ch, m, f.name == "__init__.py") - {m}:
                        found.append((t, in_fn, ch.lineno))
                        found.extend((p, in_fn, ch.lineno) for p in _package_inits(t, m))
                else:
                    visit(ch, in_fn)

        visit(ast.parse(f.read_text()), False)
        out[m] = found
    return out


def import_cycles() -> list[list[str]]:
    """Strongly connected components (more than one module) of the import graph (Tarjan)."""
    graph = {m: sorted({t for t, _, _ in ts}) for m, ts in imports().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    return cycles


@cache
def imports_heavy_optional(module: str) -> bool:
    """True if importing ``module`` imports a :data:`HEAVY_OPTIONAL` package (module-level imports, followed)."""
    tree = ast.parse(modules()[module].read_text())
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if any(n.split(".")[0] in HEAVY_OPTIONAL for n in names):
            return True
    return any(
        imports_heavy_optional(t) for t, in_fn, _ in imports()[module] if not in_fn and t != module
    )


def code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's last line, its docstring not counted."""
    n = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant):
        if isinstance(first.value.value, str):
            n -= first.end_lineno - first.lineno + 1
    return n


def test_no_import_cycle():
    assert len(modules()) > 100 and "runners.records.record" in modules()
    assert import_cycles() == []


def test_the_cycle_finder_finds_a_cycle_through_a_package_init():
    """Not vacuous: a registration ``__init__`` whose module imports a sibling package's module is a cycle."""
    deps = imports()["runners.scorers.lm_eval_scorer"]
    assert ("runners.datasets", False) in {
        (t, fn) for t, fn, _ in deps
    }  # via datasets.lm_eval_tasks


def test_project_modules_are_imported_at_module_top():
    """Inside a function only modules that pull in a heavy optional package (lazily, as lm-eval's registry)."""
    lazy = [
        f"{m}:{line} imports {t}"
        for m, ts in imports().items()
        for t, in_fn, line in ts
        if in_fn and not imports_heavy_optional(t) and (m, t) not in LAZY_PROJECT_IMPORTS
    ]
    assert lazy == []
    assert imports_heavy_optional("runners.backends.vllm_dropmatch_hook")  # via vllm_verify_step


def test_no_production_function_is_long():
    long = []
    for f in modules().values():
        rel = f.relative_to(REPO_ROOT).as_posix()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{rel}::{node.name}"
                if code_lines(node) > MAX_FUNCTION_LINES and key not in LONG_FUNCTIONS:
                    long.append(f"{key} ({code_lines(node)} lines)")
    assert long == []


def test_runners_top_level_holds_entry_points_only():
    loose = sorted(p.name for p in (REPO_ROOT / "runners").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_RUNNERS_MODULES, loose
    assert {"main.py", "run.py", "cli.py"} <= set(loose)


def test_code_carries_no_history_references():
    """Comments say why; issue numbers and the design notes outside the repository stay out of the code."""
    pattern = re.compile(r"\bissue[ -]#?\d+|DESIGN\.md", re.IGNORECASE)
    files = [
        *(p for pkg in (*PACKAGES, "tests", "scripts") for p in (REPO_ROOT / pkg).rglob("*.py")),
        *(REPO_ROOT / "conf").rglob("*.yaml"),
        *(REPO_ROOT / "runners").rglob("*.sh"),
    ]
    hits: dict[str, list[int]] = {}
    for p in files:
        rel = p.relative_to(REPO_ROOT).as_posix()
        lines = [i for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
        if lines and p != Path(__file__):
            hits[rel] = lines
    allowed = {f: n for f, n in HISTORY_LINES_ALLOWED.items() if len(hits.get(f, [])) <= n}
    assert {f: v for f, v in hits.items() if f not in allowed} == {}


# A duration stated as a fact ("measured 37 min", "took 28 min", "~860 s", "16x slower"): the README says what was
# measured where (with the machine); config and code point there. Decision code is not scanned (fingerprinted).
TIMING = re.compile(
    r"(~|measured |took |takes |in |about )\d[\d.,]*( ?- ?\d[\d.,]*)? ?(s|sec|seconds|min|minutes|h|hours)\b"
    r"|\d+(\.\d+)?x (slower|faster)",
    re.IGNORECASE,
)
TIMING_EXEMPT = ("runners/backends/",)


def test_config_and_code_state_no_measured_timings():
    files = [
        *(REPO_ROOT / "conf").rglob("*.yaml"),
        *(p for pkg in ("runners", "analysis") for p in (REPO_ROOT / pkg).rglob("*.py")),
    ]
    hits = []
    for p in files:
        rel = p.relative_to(REPO_ROOT).as_posix()
        if rel.startswith(TIMING_EXEMPT):
            continue
        for i, line in enumerate(p.read_text().splitlines(), 1):
            if TIMING.search(line):
                hits.append(f"{rel}:{i}: {line.strip()}")
    assert hits == []


def _runnable(path: Path) -> bool:
    return (
        re.search(r"""^if __name__ == ["']__main__["']""", path.read_text(), re.MULTILINE)
        is not None
    )


def test_tests_hold_no_measurement_scripts():
    """A runnable file under tests/ that is not a test module is the body of a test in its folder (which names
    it); measurement scripts run by hand live in scripts/ (its README lists each)."""
    stray = []
    for path in sorted((REPO_ROOT / "tests").rglob("*.py")):
        if path.name.startswith("test_") or path.name in ("conftest.py", "__init__.py"):
            continue
        tests_here = [t.read_text() for t in path.parent.glob("test_*.py")]
        if _runnable(path) and not any(path.name in t for t in tests_here):
            stray.append(path.relative_to(REPO_ROOT).as_posix())
    assert stray == []
    scripts = sorted(p.name for p in (REPO_ROOT / "scripts").glob("*.py"))
    assert scripts and all(_runnable(REPO_ROOT / "scripts" / n) for n in scripts)
    listed = (REPO_ROOT / "scripts" / "README.md").read_text()
    assert [n for n in scripts if f"`{n}`" not in listed] == []


def _starts_python(fn: ast.AST, helpers: set[str]) -> bool:
    src = ast.unparse(fn)
    if ("sys.executable" in src or "main_cmd(" in src) and ("subprocess" in src or "Popen" in src):
        return True
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers
        for n in ast.walk(fn)
    )


def test_tests_that_start_python_subprocesses_are_marked():
    unmarked = []
    for path in sorted((REPO_ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        helpers = {"run_main"}
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
        grew = True
        while grew:
            grew = False
            for d in defs:
                if not d.name.startswith("test") and d.name not in helpers:
                    if _starts_python(d, helpers):
                        helpers.add(d.name)
                        grew = True
        module_marks = ast.unparse(tree)
        marked_module = (
            "pytestmark" in module_marks
            and "mark.subprocess" in module_marks.split("pytestmark", 1)[1].split("\n", 1)[0]
        )
        for d in ast.walk(tree):
            if isinstance(d, ast.FunctionDef) and d.name.startswith("test"):
                decos = " ".join(ast.unparse(x) for x in d.decorator_list)
                if (
                    _starts_python(d, helpers)
                    and "mark.subprocess" not in decos
                    and not marked_module
                ):
                    unmarked.append(f"{path.relative_to(REPO_ROOT)}::{d.name}")
    assert unmarked == []
