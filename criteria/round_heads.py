"""The round's heads: the plain head and the K MC-dropout heads on the verify pass's final hidden states.

Paper: DropMatch (arXiv 2603.03333) Eq. (1)-(3): each head reads the hidden state under its own dropout mask
(kept entries scaled by 1 / (1 - p_drop)) through the target's LM head. The exact rule multiplies the plain rows and
the head rows in one matmul over the whole vocabulary; the sparse variant's heads (``dropmatch.sparse_top_n``) are
built by :mod:`criteria.sparse_heads`.

RNG: each row's masks, one ``torch.rand((N, K, d))`` from that row's generator for all N positions of the round,
whatever number of positions has heads, so a row's stream does not depend on it.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from criteria.base import RoundMeter
from criteria.dropout_heads import HeadSpec, LMHead, dropped_hidden, mask_uniforms
from criteria.sparse_heads import sparse_round_heads


def head_logits(
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    heads: HeadSpec,
    generators: Sequence[torch.Generator | None],
    *,
    positions: int | None = None,
    draft_probs: torch.Tensor | None = None,
    target_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Plain and dropout-head logits of B rows (Eq. 1-3), the plain rows and the head rows in one matmul.

    RNG: the masks of all N positions are drawn (one ``torch.rand((N, K, d))`` per row, as
    :func:`criteria.dropout_heads.dropout_masks`) whatever ``positions`` is, so the stream does not depend on it.

    Args:
        hidden: ``[B, N, d]`` final hidden states (LM-head input), the model's dtype.
        lm_head: the target's LM head (a vocabulary shard with ``gather`` under tensor parallelism; the sparse
            variant needs the whole head).
        heads: K, p_drop and the sparse variant's top-N; ``K = 0``: plain head only.
        generators: B generators on ``hidden``'s device (used only when ``K >= 1`` and ``p_drop > 0``).
        positions: P, the leading positions whose dropout heads are computed (default: all N).
        draft_probs: ``[B, L, V]`` (the sparse variant's candidates use the draft's top-N).
        target_logits: ``[B, N, V]`` or None: the plain head's logits as an engine computed them itself
            (llama.cpp, in the GGUF's own precision). They are returned as the plain logits and the matmul has
            only the dropout-head rows (same masks, same head rows); without heads nothing is multiplied, and
            ``hidden`` / ``lm_head`` may be None.

    Returns:
        ``target_logits`` ``[B, N, V]`` float32; ``head_logits`` ``[B, P, K, V]`` in the matmul's dtype (exact) or
        ``[B, P, K, C + 1]`` float32 at the C candidate tokens plus one entry for the rest of the vocabulary
        (sparse), None when K = 0; ``candidates`` ``[B, P, C + 1]`` int64 token ids of the sparse heads' last dim
        (``-1`` for the rest entry), else None.
    """
    return round_heads(
        hidden,
        lm_head,
        heads,
        generators,
        positions=positions,
        draft_probs=draft_probs,
        target_logits=target_logits,
    )[:3]


