"""DropMatch under tensor parallelism: the hook computes the dropout heads on each rank's LM-head vocab shard and
all-gathers them (``vllm_dropmatch_hook._heads_full``). TP = 2 on the CPU build (one core per rank) must give the
same tokens, per-round acceptance and counters as TP = 1 for the same seeds, through ``VLLMBackend``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm.entrypoints.llm")  # not "vllm": tests/vllm would satisfy it

SCRIPT = Path(__file__).with_name("tp_generate.py")


def _generate(pair_dir: Path, tp: int, tmp_path: Path) -> dict:
    out = tmp_path / f"tp{tp}.json"
    env = {
        **os.environ,
        "VLLM_CPU_OMP_THREADS_BIND": "|".join(str(i) for i in range(tp)),
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(pair_dir), str(tp), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.subprocess
@pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="TP = 2 on the CPU build binds one core per rank"
)
def test_tp2_decides_as_tp1(tiny_pair, tmp_path):
    target, _ = tiny_pair
    tp1, tp2 = _generate(target.parent, 1, tmp_path), _generate(target.parent, 2, tmp_path)
    for rule in ("dropmatch_naive", "dropmatch_js"):
        assert tp2[rule] == tp1[rule], rule
        assert sum(sum(s["rounds"]) for s in tp1[rule]) > 0, (
            "no draft token accepted: the comparison is vacuous"
        )
        assert all(s["trace_rounds"] == s["counters"]["num_drafts"] > 0 for s in tp2[rule])
