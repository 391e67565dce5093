"""Per-sample random streams: one seed per (run seed, sample id), one generator on the model's device.

Both backends seed the same way, so the HF loop and the vLLM hook draw the same dropout masks and samples for
the same sample (on the same device type: CPU and CUDA generators produce different streams).
"""

from __future__ import annotations

import hashlib

import torch


def sample_seed(seed: int, sample_id: str, stream: int = 0) -> int:
    """The seed of one sample's generator: stable across processes, resumption and sample order.

    Args:
        seed: the run's ``decoding.seed``.
        sample_id: ``Sample.sample_id``.
        stream: a sub-stream index (e.g. ``dropmatch.path`` for single-path decodes); 0 = the main stream.

    Returns:
        An int in ``[0, 2**63)``: ``(sha256(sample_id)[:12 hex] + 1_000_003 * (seed + 7919 * stream)) mod 2**63``.
    """
    base = int(hashlib.sha256(sample_id.encode()).hexdigest()[:12], 16)
    return (base + 1_000_003 * (int(seed) + 7919 * int(stream))) % (2**63)


def make_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` (the model's device: CPU, CUDA, ...) seeded with ``seed``."""
    return torch.Generator(device=torch.device(device)).manual_seed(int(seed))
