"""The sparse variant's candidate tokens: where, at each position, the K dropout heads are computed exactly.

The heads' token (their argmax, Eq. 4 and 7) lies among the plain head's top tokens unless dropout moves another
token above all of them, and Eq. (6)'s JS is carried by the tokens where the plain head or the draft put mass: the
candidates are the plain head's top-N, the draft's top-N (or the draft token), and the rest of the vocabulary is
one lumped entry (:func:`rest_logsumexp`). :func:`top_ids` finds a row's top-N in one pass over block maxima.

Paper: DropMatch (arXiv 2603.03333) Eq. (3)-(7), restricted to candidate tokens (the sparse variant,
``dropmatch.sparse_top_n``).
"""

from __future__ import annotations

import torch


def candidate_tokens(
    target_logits: torch.Tensor, draft_probs: torch.Tensor | None, top_n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate tokens of the sparse variant: the plain head's top-N and the draft's top-N at each position.

    Positions ``t < L`` (drafted) take the union of the target's top-N and the draft's top-N; the positions
    without a draft (the bonus position) take the target's top-2N. A draft token already among the target's
    top-N is a duplicate and is masked (its head logit is set to ``-inf`` by the caller), so no token counts twice.

    Args:
        target_logits: ``[B, P, V]`` plain-head logits (P positions, ``P >= L``).
        draft_probs: ``[B, L, V]`` or None.
        top_n: N >= 1 (clamped to V).

    Returns:
        ``(ids [B, P, C] int64, duplicate [B, P, C] bool)`` with ``C = min(2N, V)``.
    """
    V = target_logits.shape[-1]
    n = min(top_n, V // 2) if V >= 2 else 1
    ids = target_logits.topk(min(2 * n, V), dim=-1).indices  # [B, P, C]
    dup = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    if draft_probs is not None and draft_probs.shape[1] > 0 and ids.shape[-1] == 2 * n:
        L = draft_probs.shape[1]
        drafted = draft_probs[..., :V].topk(n, dim=-1).indices  # [B, L, n]
        ids = ids.clone()
        ids[:, :L, n:] = drafted
        dup[:, :L, n:] = (drafted.unsqueeze(-1) == ids[:, :L, :n].unsqueeze(-2)).any(dim=-1)
    return ids, dup


# Widest block top_ids scans, and how many blocks per wanted id it keeps at least.
TOP_BLOCK = 128
TOP_BLOCKS_PER_ID = 8


def top_ids(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Ids of the k largest entries of each row, largest first; the same set as ``logits.topk(k).indices`` up to
    the order of tied values.

    Each of the k largest entries lies in a block of consecutive ids (the last block shorter) whose maximum is
    among the k largest block maxima, so the top-k is taken over those k blocks only: one max pass over the row
    instead of ``torch.topk``'s selection over it. The block is the widest power of two up to ``TOP_BLOCK`` that
    leaves ``TOP_BLOCKS_PER_ID`` blocks per wanted id (128 for k = 64, 32 for 512, 8 for 2,048 over 151,936 ids),
    so the blocks kept stay a small share of the row; when the blocks tile the row they are copied whole. On a
    2-vCPU AVX512 CPU (2 threads, float32 rows of 151,936) one row took 0.13 / 0.16 / 0.66 ms at k = 64 / 512 /
    2,048 against ``torch.topk``'s 0.31 / 0.38 / 1.21 ms. Rows too short to gain use ``torch.topk``.

    Args:
        logits: ``[..., V]`` float.
        k: >= 1 (clamped to V).

    Returns:
        ``[..., min(k, V)]`` int64.
    """
    V = logits.shape[-1]
    k = min(k, V)
    width = TOP_BLOCK
    while width > 1 and V // width < TOP_BLOCKS_PER_ID * k:
        width //= 2
    full = V // width
    if width < 8 or full < 4 * k:  # blocks narrower than 8, or too few of them: no gain
        return logits.topk(k, dim=-1).indices
    lead = logits.shape[:-1]
    blocks = logits[..., : full * width].reshape(*lead, full, width)
    best = blocks.amax(dim=-1)  # [..., full]
    if V > full * width:  # the short last block
        best = torch.cat([best, logits[..., full * width :].amax(dim=-1, keepdim=True)], dim=-1)
    chosen = best.topk(k, dim=-1).indices  # [..., k]
    # whole blocks only: copied block by block, the ids found from the k picked
    if V == full * width:
        values = blocks.gather(-2, chosen.unsqueeze(-1).expand(*lead, k, width)).flatten(-2)
        picked = values.topk(k, dim=-1).indices  # [..., k] into the k blocks' entries
        return chosen.gather(-1, picked // width) * width + picked % width
    ids = (chosen.unsqueeze(-1) * width + torch.arange(width, device=logits.device)).flatten(-2)
    values = logits.gather(-1, ids.clamp(max=V - 1)).masked_fill(ids >= V, float("-inf"))
    return ids.gather(-1, values.topk(k, dim=-1).indices)  # [..., k]


def head_token_candidates(
    target_logits: torch.Tensor, draft_token_ids: torch.Tensor | None, top_n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the sparse variant looks for each head's token: the plain head's top-N and the draft token.

    A head's token (its argmax, Eq. 4 and 7) lies among the plain head's top tokens unless dropout moves another
    token above all of them; the draft token is added so that "the heads' majority is the draft" is tested on it
    wherever it ranks. Positions without a draft (the bonus position) repeat the top-1 there, masked.

    Args:
        target_logits: ``[B, P, V]`` plain-head logits.
        draft_token_ids: ``[B, L]`` int64 or None (positions ``t < L`` are drafted).
        top_n: N >= 1 (clamped to V).

    Returns:
        ``(ids [B, P, N + 1] int64, duplicate [B, P, N + 1] bool)``: the last entry is the draft token, marked a
        duplicate when it is already among the top-N (its head logit is then set to ``-inf`` by the caller).
    """
    ids = top_ids(target_logits, top_n)  # [B, P, N]
    extra = ids[..., :1].clone()  # [B, P, 1]
    if draft_token_ids is not None:
        L = min(draft_token_ids.shape[1], ids.shape[1])
        extra[:, :L, 0] = draft_token_ids[:, :L]
    dup = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    dup = torch.cat([dup, (extra == ids).any(dim=-1, keepdim=True)], dim=-1)
    return torch.cat([ids, extra], dim=-1), dup


def with_draft_top(
    target_top: torch.Tensor, draft_probs: torch.Tensor | None, top_n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (6)'s candidates of the sparse variant from the plain head's top tokens already found: those plus the
    draft's top-N (a draft token already among them is a duplicate, masked by the caller).

    Args:
        target_top: ``[..., n]`` int64, the plain head's top-n ids (its top-1 first).
        draft_probs: ``[..., V]`` or None (positions without a draft: the plain head's tokens only).
        top_n: N >= 1 (clamped to V).

    Returns:
        ``(ids [..., n + N] int64, duplicate [..., n + N] bool)`` (``[..., n]`` without ``draft_probs``).
    """
    dup = torch.zeros(target_top.shape, dtype=torch.bool, device=target_top.device)
    if draft_probs is None:
        return target_top, dup
    drafted = top_ids(draft_probs, top_n)  # [..., N]
    if drafted.shape[-1] * target_top.shape[-1] <= draft_probs.shape[-1]:
        again = (drafted.unsqueeze(-1) == target_top.unsqueeze(-2)).any(dim=-1)  # [..., N]
    else:  # a wide top (the escape's larger rungs): one membership row over the vocabulary, not N x n compares
        seen = torch.zeros(draft_probs.shape, dtype=torch.bool, device=drafted.device)
        again = seen.scatter_(-1, target_top, True).gather(-1, drafted)
    return torch.cat([target_top, drafted], dim=-1), torch.cat([dup, again], dim=-1)


def rest_logsumexp(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Log-sum-exp of ``logits`` outside the candidate tokens ``ids`` (the sparse variant's rest entry).

    Shifted by the largest candidate logit, which is the row's maximum when the candidates hold the row's top-1
    (:func:`candidate_tokens` puts it first): one exp pass over the row, the candidates zeroed in place, one sum.
    A rest whose terms all underflow (every other logit more than ~87 below the maximum in float32) is ``-inf``,
    as is an empty rest (candidates covering the vocabulary).

    Args:
        logits: ``[..., V]`` float32.
        ids: ``[..., C]`` int64 candidate ids (duplicates allowed), the row's top-1 among them.

    Returns:
        ``[...]`` float32.
    """
    m = logits.gather(-1, ids).amax(dim=-1, keepdim=True)  # [..., 1]
    e = (logits - m).exp_()
    e.scatter_(-1, ids, 0.0)
    return e.sum(dim=-1).log_() + m[..., 0]
