"""Hand-built traces and run records for the analysis tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from criteria.divergence import agreement_pattern, majority_token


def trace_round(
    heads: list[list[int]],
    draft: list[int],
    *,
    target_probs: list[float] | None = None,
    js_draft: list[float] | None = None,
    js_heads_max: list[float] | None = None,
) -> dict[str, list]:
    """One traced round (the JSON form the HF loop writes) from per-position head tokens and drafts."""
    h = torch.tensor(heads)  # [pos, K]
    maj, cnt = majority_token(h)
    n = len(heads)
    rnd: dict[str, list] = {
        "head_token_ids": heads,
        "target_token_ids": maj.tolist(),
        "majority_token_ids": maj.tolist(),
        "majority_counts": cnt.tolist(),
        "agreement_pattern": agreement_pattern(h).tolist(),
        "majority_target_prob": target_probs or [0.5] * n,
        "accepted_by_naive": [d in row for d, row in zip(draft, heads)],
        "draft_agrees_majority": [int(d) == int(m) for d, m in zip(draft, maj.tolist())],
    }
    if js_draft is not None:
        rnd["js_draft"] = js_draft
        rnd["js_heads_max"] = js_heads_max
        rnd["accepted_by_js"] = [a <= b for a, b in zip(js_draft, js_heads_max)]
        rnd["accepted_by_majority"] = [
            ag and not (a <= b)
            for ag, a, b in zip(rnd["draft_agrees_majority"], js_draft, js_heads_max)
        ]
    return rnd


def write_run(
    root: Path, run_id: str, cfg: dict[str, Any], summary: dict[str, Any], samples: list[dict]
) -> Path:
    """A run record as runners.records.record writes it: config.json, summary.json, samples.jsonl."""
    d = root / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "summary.json").write_text(json.dumps({"run_id": run_id, **summary}))
    (d / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return d


MEASUREMENTS = ("latency", "similarity", "bench")  # conf/method/ files with a ``measure:`` key


def run_cfg(
    method: str,
    dataset: str,
    *,
    p_drop: float | None = None,
    path: int = 0,
    K: int = 5,
    L: int = 0,
    trace: bool = False,
    profile: str = "default",
    pair: str = "qwen25coder_0.5b_1.5b",
) -> dict[str, Any]:
    dm = {"unused": True} if p_drop is None else {"p_drop": p_drop, "K": K, "path": path}
    return {
        "pair": {"name": pair, "target": {"name": "Qwen/T"}, "draft": {"name": "Qwen/D"}},
        "dataset": {"name": dataset},
        # a measurement's method names it (conf/method/<name>.yaml: measure: <name>), which picks its line schema
        "method": {"name": method, **({"measure": method} if method in MEASUREMENTS else {})},
        "backend": {"name": "hf"},
        "profile": {"name": profile},
        "L": L,
        "dropmatch": dm,
        "trace": trace,
        "repeat": 0,
        "decoding": {"temperature": 0.0, "seed": 0, "max_new_tokens": 64},
    }


def summary(accuracy: float, n: int = 2) -> dict[str, Any]:
    return {
        "num_samples": n,
        "num_expected": n,
        "complete": True,
        "quality/accuracy": accuracy,
        "device": "Test CPU (2 cores)",
        "date_utc": "2026-11-30T08:00:00+00:00",
        "git_sha": "abc1234def",
    }


def item_sample(
    sample_id: str,
    rounds: list[int],
    L: int,
    *,
    correct: float = 1.0,
    tokens: int | None = None,
    wall_s: float | list[float] = 1.0,
) -> dict[str, Any]:
    """One ``samples.jsonl`` record: ``rounds`` = accepted draft tokens per round (each <= L); ``tokens``
    defaults to the identity rounds + accepted + 1 (prefill token); ``wall_s`` a time or timing repeats.
    ``output_token_ids`` keep the counter identity (:mod:`analysis.counter_checks`) whatever ``tokens`` is, so a
    test may set the count tok/s reads without making the record one the analysis refuses."""
    from runners.records.counters import SpecDecodeCounters

    c = SpecDecodeCounters(num_speculative_tokens=L)
    for a in rounds:
        c.observe_draft(L, a)
    reps = wall_s if isinstance(wall_s, list) else [wall_s]
    speed = {
        "num_output_tokens": tokens if tokens is not None else len(rounds) + sum(rounds) + 1,
        "wall_s": reps[0],
        "prefill_s": 0.0,
    }
    if len(reps) > 1:
        speed["wall_s_repeats"] = reps
    return {
        "sample_id": sample_id,
        "spec": c.to_dict(),
        "speed": speed,
        "quality": {"correct": correct},
        "output_token_ids": [1]
        * (len(rounds) + sum(rounds) + 1 if L else speed["num_output_tokens"]),
    }


def item_run(
    root: Path,
    run_id: str,
    cfg: dict[str, Any],
    samples: list[dict],
    *,
    meta: dict | None = None,
    **extra: Any,
) -> Path:
    """A complete run record whose summary is what ``runners.records.summary.summarize`` makes of ``samples``."""
    from runners.records.summary import summarize
    from runners.scorers.base import summary as quality_summary

    s = summarize(samples, int(cfg.get("L") or 0), lambda q: quality_summary("correct", True, q))
    s.update(
        {
            "num_expected": len(samples),
            "complete": True,
            "device": "Test CPU (2 cores)",
            "date_utc": "2026-11-30T08:00:00+00:00",
            "git_sha": "abc1234def",
            **extra,
        }
    )
    d = write_run(root, run_id, cfg, s, samples)
    if meta is not None:
        (d / "meta.json").write_text(json.dumps(meta))
    return d


def scored_samples(accuracy: float, n: int = 2, dataset: str = "humaneval") -> list[dict[str, Any]]:
    """``n`` scored samples (no drafts, 4 tokens in 1 s) of which the first ``round(accuracy * n)`` are correct."""
    k = round(accuracy * n)
    return [
        item_sample(f"{dataset}/test/{i}", [], 0, correct=float(i < k), tokens=4, wall_s=1.0)
        for i in range(n)
    ]


def similarity_line(sid: str, cos: list, P: list) -> dict[str, Any]:
    """One ``method=similarity`` record line (Fig. 3): a prompt's cosine and directed entailment matrices."""
    n = len(cos)
    return {
        "sample_id": sid,
        "question": "q",
        "paths": list(range(1, n + 1)),
        "cosine": cos,
        "entail_p": P,
        "identical": [[i == j or cos[i][j] == 1.0 for j in range(n)] for i in range(n)],
        "judge": "stub judge",
        "num_judge_calls": n * (n - 1),
        "sbert": "stub",
    }
