"""Hand-made verify rounds for the rule tests (in the style of vLLM's ``make_dummy`` helpers): distributions in,
:class:`criteria.base.VerifyInputs` out.

``target`` is given as probabilities ``[B, L+1, V]`` and turned into logits ``log p`` (``-inf`` where p = 0), so
``softmax(logits) == p`` up to rounding and a test can state the value a rule's formula gives on p directly.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from criteria.base import VerifyInputs

Nested = Sequence | torch.Tensor


def gen(seed: int) -> torch.Generator:
    """A seeded CPU generator."""
    return torch.Generator().manual_seed(seed)


def logits_of(probs: Nested) -> torch.Tensor:
    """``log p`` as float32 logits (``-inf`` where p = 0): softmax gives p back. ``probs`` ``[..., V]``."""
    p = torch.as_tensor(probs, dtype=torch.float64)
    return torch.where(
        p > 0, p.clamp_min(1e-300).log(), torch.tensor(float("-inf"), dtype=torch.float64)
    ).float()


def make_round(
    target: Nested,
    drafts: Nested,
    draft_probs: Nested | None = None,
    *,
    temperature: float = 0.0,
    seed: int | None = None,
) -> VerifyInputs:
    """One round from probabilities.

    Args:
        target: ``[B, L+1, V]`` target probabilities (rows sum to 1), or ``[L+1, V]`` for B = 1.
        drafts: ``[B, L]`` (or ``[L]``) token ids.
        draft_probs: ``[B, L, V]`` (or ``[L, V]``) draft probabilities, or None.
        temperature: the round's temperature (the logits are ``log p``; at T != 1 the rules rescale them).
        seed: a generator seed (required when ``temperature > 0``).

    Returns:
        :class:`VerifyInputs` with float32 tensors and int64 drafts.
    """
    t = logits_of(target)
    d = torch.as_tensor(drafts, dtype=torch.int64)
    if t.ndim == 2:
        t, d = t[None], d[None]
    q = None
    if draft_probs is not None:
        q = torch.as_tensor(draft_probs, dtype=torch.float32)
        q = q[None] if q.ndim == 2 else q
    return VerifyInputs(
        draft_token_ids=d,
        target_logits=t,
        draft_probs=q,
        temperature=temperature,
        generator=None if seed is None else gen(seed),
    )


def one_hot(ids: Sequence[int], V: int, mass: float = 1.0) -> torch.Tensor:
    """``[len(ids), V]`` rows with ``mass`` on ``ids[i]`` and the rest spread evenly over the other tokens."""
    rest = (1.0 - mass) / (V - 1) if V > 1 else 0.0
    out = torch.full((len(ids), V), rest, dtype=torch.float32)
    out[torch.arange(len(ids)), torch.as_tensor(ids)] = mass
    return out


def random_round(
    B: int,
    L: int,
    V: int,
    seed: int,
    *,
    temperature: float = 1.0,
    match_rate: float = 0.6,
    sharpness: float = 2.0,
) -> VerifyInputs:
    """Random target logits and draft probabilities; drafts equal the target argmax with rate ``match_rate``,
    uniform otherwise. The round's generator is seeded with ``seed + 1`` when ``temperature > 0``."""
    g = gen(seed)
    target = sharpness * torch.randn(B, L + 1, V, generator=g)
    q = torch.softmax(sharpness * torch.randn(B, L, V, generator=g), dim=-1)
    drafts = torch.randint(0, V, (B, L), generator=g)
    drafts = torch.where(
        torch.rand(B, L, generator=g) < match_rate, target[:, :L].argmax(dim=-1), drafts
    )
    return VerifyInputs(
        drafts,
        target,
        q,
        temperature=temperature,
        generator=gen(seed + 1) if temperature > 0 else None,
    )


def chi2(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson's statistic of ``counts`` against ``probs`` (cells with zero expectation must hold no counts)."""
    expected = probs.double() * counts.sum()
    keep = expected > 0
    assert int(counts[~keep].sum()) == 0, "counts in a cell of zero probability"
    return float(((counts.double()[keep] - expected[keep]) ** 2 / expected[keep]).sum())


def chi2_two_sample(a: torch.Tensor, b: torch.Tensor) -> float:
    """Two-sample statistic ``sum (a - b)^2 / (a + b)`` of two histograms with the same total (df = cells - 1)."""
    a, b = a.double(), b.double()
    keep = (a + b) > 0
    return float(((a[keep] - b[keep]) ** 2 / (a[keep] + b[keep])).sum())


def hidden_round(seed: int, B: int, V: int, match: float, L: int = 5, d: int = 24):
    """Hidden states ``[B, L+1, d]``, LM head ``[V, d]``, drafts ``[B, L]`` (each the target's argmax with
    probability ``match``) and draft probabilities ``[B, L, V]`` near the target's, from ``seed``."""
    g = torch.Generator().manual_seed(seed)
    hidden, W = torch.randn(B, L + 1, d, generator=g), 3 * torch.randn(V, d, generator=g)
    target = (hidden @ W.T).argmax(-1)
    drafts = torch.where(
        torch.rand(B, L, generator=g) < match,
        target[:, :L],
        torch.randint(0, V, (B, L), generator=g),
    )
    q = torch.softmax((hidden[:, :L] @ W.T) + torch.randn(B, L, V, generator=g), -1)
    return hidden, W, drafts, q


def decide_hidden_round(rule, hidden, W, drafts, q, spec, B, trace=True, meter=None):
    """:func:`criteria.verify.verify_round` of a :func:`hidden_round` at T = 0, row ``i`` seeded ``100 + i``."""
    from criteria.dropout_heads import LMHead
    from criteria.verify import verify_round

    return verify_round(
        hidden,
        LMHead(W),
        drafts,
        rule,
        spec,
        temperature=0.0,
        generators=[torch.Generator().manual_seed(100 + i) for i in range(B)],
        draft_probs=q,
        trace=trace,
        meter=meter,
    )
