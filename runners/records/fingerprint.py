"""Fingerprint of the code that makes a run's decisions, so a record made by other code is not reused silently.

What is hashed (scheme 2): the modules a run's decisions depend on, found by following the project imports
(module level and inside functions) from three roots: the module of the run's acceptance rule
(``method.criterion``), the module of its backend (``backend.name``) and the ``autoregressive`` rule (every
backend emits a sample's first token with it). Only modules under :data:`DECISION_ROOTS` count (the rules, the
verify round and dropout heads, the backends' decoding, the spec-decode counters); registration modules
(:data:`REGISTRATION_MODULES`) are not followed, so adding a rule or a backend leaves the other runs' fingerprints
alone.

Each module is hashed as its syntax tree without docstrings and annotations, with each import reduced to the
last component of the module it names (``from runners.records.counters import X`` -> ``from counters import X``),
and the fingerprint is a hash over the sorted module hashes: no path enters it, so moving a module or reformatting
the tree does not mark records stale, while any change to code that runs does.

Scheme-1 values of older records are translated by :mod:`runners.records.legacy_fingerprints`, whose table
``python -m runners.records.fingerprint --legacy <fingerprint>=<commit> ...`` writes.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

import criteria.rules  # noqa: F401  (fills CRITERIA)
import runners.backends  # noqa: F401  (fills BACKENDS)
from criteria.registry import CRITERIA
from runners.paths import REPO_ROOT
from runners.records.legacy_fingerprints import LEGACY_FILE, legacy_table
from runners.registry import BACKENDS

SCHEME = 2
DECISION_ROOTS = ("criteria", "runners/backends", "runners/records/counters.py")
REGISTRATION_MODULES = (
    "criteria",
    "criteria.rules",
    "criteria.registry",
    "runners.backends",
    "runners.registry",
)


class _Normalise(ast.NodeTransformer):
    """Docstrings and annotations out; imports reduced to the last component of their module."""

    def _body(self, node: ast.AST) -> ast.AST:
        body = node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
        return node

    def visit_Module(self, node: ast.Module) -> ast.AST:
        return self.generic_visit(self._body(node))

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return self.generic_visit(self._body(node))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None
        return self.generic_visit(self._body(node))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        node.annotation = ast.Constant(value=None)
        return self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.module:
            node.module = node.module.rsplit(".", 1)[-1]
        node.level = 0
        return node

    def visit_Import(self, node: ast.Import) -> ast.AST:
        for a in node.names:
            a.name = a.name.rsplit(".", 1)[-1]
        return node


def module_hash(source: str) -> str:
    """sha256 (hex) of ``source`` normalised as the module docstring says (code only, no paths)."""
    tree = _Normalise().visit(ast.parse(source))
    return hashlib.sha256(ast.unparse(tree).encode()).hexdigest()


def _module_file(module: str, root: Path) -> Path | None:
    base = root.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _in_roots(f: Path, root: Path) -> bool:
    rel = f.relative_to(root).as_posix()
    return any(rel == r or rel.startswith(r.rstrip("/") + "/") for r in DECISION_ROOTS)


def _imports(f: Path, module: str) -> set[str]:
    """Project modules named by the imports of ``f`` (``from a import b``: ``a.b`` and ``a``)."""
    out: set[str] = set()
    package = module if f.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def closure(modules: Iterable[str], root: Path = REPO_ROOT) -> dict[str, Path]:
    """Decision modules reachable from ``modules`` by project imports, ``{module: file}``, sorted by name.

    Registration modules and modules outside :data:`DECISION_ROOTS` are neither hashed nor followed.
    """
    seen: dict[str, Path] = {}
    todo = [m for m in modules if m]
    visited: set[str] = set()
    while todo:
        m = todo.pop()
        if m in visited or m in REGISTRATION_MODULES:
            continue
        visited.add(m)
        f = _module_file(m, root)
        if f is None:
            continue
        if not _in_roots(f, root):
            continue
        seen[m] = f
        todo.extend(_imports(f, m))
    return dict(sorted(seen.items()))


def _entry_module(kind: str, name: str) -> str:
    """Module of the registered ``criterion`` / ``backend`` ``name`` (lazy entries are not imported)."""
    registry = CRITERIA if kind == "criterion" else BACKENDS
    if name not in registry:
        return ""
    entry = registry._items[name]
    return entry.partition(":")[0] if isinstance(entry, str) else entry.__module__


def fingerprint_of(criterion: str | None, backend: str | None, root: Path = REPO_ROOT) -> dict:
    """``{"fingerprint", "scheme", "modules"}`` of the decision code a run with this rule and backend uses."""
    roots = [_entry_module("criterion", "autoregressive")]
    if criterion:
        roots.append(_entry_module("criterion", criterion))
    if backend:
        roots.append(_entry_module("backend", backend))
    mods = closure(roots, root)
    digests = sorted(module_hash(f.read_text(encoding="utf-8")) for f in mods.values())
    h = hashlib.sha256("\n".join(digests).encode()).hexdigest()
    return {"fingerprint": h, "scheme": SCHEME, "modules": list(mods)}


@functools.cache
def _cached(criterion: str | None, backend: str | None) -> dict:
    return fingerprint_of(criterion, backend)


def decision_code(criterion: str | None = None, backend: str | None = None) -> dict:
    """The decision-code fingerprint of this checkout for a run of ``criterion`` on ``backend`` (cached)."""
    return dict(_cached(criterion, backend))


def rules_decision_code(rules: Iterable[tuple[str | None, str | None]]) -> dict:
    """One fingerprint over the decision code of several ``(criterion, backend)`` pairs, for a run that decides with
    several rules (``bench``'s arms): a hash over their sorted :func:`decision_code` fingerprints, the union of their
    modules, and ``rules`` (``"<criterion>@<backend>"`` each, sorted), which the footers name."""
    pairs = sorted({(c or "", b or "") for c, b in rules})
    codes = [decision_code(c or None, b or None) for c, b in pairs]
    h = hashlib.sha256("\n".join(sorted(d["fingerprint"] for d in codes)).encode()).hexdigest()
    modules = sorted({m for d in codes for m in d["modules"]})
    return {
        "fingerprint": h,
        "scheme": SCHEME,
        "modules": modules,
        "rules": [f"{c}@{b}" for c, b in pairs],
    }


def run_decision_code(cfg) -> dict:
    """:func:`decision_code` of a resolved run config (``method.criterion``, ``backend.name``)."""
    method, backend = dict(cfg.get("method") or {}), dict(cfg.get("backend") or {})
    return decision_code(method.get("criterion"), backend.get("name"))


def _legacy_main(pairs: list[str]) -> None:
    """Map scheme-1 fingerprints to scheme 2 at the commits that made them, for every rule/backend combination
    found in ``results/runs``; writes :data:`LEGACY_FILE`."""
    import subprocess
    import sys
    import tempfile

    combos = set()
    for cfg in (REPO_ROOT / "results" / "runs").glob("*/config.json"):
        c = json.loads(cfg.read_text())
        combos.add((dict(c.get("method") or {}).get("criterion"), c["backend"]["name"]))
    table = legacy_table()
    for pair in pairs:
        fp, commit = pair.split("=")
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                f"git -C {REPO_ROOT} archive {commit} | tar -x -C {tmp}", shell=True, check=True
            )
            old = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from runners.fingerprint import fingerprint; print(fingerprint())",  # scheme-1 code of that commit,
                ],
                cwd=tmp,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            if old[: len(fp)] != fp:
                raise SystemExit(f"{commit}: scheme-1 fingerprint {old[:12]}, not {fp[:12]}")
            table[old] = {
                f"{c}@{b}": fingerprint_of(c, b, Path(tmp))["fingerprint"]
                for c, b in sorted(combos, key=str)
            }
    LEGACY_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=_legacy_main.__doc__)
    ap.add_argument("--legacy", nargs="+", metavar="FINGERPRINT=COMMIT", required=True)
    _legacy_main(ap.parse_args().legacy)
