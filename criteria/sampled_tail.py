"""Eq. (6) of the sparse variant with the vocabulary beyond its candidates estimated from a deterministic sample.

The sparse variant keeps the heads at C candidate tokens exact. The lumped rest entry
(:func:`criteria.candidates.rest_logsumexp`) gives every head the plain head's tail; here the tail is
estimated instead. S tail tokens are drawn by systematic sampling from a proposal ``rho`` (half the plain head's
distribution outside the candidates, half the draft's), and each one enters the support with the importance
weight ``w = 1 / (S rho)``. Each head's normaliser, the centroid's normaliser and every JS term are then
weighted sums over the support. The estimate has a standard error, so a caller can tell when the estimate
cannot settle Eq. (6) and decide that position some other way (:mod:`criteria.dropmatch_js`).

Paper: DropMatch (arXiv 2603.03333) Eq. (5)-(6). Importance sampling and systematic resampling: Owen, *Monte
Carlo theory, methods and examples* (2013), ch. 9 and 10.
"""

from __future__ import annotations

import math

import torch


def tail_sample(
    plain_logits: torch.Tensor,
    draft_probs: torch.Tensor | None,
    candidates: torch.Tensor,
    samples: int,
    repeated: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """S tail tokens per position and their importance weights. No random draws: systematic sampling at
    quantiles ``(s + 1/2) / S``, so the round's random streams are untouched and a position always gets the same
    sample.

    The proposal is ``rho = 1/2 pi + 1/2 q_tail``: ``pi`` is ``softmax(plain)`` outside the candidates (at T = 1
    whatever the run's temperature: the proposal moves the estimate's variance, never its mean), and ``q_tail``
    is the draft's distribution there, each renormalised over the tail. When one of the two has no mass in the
    tail, the other is used alone. When neither has, the proposal is uniform over the tail.
    A token may be drawn more than once. Each draw carries its own weight, so the sum stays unbiased.
    The row is read in five passes (the shifted exponent, its sum, the draft's sum, the mixture, the cumulative
    sum): the plain head's logits are shifted by the candidates' largest, the row's maximum when they hold its
    top-1, as the sparse variant's do. A row whose tail then sums below ``FAR_TAIL`` (2^-100: its logits all
    some 70 nats or more below the candidates' largest) is shifted by its tail's own maximum instead, so that its
    exponents stay normal floats rather than lose their precision as subnormals or flush to 0.

    Args:
        plain_logits: ``[m, V]`` float, the plain head's logits.
        draft_probs: ``[m, V]`` float or None, the draft distribution.
        candidates: ``[m, C]`` int64, the exact tokens (duplicates allowed), the plain head's top-1 among them.
        samples: S >= 1.
        repeated: ``[m, C]`` bool or None: True at each candidate an earlier entry of its row holds (the
            ``duplicate`` of :func:`criteria.candidates.with_draft_top`); None: found here.

    Returns:
        ``(ids [m, S] int64, weights [m, S] float32)``. ``weights = 1 / (S rho(id))``, so ``sum_s w_s g(id_s)``
        estimates ``sum over the tail of g``. Every weight is 0 when the candidates cover the vocabulary.

    Raises:
        ValueError: ``samples < 1``.
    """
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples={samples!r} is invalid; allowed: an integer >= 1")
    tiny = torch.finfo(torch.float32).tiny
    x = plain_logits.float()
    shift = x.gather(-1, candidates).amax(dim=-1, keepdim=True)  # [m, 1]
    rho = (x - shift).exp_().scatter_(-1, candidates, 0.0)  # [m, V] pi, unnormalised
    share = rho.sum(dim=-1, keepdim=True)  # [m, 1]
    far = (share < FAR_TAIL).squeeze(-1)  # [m]
    if bool(far.any()):
        rho[far], share[far] = _far_tail(x[far], candidates[far])
    if draft_probs is not None:
        q = draft_probs.float()
        if repeated is None:
            repeated = _repeated(candidates)
        at_candidates = q.gather(-1, candidates).masked_fill(repeated, 0.0)
        q_share = q.sum(dim=-1, keepdim=True) - at_candidates.sum(dim=-1, keepdim=True)  # [m, 1]
        # rho + q * share / q_share is (twice the tail mass of pi) times the half-half mixture; a part with no tail
        # mass drops out (pi's: rho is 0 in the tail, any positive factor gives q alone; the draft's: where its sum
        # minus its candidates' is at most float32's smallest normal, or the factor overflows)
        factor = torch.where(share > 0, share, torch.ones_like(share)) / torch.where(
            q_share > tiny, q_share, torch.full_like(q_share, float("inf"))
        )
        rho.addcmul_(q, factor.nan_to_num(posinf=0.0)).scatter_(-1, candidates, 0.0)
    cdf = rho.cumsum(dim=-1)  # [m, V]
    total = cdf[:, -1:]  # [m, 1]: the proposal's mass, 0 where neither part has tail mass
    if bool((total <= 0).any()):  # there: uniform over the tail (no row's sum is 0 otherwise)
        flat = torch.ones_like(rho).scatter_(-1, candidates, 0.0)
        rho = torch.where(total > 0, rho, flat)
        cdf = rho.cumsum(dim=-1)
        total = cdf[:, -1:]
    u = (torch.arange(samples, device=rho.device, dtype=torch.float32) + 0.5) / samples  # [S]
    ids = torch.searchsorted(cdf, (u * total).contiguous()).clamp_(max=rho.shape[-1] - 1)
    # a row with total 0 (the candidates cover the vocabulary) has rho 0 at every draw: weight 0
    at = rho.gather(-1, ids) / torch.where(
        total > 0, total, torch.ones_like(total)
    )  # [m, S] normalised
    weights = torch.where(at > 0, 1.0 / (samples * at.clamp_min(1e-30)), torch.zeros_like(at))
    return ids, weights


# The plain head's tail sum, relative to the candidates' largest exponent, below which tail_sample shifts by the
# tail's own maximum: 2^-100, well above float32's smallest normal (2^-126), so that the tail's largest exponents stay
# normal floats with their full precision.
FAR_TAIL = 2.0**-100


def _far_tail(x: torch.Tensor, candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``exp(x - max over the tail)`` with 0 at the candidates, ``[n, V]`` float32, and its sum ``[n, 1]``: the
    unnormalised ``pi`` of rows whose tail lies far below their candidates (a tail all ``-inf``: 0)."""
    tail = x.scatter(-1, candidates, float("-inf"))
    top = tail.amax(dim=-1, keepdim=True)  # [n, 1]
    rho = (tail - torch.where(torch.isfinite(top), top, torch.zeros_like(top))).exp_()
    return rho, rho.sum(dim=-1, keepdim=True)


def _repeated(ids: torch.Tensor) -> torch.Tensor:
    """``[m, C]`` bool: True at every entry of a row whose id an earlier entry of the row holds."""
    ordered, order = ids.sort(dim=-1, stable=True)
    again = torch.zeros_like(ids, dtype=torch.bool)
    again[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    return torch.zeros_like(again).scatter_(-1, order, again)


def pointwise_js(p: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """``f(p, m) = 1/2 p ln(2p / (p + m)) + 1/2 m ln(2m / (p + m))`` elementwise, in nats. Summed over a support,
    it gives ``JS(p || m)``. It is 0 where ``p == m``, and homogeneous: ``f(a p, a m) = a f(p, m)``."""
    h = 0.5 * (p + m)
    return 0.5 * (torch.xlogy(p, p) + torch.xlogy(m, m)) - torch.xlogy(h, h)


def sampled_js_statistics(
    head_logits: torch.Tensor,
    draft_probs: torch.Tensor,
    weights: torch.Tensor,
    samples: int,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`criteria.dropmatch_base.js_statistics` on a support of C exact entries and S sampled ones, with the
    standard error of the decision's margin.

    Each head's distribution is ``w_e exp(l_e / T) / sum_e' w_e' exp(l_e' / T)`` over the support, and the
    centroid is the same with the heads' mean logit (Eq. 5). Each side of Eq. (6) is ``sum_e w_e f(p_e, m_e)``.
    The draft's values are its true probabilities, so its normaliser needs no estimate. The standard error is
    that of the sampled part of ``JS(p^(i*) || p_bar) - JS(p_hat || p_bar)``, where i* is the head with the
    largest JS. It leaves out the normalisers' own error: the ladder's band in :mod:`criteria.dropmatch_js` was
    sized on real rounds with that omission.

    Args:
        head_logits: ``[..., K, C + S]`` float, the heads at the candidates (``-inf`` at a masked duplicate),
            then at the S sampled tokens.
        draft_probs: ``[..., C + S]`` float, the draft at the same entries (0 at a masked duplicate).
        weights: ``[..., C + S]`` float, 1 at the candidates and the :func:`tail_sample` weights after them.
        samples: S >= 2 (the standard error needs two samples).
        temperature: ``>= 0`` (T = 1 when greedy, as the exact rule).

    Returns:
        ``(js_draft [...], js_heads_max [...], se [...])`` float32 nats. These are estimates: a side may fall
        slightly outside ``[0, ln 2]``.
    """
    T = temperature if temperature > 0 else 1.0
    scaled = head_logits.float() / T  # [..., K, E]
    log_w = weights.float().log()  # [..., E]: -inf where a weight is 0
    center = scaled.mean(dim=-2)  # [..., E], Eq. (5)
    p = (scaled + log_w.unsqueeze(-2)).log_softmax(dim=-1).exp() / weights.unsqueeze(-2)
    c = (center + log_w).log_softmax(dim=-1).exp() / weights
    p = torch.nan_to_num(p, nan=0.0)  # a zero weight: 0 / 0 (its terms carry no weight anyway)
    c = torch.nan_to_num(c, nan=0.0)
    q = draft_probs.float()
    terms_heads = pointwise_js(p, c.unsqueeze(-2)) * weights.unsqueeze(-2)  # [..., K, E]
    terms_draft = pointwise_js(q, c) * weights  # [..., E]
    js_heads = terms_heads.sum(dim=-1)  # [..., K]
    js_draft = terms_draft.sum(dim=-1)
    best = js_heads.argmax(dim=-1, keepdim=True)  # [..., 1]
    margin = terms_heads.gather(-2, best.unsqueeze(-1).expand(*best.shape, terms_heads.shape[-1]))
    margin = margin.squeeze(-2)[..., -samples:] - terms_draft[..., -samples:]  # [..., S]
    se = (samples * margin).std(dim=-1) / math.sqrt(samples)
    return js_draft, js_heads.amax(dim=-1), se
