"""A short untimed decode before a run's first timed sample, so every run of a sweep starts warm.

Without it the first run of a process pays one-time costs that later runs do not: the first forward passes
at each batch shape (oneDNN / allocator set-up) and the prefill of the dataset's shared prompt prefix (the
few-shot block), which the HF loop keeps per model for every later run of the process
(:class:`runners.backends.kv_state.PrefixCache`). Tokens per second of the runs of one sweep were then biased
against whichever ran first (a tiny-pair frontier measured SD at a third of the others' rate).

The warm-up prompt is the run's first item with its last message replaced, so it shares the dataset's prefix
but not the item: no item is prefilled from the cache because of the warm-up. Its sample ids are not the
run's, so its random streams (seeded per sample id: :mod:`runners.backends.seeding`) are not the items'; its
outputs are discarded and nothing of it is recorded.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from runners.backends.base import DecodingConfig
from runners.datasets.base import Sample

# Backends whose engine is not warmed at start-up, and the warm-up's rows (None: the run's batch size). vLLM warms
# (and captures graphs) when its engine starts. The HF loop is warmed at the run's batch shape (oneDNN and the
# allocator set up per shape). llama.cpp reserves its compute buffers when a context is made (here, at the
# warm-up's first call), so one row warms it; each further row would only prefill the warm-up prompt again, up to
# ~80 tokens past the reused chunks (10-25 s a run at batch 10 on a 2-vCPU AVX2 CPU).
WARMUP_ROWS: dict[str, int | None] = {"hf": None, "llamacpp": 1}
WARMUP_TEXT = "Say hello."


def warmup_samples(first: Sample, batch_size: int) -> list[Sample]:
    """``batch_size`` copies (ids ``warmup/<i>``) of ``first`` with its last message's content replaced.

    Raises:
        ValueError: ``first`` has no messages or ``batch_size`` < 1.
    """
    if not first.messages or batch_size < 1:
        raise ValueError(f"warm-up needs a prompt and batch_size >= 1 (got {batch_size})")
    messages = [dict(m) for m in first.messages]
    messages[-1]["content"] = WARMUP_TEXT
    return [Sample(f"warmup/{i}", messages) for i in range(batch_size)]


def warmup_decoding(decoding: DecodingConfig) -> DecodingConfig:
    """The run's decoding with a cap of two rounds (``2 (L + 1)`` tokens, at least 2) and no traces."""
    cap = max(2, 2 * (int(decoding.num_speculative_tokens) + 1))
    return dataclasses.replace(
        decoding, max_new_tokens=min(cap, decoding.max_new_tokens), trace=False
    )


def warmup_rows(backend_name: str, batch_size: int) -> int:
    """Rows of the warm-up of a run on ``backend_name`` at ``batch_size`` (:data:`WARMUP_ROWS`); 0: no warm-up."""
    if backend_name not in WARMUP_ROWS:
        return 0
    return max(1, int(WARMUP_ROWS[backend_name] or batch_size))


def warm_up(
    backend: Any,
    todo: Sequence[Sample],
    decoding: DecodingConfig,
    rule: Any,
    heads: Any,
    batch_size: int,
) -> tuple[int, float]:
    """Decode :func:`warmup_samples` of ``todo[0]`` (``min(batch_size, len(todo))`` rows, in calls of the
    backend's own batch size) with :func:`warmup_decoding` and discard the results.

    Returns:
        ``(number of warm-up tokens generated, wall seconds)``.
    """
    samples = warmup_samples(todo[0], max(1, min(int(batch_size), len(todo))))
    t0 = time.perf_counter()
    tokens = sum(
        r.num_output_tokens
        for r in backend.generate(samples, warmup_decoding(decoding), rule, heads)
    )
    return tokens, time.perf_counter() - t0
