"""The sparse variant's heads (``dropmatch.sparse_top_n = N``) and the escape's rungs.

The K dropout heads are computed only at C candidate tokens: the plain head's and the draft's top-N, plus one
"rest" entry whose logit is the plain head's log-sum-exp outside them (Eq. 2 keeps each head's expectation equal to
the plain logits, so the rest stands for the heads' mass there). Lazily, a round computes the heads at the plain
head's top-N and the draft token only (enough for the heads' tokens, Eq. 7) and leaves Eq. (6)'s support to a
closure the rule calls where it needs it. With ``dropmatch.sparse_escape`` a position whose decision the
candidates cannot settle is decided again on a ladder of rungs: an exact top of max(E, N) tokens plus S
importance-sampled tail tokens (:func:`rung_top`, :mod:`criteria.sampled_tail`), then the whole vocabulary (Eq. 3).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from criteria.base import RoundMeter
from criteria.candidates import (
    candidate_tokens,
    head_token_candidates,
    rest_logsumexp,
    top_ids,
    with_draft_top,
)
from criteria.dropout_heads import HeadSpec, heads_on_candidates
from criteria.sampled_tail import tail_sample


def sparse_round_heads(
    target: torch.Tensor,
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    heads: HeadSpec,
    draft_probs: torch.Tensor | None,
    draft_token_ids: torch.Tensor | None,
    lazy: bool,
    meter: RoundMeter | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Callable | None]]:
    """The sparse variant's heads, candidates and closures for :func:`criteria.round_heads.round_heads`
    (``heads.top_n`` set), from the plain logits ``target`` ``[B, P, V]`` float32 and the head inputs ``dropped``
    ``[B, P, K, d]`` (Eq. 1-2); the escape's closure reports its rungs to ``meter``."""
    if not lazy:
        closures = {
            "sparse_support": None,
            "exact_heads": exact_heads_at(
                dropped, W, b, target, draft_probs, heads.top_n, meter=meter
            )
            if heads.escape
            else None,
        }
        return *_sparse_heads(target, dropped, W, b, draft_probs, heads.top_n), closures
    sparse, cand = _token_heads(target, dropped, W, b, draft_token_ids, heads.top_n)
    target_top = cand[..., :-2]  # [B, P, N] the plain head's top-N, which the heads' tokens needed
    closures = {
        "sparse_support": functools.partial(
            _support_at, dropped, W, b, target, draft_probs, target_top, heads.top_n
        ),
        "exact_heads": exact_heads_at(
            dropped, W, b, target, draft_probs, heads.top_n, target_top, meter, sparse[..., :-2]
        )
        if heads.escape
        else None,
    }
    return sparse, cand, closures


