"""Shared building blocks of the acceptance rules: entry checks, prefix closure, token emission.

Paper: Leviathan et al. 2023, Alg. 1 (accept left to right, stop at the first rejection, emit one
target token); DropMatch (arXiv 2603.03333) Sec. 3.2 (same round structure).

Every function here is pure: inputs are never mutated, nothing is synced to the host, and random
draws come only from the ``torch.Generator`` passed in (never the global RNG).
"""

from __future__ import annotations

import math

import torch

from criteria.base import AcceptResult, VerifyInputs


def check_inputs(
    inputs: VerifyInputs,
    *,
    rule: str,
    need_draft_probs: bool = False,
    need_heads: bool = False,
) -> tuple[int, int, int]:
    """Check the shapes, dtypes and settings of one round on entry (shapes only: no device sync).

    Paper: criterion seam (``criteria/base.py``).

    Args:
        inputs: the round. ``draft_token_ids`` ``[B, L]`` int64, ``target_logits`` ``[B, L+1, V]``
            floating; ``draft_probs`` ``[B, L, V]`` and ``head_logits`` ``[B, L+1, K, V]`` are checked
            when given or required.
        rule: registry key of the calling rule, used in error messages.
        need_draft_probs: ``draft_probs`` must be given.
        need_heads: ``head_logits`` ``[B, L+1, K, V]`` (or ``[B, L, K, V]``; last dim C with ``head_candidates``)
            must be given, with any K >= 1.

    Returns:
        ``(B, L, V)``.

    Raises:
        ValueError: a tensor is missing, has the wrong rank, dtype or shape, the temperature is
            negative or not finite, or a generator is missing while ``temperature > 0``.
    """
    draft, target = inputs.draft_token_ids, inputs.target_logits
    if draft.ndim != 2 or draft.dtype != torch.int64:
        raise ValueError(
            f"{rule}: draft_token_ids must be int64 [B, L]; got {draft.dtype} of shape {tuple(draft.shape)}"
        )
    B, L = draft.shape
    if target.ndim != 3 or not target.is_floating_point() or target.shape[:2] != (B, L + 1):
        raise ValueError(
            f"{rule}: target_logits must be floating [B, L+1, V] = [{B}, {L + 1}, V]; "
            f"got {target.dtype} of shape {tuple(target.shape)}"
        )
    V = target.shape[-1]
    if need_draft_probs and inputs.draft_probs is None:
        raise ValueError(
            f"{rule}: draft_probs is required ([B, L, V] = [{B}, {L}, {V}]) but is None"
        )
    if inputs.draft_probs is not None and tuple(inputs.draft_probs.shape) != (B, L, V):
        raise ValueError(
            f"{rule}: draft_probs must have shape [B, L, V] = [{B}, {L}, {V}]; "
            f"got {tuple(inputs.draft_probs.shape)}"
        )
    _check_heads(inputs, rule, need_heads, B, L, V)
    T = inputs.temperature
    if not (isinstance(T, (int, float)) and math.isfinite(T) and T >= 0):
        raise ValueError(
            f"{rule}: temperature={T!r} is invalid; allowed values: a finite float >= 0 (0 = greedy)"
        )
    if T > 0 and inputs.generator is None:
        raise ValueError(
            f"{rule}: temperature={T} > 0 needs a seeded torch.Generator in inputs.generator"
        )
    return B, L, V


def _check_heads(inputs: VerifyInputs, rule: str, need_heads: bool, B: int, L: int, V: int) -> None:
    """The head logits' and the sparse candidates' shapes (:func:`check_inputs`); raises its ValueErrors."""
    heads = inputs.head_logits
    if need_heads and heads is None:
        raise ValueError(
            f"{rule}: head_logits [B, L+1, K, V] is required (dropmatch.K >= 1) but is None"
        )
    cand = inputs.head_candidates
    width = V if cand is None else cand.shape[-1]  # the sparse variant: heads at C candidate tokens
    if heads is not None and (
        heads.ndim != 4
        or heads.shape[2] < 1
        or heads.shape[0] != B
        or heads.shape[1] not in (L, L + 1)
        or heads.shape[3] != width
    ):
        raise ValueError(
            f"{rule}: head_logits must have shape [B, L+1 (or L), K, V] = [{B}, {L + 1}, K>=1, {width}]; "
            f"got {tuple(heads.shape)}"
        )
    if cand is not None and heads is not None and tuple(cand.shape) != (B, heads.shape[1], width):
        raise ValueError(
            f"{rule}: head_candidates must have shape [B, P, C] = [{B}, {heads.shape[1]}, {width}]; "
            f"got {tuple(cand.shape)}"
        )