def round_heads(
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    heads: HeadSpec,
    generators: Sequence[torch.Generator | None],
    *,
    positions: int | None = None,
    draft_probs: torch.Tensor | None = None,
    target_logits: torch.Tensor | None = None,
    draft_token_ids: torch.Tensor | None = None,
    lazy: bool = False,
    meter: RoundMeter | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, dict[str, Callable | None]]:
    """:func:`head_logits`, plus the sparse variant's closures as :class:`criteria.base.VerifyInputs` fields
    (both None unless ``heads.top_n``): ``sparse_support`` (with ``lazy``) and ``exact_heads`` (with
    ``heads.escape``). ``meter`` (:class:`criteria.base.RoundMeter`) hears when the plain float32 logits are ready,
    except on the exact rule's path with ``p_drop > 0`` (one matmul for the plain and the head rows), and each
    escape rung the round's closure serves.

    With ``lazy`` the sparse heads are those of the heads' tokens only (the drafts ``draft_token_ids`` ``[B, L]``
    among the candidates) and Eq. (6)'s support is left to ``sparse_support``, which a rule calls at the positions
    it needs; without, the heads carry that support at every position
    (:func:`criteria.sparse_heads.sparse_round_heads`)."""
    none = {"sparse_support": None, "exact_heads": None}
    given = target_logits is not None
    if given and not heads.active:
        ready = target_logits.float()
        _plain_ready(meter)
        return ready, None, None, none
    if hidden is None or lm_head is None:
        raise ValueError(
            "head_logits needs hidden and lm_head unless target_logits is given without heads"
        )
    B, N, d = hidden.shape
    P = N if positions is None else positions
    W, b = lm_head.rows()
    flat = hidden.reshape(B * N, d)
    if not heads.active or heads.p_drop == 0:
        return *_plain_heads(flat, lm_head, heads, target_logits, (B, N, P), meter), None, none
    if heads.top_n is None:
        dropped = dropped_inputs(
            hidden, generators, heads.K, heads.p_drop, P
        )  # [B*P, K, d], Eq. (1)-(2)
        # plain rows first (unless given), then the head rows: [B*N + B*P*K, V], Eq. (3), one matmul
        rows = torch.cat([flat[: 0 if given else B * N], dropped.reshape(B * P * heads.K, d)])
        logits = lm_head.full(torch.nn.functional.linear(rows, W, b))
        V = logits.shape[-1]
        plain = target_logits.float() if given else logits[: B * N].float().view(B, N, V)
        return plain, logits[logits.shape[0] - B * P * heads.K :].view(B, P, heads.K, V), None, none
    if lm_head.gather is not None:
        raise ValueError(
            "dropmatch.sparse_top_n needs the whole LM head; under tensor parallelism use the exact rule "
            "(dropmatch.sparse_top_n=null)"
        )
    target = (
        target_logits.float()
        if given
        else torch.nn.functional.linear(flat, W, b).float().view(B, N, -1)
    )  # [B, N, V]
    _plain_ready(meter)
    # the masks after the plain logits (no other draw between them: the same streams), so the meter counts them
    # in the rule's decision
    dropped = dropped_inputs(
        hidden, generators, heads.K, heads.p_drop, P
    )  # [B*P, K, d], Eq. (1)-(2)
    return target, *sparse_round_heads(
        target[:, :P],
        dropped.view(B, P, heads.K, d),
        W,
        b,
        heads,
        draft_probs,
        draft_token_ids,
        lazy,
        meter,
    )


def _plain_heads(
    flat: torch.Tensor,
    lm_head: LMHead,
    heads: HeadSpec,
    target_logits: torch.Tensor | None,
    shape: tuple[int, int, int],
    meter: RoundMeter | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`round_heads` without dropout (no heads, or ``p_drop = 0``): the plain logits ``[B, N, V]`` float32 from
    ``flat`` ``[B*N, d]`` (or ``target_logits``), and with heads K copies of them ``[B, P, K, V]`` in the matmul's
    dtype; ``shape`` is ``(B, N, P)``."""
    B, N, P = shape
    W, b = lm_head.rows()
    plain = (
        target_logits.float()
        if target_logits is not None
        else lm_head.full(torch.nn.functional.linear(flat, W, b)).view(B, N, -1)
    )
    ready = plain.float()
    _plain_ready(meter)
    # p = 0: every head is the plain head; copies, so the rows are bitwise identical
    copies = (
        plain[:, :P, None].expand(B, P, heads.K, plain.shape[-1]).contiguous()
        if heads.active
        else None
    )
    return ready, copies


def _plain_ready(meter: RoundMeter | None) -> None:
    if meter is not None:
        meter.plain()


def dropped_inputs(
    hidden: torch.Tensor, generators: Sequence[torch.Generator | None], K: int, p: float, P: int
) -> torch.Tensor:
    """The K heads' inputs at the first P positions, ``[B*P, K, d]`` (Eq. 1-2); each row's masks drawn for all N
    positions from its own generator (one ``torch.rand((N, K, d))``), so the stream does not depend on P."""
    B, N, d = hidden.shape
    # every row's uniforms in one buffer, compared at once (the masks of dropout_masks, row by row)
    u = torch.empty((B, N, K, d), dtype=torch.float32, device=hidden.device)
    for row, g in enumerate(generators):
        mask_uniforms(N, K, d, g, hidden.device, out=u[row])
    keep = u[:, :P] < (1.0 - p)  # [B, P, K, d]
    return dropped_hidden(hidden[:, :P].reshape(B * P, d), keep.reshape(B * P, K, d), p)
