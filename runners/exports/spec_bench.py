"""A run as a Spec-Bench answer file (``evaluation/speed.py`` reads it: tokens/s, τ, speedup vs a baseline file).

Layout (Spec-Bench ``evaluation/eval.py``, one JSON line per question)::

    {"question_id", "category", "answer_id", "model_id", "tstamp",
     "choices": [{"index": 0, "turns": [output], "decoding_steps": [rounds], "new_tokens": [tokens],
                  "wall_time": [seconds], "accept_lengths": [tokens committed per round, ...]}]}

``accept_lengths`` per round = accepted drafts + 1 (the target's own token), so their mean is τ as
Spec-Bench prints it ("#Mean accepted tokens"); an autoregressive run commits one token per step.
``wall_time`` is what Spec-Bench times around its ``forward_func``, prefill included: at batch size 1 the sample's
``prefill_s`` plus ``wall_s``. Spec-Bench has no batches; in a batched run of our loops it is the sample's share of
the batch's wall time (``share_s``), which already holds the prefills of the samples that joined while it decoded,
so ``sum(new_tokens) / sum(wall_time)`` is the run's aggregate throughput; a batched vLLM record has no share, and
its ``wall_time`` (its own request's seconds) overlaps the others'.
``question_id`` is the item's own id where it has one (Spec-Bench / EAGLE sets, IFEval key, HumanEval task),
else our ``sample_id``; ``category`` is the Spec-Bench category or the dataset name. One turn per question
(first turns only, as every benchmark here decodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runners.records.io import dumps

SPEC_BENCH_DIR = "spec_bench"


def model_id(config: Mapping[str, Any]) -> str:
    """``<target>-<method>[-L<L>]-<dtype>-temperature-<t>`` (Spec-Bench's file naming)."""
    target = str(((config.get("pair") or {}).get("target") or {}).get("name") or "model").split(
        "/"
    )[-1]
    method = str((config.get("method") or {}).get("name") or "run")
    L = int(config.get("L") or 0)
    dtype = str((config.get("pair") or {}).get("dtype") or "float32")
    temp = float((config.get("decoding") or {}).get("temperature") or 0.0)
    return f"{target}-{method}" + (f"-L{L}" if L else "") + f"-{dtype}-temperature-{temp}"


def answer_line(
    rec: Mapping[str, Any], dataset: str, mid: str, run_id: str, batch_size: int = 1
) -> dict[str, Any]:
    """One Spec-Bench answer object for a run record of a run decoded ``batch_size`` samples at a time."""
    ref = rec.get("reference") if isinstance(rec.get("reference"), dict) else {}
    qid = ref.get("question_id", ref.get("key", ref.get("task_id", rec["sample_id"])))
    speed = rec.get("speed") or {}
    tokens = int(speed.get("num_output_tokens") or 0)
    if batch_size > 1 and speed.get("share_s") is not None:
        wall_time = float(
            speed["share_s"]
        )  # the joining samples' prefills are in the shares already
    else:
        wall_time = float(speed.get("wall_s") or 0.0) + float(speed.get("prefill_s") or 0.0)
    accepted = rec.get("accepted_per_round")
    accept_lengths = [int(a) + 1 for a in accepted] if accepted else [1] * tokens
    return {
        "question_id": qid,
        "category": str(ref.get("category") or dataset),
        "answer_id": f"{run_id}/{rec['sample_id']}",
        "model_id": mid,
        "choices": [
            {
                "index": 0,
                "turns": [str(rec.get("output_text") or "")],
                "decoding_steps": [len(accept_lengths)],
                "new_tokens": [tokens],
                "wall_time": [wall_time],
                "accept_lengths": accept_lengths,
            }
        ],
        "tstamp": None,
    }


def write_spec_bench_answers(
    run_dir: Path, records: Sequence[Mapping[str, Any]], config: Mapping[str, Any]
) -> Path:
    """Write ``<run_dir>/spec_bench/<model_id>.jsonl`` (replacing an older one) and return its path."""
    out_dir = Path(run_dir) / SPEC_BENCH_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.jsonl"):
        old.unlink()
    mid = model_id(config)
    path = out_dir / f"{mid}.jsonl"
    dataset = str((config.get("dataset") or {}).get("name") or "")
    run_id = str(config.get("run_id") or Path(run_dir).name)
    batch_size = int((config.get("backend") or {}).get("batch_size") or 1)
    with open(path, "w", encoding="utf-8") as f:
        for rec in records:
            f.write(
                dumps(answer_line(rec, dataset, mid, run_id, batch_size), ensure_ascii=False) + "\n"
            )
    return path