def accept_prefix(ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Make a per-position acceptance test prefix-closed (left-to-right scan, stop at first failure).

    Paper: Leviathan et al. 2023, Alg. 1 (first rejection ends the round).

    Args:
        ok: ``[B, L]`` bool, the rule's test at every position, independent of earlier positions.

    Returns:
        ``accept_mask`` ``[B, L]`` bool (True up to, excluding, the first False) and
        ``num_accepted`` ``[B]`` int64 in ``[0, L]``.
    """
    accept_mask = ok.to(torch.int64).cumprod(dim=-1).bool()  # [B, L]
    return accept_mask, accept_mask.sum(dim=-1)


def select_position(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Pick, per batch row, the slice at one position along dim 1.

    Args:
        x: ``[B, P, ...]`` any dtype.
        index: ``[B]`` int64 in ``[0, P)``.

    Returns:
        ``[B, ...]``, ``x[b, index[b]]``.
    """
    rows = torch.arange(x.shape[0], device=x.device)
    return x[rows, index]


def sample_categorical(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Draw one token per row by inverse-CDF sampling (one uniform per row).

    Paper: none (standard categorical sampling); used for every random token a rule emits.

    RNG: exactly one ``torch.rand(probs.shape[:-1], generator=generator)`` call, so the stream
    consumed depends only on the shape. Zero-probability tokens are never drawn. Rows need not be
    normalised (the uniform is scaled by the row total); a row must have positive total mass.

    Args:
        probs: ``[..., V]`` float, non-negative.
        generator: seeded ``torch.Generator`` on ``probs.device``.

    Returns:
        ``[...]`` int64 token ids in ``[0, V)``.
    """
    cdf = probs.to(torch.float32).cumsum(dim=-1)  # [..., V]
    u = torch.rand(
        probs.shape[:-1], generator=generator, device=probs.device, dtype=torch.float32
    )  # [...]
    u = u * cdf[..., -1]
    idx = torch.searchsorted(cdf, u.unsqueeze(-1).contiguous(), right=True).squeeze(-1)  # [...]
    return idx.clamp_max(probs.shape[-1] - 1)


def target_tokens(
    target_logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> torch.Tensor:
    """The target's own token at each given position: argmax (T = 0) or a sample of softmax(logits/T).

    Paper: DropMatch Sec. 3.2 (correction / bonus token from the target's plain LM head).

    RNG: none at T = 0; otherwise one :func:`sample_categorical` call on ``[...]``.

    Args:
        target_logits: ``[..., V]`` float, raw logits.
        temperature: ``>= 0``.
        generator: required when ``temperature > 0``.

    Returns:
        ``[...]`` int64.
    """
    if temperature == 0:
        return target_logits.argmax(dim=-1)
    return sample_categorical(torch.softmax(target_logits.float() / temperature, dim=-1), generator)


def _greedy_next(
    greedy: torch.Tensor, target_logits: torch.Tensor, num_accepted: torch.Tensor
) -> torch.Tensor:
    """The argmax at position ``num_accepted`` ``[B]``: off ``greedy`` ``[B, L]`` where it is a drafted position,
    over the bonus position's logits ``target_logits[:, L]`` where every draft was accepted. ``[B]`` int64."""
    L = greedy.shape[1]
    at = num_accepted.clamp(max=max(L - 1, 0)).unsqueeze(-1)  # [B, 1]
    next_token_ids = greedy.gather(-1, at).squeeze(-1) if L else num_accepted.clone()
    bonus = (num_accepted >= L).nonzero().squeeze(-1)  # rows past every draft
    if bonus.numel():
        next_token_ids[bonus] = target_logits[bonus, L].argmax(dim=-1)
    return next_token_ids


def finish_round(
    ok: torch.Tensor,
    target_logits: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
    trace: dict[str, torch.Tensor] | None = None,
    greedy: torch.Tensor | None = None,
) -> AcceptResult:
    """Close ``ok`` under prefixes and emit the target's own token after the accepted prefix.

    The emitted token is taken at position ``num_accepted``: the first rejected position, or the
    bonus position L when every draft was accepted. Used by ``greedy_match`` and both DropMatch rules.
    At T = 0 with ``greedy`` (the argmax at the drafted positions, found already) a rejected position's token is
    read off it, and only the rows that reach the bonus position take an argmax over V.

    RNG: none at T = 0; otherwise one ``torch.rand([B])`` (see :func:`target_tokens`).

    Args:
        ok: ``[B, L]`` bool, per-position test.
        target_logits: ``[B, L+1, V]`` float, raw target logits.
        temperature: ``>= 0``.
        generator: required when ``temperature > 0``.
        trace: passed through to the result.
        greedy: ``[B, L]`` int64 or None, ``target_logits[:, :L].argmax(-1)`` (:attr:`VerifyInputs.target_greedy`).

    Returns:
        :class:`AcceptResult` with ``next_token_ids`` ``[B]`` int64.
    """
    accept_mask, num_accepted = accept_prefix(ok)  # [B, L], [B]
    if greedy is not None and temperature == 0:
        next_token_ids = _greedy_next(greedy, target_logits, num_accepted)
    else:
        logits_at = select_position(target_logits, num_accepted)  # [B, V]
        next_token_ids = target_tokens(logits_at, temperature, generator)  # [B]
    return AcceptResult(
        accept_mask=accept_mask,
        num_accepted=num_accepted,
        next_token_ids=next_token_ids,
        trace=trace,
    )
