"""Distribution and vote statistics of the MC-dropout heads: centroid, JS divergence, majority, agreement.

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (5)-(7), Algorithm 1, Table 2.

All functions are pure (no RNG, inputs not mutated, no host sync) and batched over any leading dims.
"""

from __future__ import annotations

import functools
import math

import torch

LN2 = math.log(2.0)


def centroid_probs(head_logits: torch.Tensor) -> torch.Tensor:
    """Centroid distribution of K heads: softmax of the mean head logits (not the mean of probabilities).

    Paper: Eq. (5), ``p_bar = Softmax((1/K) sum_i l^(i))``.

    Args:
        head_logits: ``[..., K, V]`` floating logits (already divided by a temperature if one applies).

    Returns:
        ``[..., V]`` probabilities, at least float32 (float64 stays float64), rows sum to 1.
    """
    dtype = torch.promote_types(head_logits.dtype, torch.float32)
    return torch.softmax(head_logits.to(dtype).mean(dim=-2), dim=-1)  # [..., V]


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in nats, ``0.5 KL(p||m) + 0.5 KL(q||m)`` with ``m = (p + q) / 2``.

    Paper: Eq. (6) and Algorithm 1 (``JS(p_hat || p_bar)``, ``JS(p^(i) || p_bar)``).

    Symmetric; zero entries contribute ``0 log 0 = 0`` (no NaN: where ``p > 0`` also ``m > 0``). The
    result is clamped to ``[0, ln 2]`` to absorb float rounding, so identical inputs give exactly 0
    only up to rounding of the terms.

    Args:
        p: ``[..., V]`` probabilities (non-negative, rows summing to 1), broadcastable with ``q``.
        q: ``[..., V]`` probabilities.

    Returns:
        ``[...]`` divergence in ``[0, ln 2]``, dtype of ``p + q`` promoted to at least float32.
    """
    dtype = torch.promote_types(torch.promote_types(p.dtype, q.dtype), torch.float32)
    p, q = p.to(dtype), q.to(dtype)
    m = 0.5 * (p + q)  # [..., V]
    log_m = torch.log(m)  # -inf only where p = q = 0; masked below

    def kl_to_m(a: torch.Tensor) -> torch.Tensor:
        terms = torch.where(
            a > 0, a * (torch.log(a) - log_m), torch.zeros((), dtype=dtype, device=a.device)
        )
        return terms.sum(dim=-1)  # [...]

    return (0.5 * (kl_to_m(p) + kl_to_m(q))).clamp(0.0, LN2)


def majority_token(head_token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Plurality vote of the K head tokens, with a deterministic tie rule.

    Paper: Eq. (7), ``majority({y^(i)}_{i=1..K})``.

    Rule: the token with the most votes; among tokens tied for the most votes, the one voted by the
    lowest head index (the tied token that appears first in head order). So a "majority" always
    exists: under ties (K=5 patterns 2-2-1 and 1-1-1-1-1) Eq. (7) accepts only the draft equal to the
    tied token of the earliest head, not any tied token. A strict majority (count > K/2) can be
    required downstream with the returned count.

    Args:
        head_token_ids: ``[..., K]`` int64, the token of each head (K >= 1).

    Returns:
        ``(token, count)``: ``[...]`` int64 majority token and ``[...]`` int64 its vote count in ``[1, K]``.
    """
    K = head_token_ids.shape[-1]
    same = head_token_ids.unsqueeze(-1) == head_token_ids.unsqueeze(-2)  # [..., K, K]
    votes = same.sum(dim=-1)  # [..., K], votes for head k's token
    order = torch.arange(
        K - 1, -1, -1, device=head_token_ids.device
    )  # [K], larger for lower head index
    best_head = (votes * K + order).argmax(dim=-1, keepdim=True)  # [..., 1], unique maximum
    token = head_token_ids.gather(-1, best_head).squeeze(-1)  # [...]
    count = votes.gather(-1, best_head).squeeze(-1)  # [...]
    return token, count


@functools.lru_cache(maxsize=None)
def _partitions(K: int) -> tuple[tuple[int, ...], ...]:
    """Integer partitions of K, parts non-increasing, in descending lexicographic order."""

    def gen(n: int, largest: int) -> list[tuple[int, ...]]:
        if n == 0:
            return [()]
        return [
            (first, *rest)
            for first in range(min(n, largest), 0, -1)
            for rest in gen(n - first, first)
        ]

    return tuple(gen(K, K))


def agreement_pattern_names(K: int) -> list[str]:
    """Names of the agreement-pattern codes of :func:`agreement_pattern`, indexed by code.

    Paper: Table 2 (head alignment with K = 5).

    Args:
        K: number of heads, ``>= 1``.

    Returns:
        e.g. for K = 5: ``["5", "4-1", "3-2", "3-1-1", "2-2-1", "2-1-1-1", "1-1-1-1-1"]`` (code 0 =
        all heads agree; the last code = all heads differ).

    Raises:
        ValueError: ``K < 1``.
    """
    if K < 1:
        raise ValueError(f"K={K!r} is invalid; allowed values: an integer >= 1")
    return ["-".join(str(part) for part in parts) for parts in _partitions(K)]


def agreement_pattern(head_token_ids: torch.Tensor) -> torch.Tensor:
    """Code of the sorted vote-count pattern of the K head tokens (e.g. "3-1-1").

    Paper: Table 2 (how often the heads align, K = 5).

    The pattern is the multiset of vote counts of the distinct tokens, sorted descending; its code
    is its index in :func:`agreement_pattern_names` ``(K)`` (0 = all agree). Token ids themselves and
    the head order do not matter.

    Args:
        head_token_ids: ``[..., K]`` int64.

    Returns:
        ``[...]`` int64 codes in ``[0, P)``, P = number of integer partitions of K (7 for K = 5).
    """
    K = head_token_ids.shape[-1]
    device = head_token_ids.device
    same = head_token_ids.unsqueeze(-1) == head_token_ids.unsqueeze(-2)  # [..., K, K]
    votes = same.sum(dim=-1)  # [..., K]
    earlier = torch.ones(K, K, dtype=torch.bool, device=device).tril(diagonal=-1)  # [K, K], j < k
    first = ~(same & earlier).any(dim=-1)  # [..., K] head k is the first voter of its token
    pattern = (
        torch.where(first, votes, torch.zeros_like(votes)).sort(dim=-1, descending=True).values
    )  # [..., K]
    table = torch.tensor(
        [list(parts) + [0] * (K - len(parts)) for parts in _partitions(K)],
        dtype=pattern.dtype,
        device=device,
    )  # [P, K]
    hit = (pattern.unsqueeze(-2) == table).all(dim=-1)  # [..., P], exactly one True
    return hit.to(torch.int64).argmax(dim=-1)