def exact_heads_at(
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    target: torch.Tensor,
    draft_probs: torch.Tensor | None,
    top_n: int,
    target_top: torch.Tensor | None = None,
    meter: RoundMeter | None = None,
    top_heads: torch.Tensor | None = None,
) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]:
    """``VerifyInputs.exact_heads`` of a sparse round. It is built from the round's own head inputs ``dropped``
    ``[B, P, K, d]`` (the same masks), the plain logits ``target`` ``[B, P, V]`` float32, ``draft_probs``
    ``[B, L, V]``, the candidates' ``top_n`` and, when the round found it already, the plain head's top-N
    ``target_top`` ``[B, P, N]`` (else found here), and the heads there ``top_heads`` ``[B, P, K, N]`` float32 (the
    heads' tokens computed them; else computed here). Each call is reported to ``meter``
    (:meth:`RoundMeter.escape`, named by :func:`rung_name`).

    ``at(rows [m], positions [m], rung=None)`` returns the K heads at those positions.
    - With ``rung`` None: over the whole vocabulary, ``([m, K, V]`` in the matmul's dtype, None, None)``
      (Eq. 3).
    - With ``rung = (E, S)``: on the plain head's and the draft's top-max(E, N) tokens
      (:func:`criteria.candidates.with_draft_top`; at E <= N the sparse variant's candidates) plus S tail tokens
      (:func:`criteria.sampled_tail.tail_sample`). It returns ``([m, K, C + S]`` float32, ``[m, C + S]`` int64 ids,
      ``[m, C + S]`` float32 weights)``: ``-inf`` at a masked duplicate; weight 1 at a candidate and the importance
      weight at a sampled token."""

    def at(
        rows: torch.Tensor, positions: torch.Tensor, rung: tuple[int, int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if meter is not None:
            meter.escape(rung_name(rung, top_n), rows)
        x = dropped[rows, positions]  # [m, K, d]
        m, K, d = x.shape
        if rung is None:
            return torch.nn.functional.linear(x.reshape(m * K, d), W, b).view(m, K, -1), None, None
        n, samples = rung_top(rung, top_n), rung[1]
        plain = target[rows, positions]  # [m, V]
        q = None if draft_probs is None else draft_probs[rows, positions]  # [m, V]
        if n == top_n and target_top is not None:
            top = target_top[rows, positions]
        else:
            top = top_ids(plain, n)
        ids, dup = with_draft_top(top, q, n)  # [m, C]
        tail, w = tail_sample(plain, q, ids, samples, dup)  # [m, S] each
        ids = torch.cat([ids, tail], dim=-1)  # [m, C + S]
        dup = torch.cat([dup, torch.zeros_like(tail, dtype=torch.bool)], dim=-1)
        # the heads at the plain head's top-N: the round's token heads computed them
        if n == top_n and top_heads is not None:
            k = top.shape[-1]  # min(N, V): the top the round found
            rest = heads_on_candidates(x, W, b, ids[:, k:], dup[:, k:]).float()
            heads = torch.cat([top_heads[rows, positions], rest], dim=-1)  # [m, K, C + S]
        else:
            heads = heads_on_candidates(x, W, b, ids, dup).float()  # [m, K, C + S]
        exact = w.new_ones(m, ids.shape[-1] - samples)  # the candidates' terms count once
        return heads, ids, torch.cat([exact, w], dim=-1)

    return at


def rung_top(rung: tuple[int, int], top_n: int) -> int:
    """How many of the plain head's (and of the draft's) top tokens a sampled rung ``(E, S)`` of the escape's
    ladder computes exactly: max(E, N), N the run's ``dropmatch.sparse_top_n``."""
    return max(rung[0], top_n)


def rung_name(rung: tuple[int, int] | None, top_n: int) -> str:
    """A rung of the escape's ladder as the records name it (``escape`` in ``samples.jsonl``): ``"exact"`` (the
    exact heads), ``"S"`` (the sparse variant's top-N candidates plus S sampled tail tokens) or ``"E+S"`` (a larger
    exact top-E plus S samples, :func:`rung_top`)."""
    if rung is None:
        return "exact"
    top = rung_top(rung, top_n)
    return str(rung[1]) if top == top_n else f"{top}+{rung[1]}"


def _support_at(
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    target: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_top: torch.Tensor,
    top_n: int,
    rows: torch.Tensor,
    positions: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``VerifyInputs.sparse_support`` of a round (bound to all but ``rows`` / ``positions``): Eq. (6)'s support of
    the sparse variant at those positions, as :func:`_sparse_heads` builds it, from the plain head's top-N the
    heads' tokens already needed (``target_top`` ``[B, P, N]``).

    Returns ``([m, K, C + 1] float32, [m, C + 1] int64)``: the heads at the plain head's and the draft's top-N and
    the rest entry (id ``-1``; logit the plain head's log-sum-exp outside the candidates)."""
    q = None if draft_probs is None else draft_probs[rows, positions]  # [m, V]
    ids, dup = with_draft_top(target_top[rows, positions], q, top_n)  # [m, C]
    heads = heads_on_candidates(dropped[rows, positions], W, b, ids, dup).float()  # [m, K, C]
    return _with_rest(heads, ids, rest_logsumexp(target[rows, positions], ids))  # rest: [m]


def _sparse_heads(
    target: torch.Tensor,
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    draft_probs: torch.Tensor | None,
    top_n: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sparse variant's heads: ``[B, P, K, C + 1]`` float32 logits at the C candidates plus the rest entry, and
    the candidate ids ``[B, P, C + 1]`` (``-1`` for the rest). ``target`` ``[B, P, V]`` float32 plain logits,
    ``dropped`` ``[B, P, K, d]`` head inputs (Eq. 1-2)."""
    B, P, K, d = dropped.shape
    ids, dup = candidate_tokens(target, draft_probs, top_n)  # [B, P, C]
    C = ids.shape[-1]
    sparse = heads_on_candidates(
        dropped.reshape(B * P, K, d), W, b, ids.reshape(B * P, C), dup.reshape(B * P, C)
    )  # [B*P, K, C]
    # the rest of the vocabulary as one more entry: its logit is the plain head's log-sum-exp outside the
    # candidates (the heads' expectation there, Eq. 2 preserves it), its id -1 (never a head token)
    return _with_rest(
        sparse.float().view(B, P, K, C), ids, rest_logsumexp(target, ids)
    )  # rest: [B, P]


def _with_rest(
    heads: torch.Tensor, ids: torch.Tensor, rest: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heads at candidates ``[..., K, C]`` float32 and their ids ``[..., C]`` with the rest entry appended: logit
    ``rest`` ``[...]`` for every head (``-inf`` when None), id ``-1``."""
    if rest is None:
        rest = heads.new_full(heads.shape[:-2], float("-inf"))
    rest = rest[..., None, None].expand(*heads.shape[:-1], 1)
    return torch.cat([heads, rest], dim=-1), torch.cat(
        [ids, ids.new_full((*ids.shape[:-1], 1), -1)], dim=-1
    )


def _token_heads(
    target: torch.Tensor,
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    draft_token_ids: torch.Tensor | None,
    top_n: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sparse heads the heads' tokens need: ``[B, P, K, N + 2]`` float32 logits at the plain head's top-N and
    the draft token (:func:`criteria.candidates.head_token_candidates`) plus a ``-inf`` entry in the rest
    entry's place (id ``-1``), and their ids ``[B, P, N + 2]``. ``target`` ``[B, P, V]`` float32 plain logits,
    ``dropped`` ``[B, P, K, d]`` head inputs (Eq. 1-2)."""
    B, P, K, d = dropped.shape
    ids, dup = head_token_candidates(target, draft_token_ids, top_n)  # [B, P, C]
    C = ids.shape[-1]
    logits = heads_on_candidates(
        dropped.reshape(B * P, K, d), W, b, ids.reshape(B * P, C), dup.reshape(B * P, C)
    )  # [B*P, K, C]
    # no rest entry: Eq. (6) reads VerifyInputs.sparse_support; the shape stays that of the full support
    return _with_rest(logits.float().view(B, P, K, C), ids, None)
