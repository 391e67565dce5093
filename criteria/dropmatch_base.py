"""What both DropMatch rules share: settings, head tokens, JS statistics and the per-position trace.

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (4)-(7), Algorithm 1, Tables 2-3.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, finish_round, sample_categorical
from criteria.divergence import (
    LN2,
    agreement_pattern,
    majority_token,
)


def head_tokens(
    head_logits: torch.Tensor, temperature: float, generator: torch.Generator | None
) -> torch.Tensor:
    """The token y^(i) of each dropout head: argmax (T = 0) or a sample of softmax(l^(i) / T) (T > 0).

    Paper: Eq. (4) and Algorithm 1 (``y^(i) = argmax p^(i)``); Sec. 3.2 ("top-1 tokens or selected
    token by nucleus sampling") for T > 0 (no top-p here).

    RNG: none at T = 0; otherwise one ``torch.rand(head_logits.shape[:-1])`` (inverse CDF).

    Args:
        head_logits: ``[B, L, K, V]`` float, raw head logits at the draft positions.
        temperature: ``>= 0``.
        generator: required when ``temperature > 0``.

    Returns:
        ``[B, L, K]`` int64.
    """
    if temperature == 0:
        return head_logits.argmax(dim=-1)
    return sample_categorical(torch.softmax(head_logits.float() / temperature, dim=-1), generator)


def candidate_head_tokens(
    head_logits: torch.Tensor,
    candidates: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """:func:`head_tokens` of the sparse variant: each head's token among the C candidate tokens, as a token id.

    At T = 0 a tie between candidates goes to the lowest token id, as the exact rule's argmax over the vocabulary
    breaks it (its first index); the candidates come in score order, so a plain argmax over them would break
    ties differently, and bf16 logits tie often (their spacing is 0.125 between 16 and 32). At T > 0: a sample
    over the candidates in their order (:func:`head_tokens`).

    Args:
        head_logits: ``[B, L, K, C]`` float, the heads at the candidates (``-inf`` at a masked duplicate).
        candidates: ``[B, L, C]`` int64 token ids.
        temperature: ``>= 0``; generator: required when ``temperature > 0``.

    Returns:
        ``[B, L, K]`` int64 token ids.
    """
    if temperature > 0:
        return candidates.gather(-1, head_tokens(head_logits, temperature, generator))
    ids = candidates.unsqueeze(-2).expand(head_logits.shape)  # [B, L, K, C]
    tied = head_logits == head_logits.amax(dim=-1, keepdim=True)  # [B, L, K, C]
    return ids.masked_fill(~tied, torch.iinfo(ids.dtype).max).amin(dim=-1)


def round_head_tokens(
    inputs: VerifyInputs, L: int, temperature: float, generator: torch.Generator | None
) -> torch.Tensor:
    """The heads' tokens ``[B, L, K]`` int64 at the L drafted positions: :func:`head_tokens` over the vocabulary,
    or, in the sparse variant (``head_candidates``), :func:`candidate_head_tokens` (never the rest entry)."""
    if inputs.head_candidates is None:
        return head_tokens(inputs.head_logits[:, :L], temperature, generator)
    return candidate_head_tokens(
        inputs.head_logits[:, :L, :, :-1],
        inputs.head_candidates[:, :L, :-1],
        temperature,
        generator,
    )


def js_statistics(
    head_logits: torch.Tensor, draft_probs: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """JS divergence of the draft and of each head to the heads' centroid.

    Paper: Eq. (5)-(6), Algorithm 1. Head probabilities are ``p^(i) = softmax(l^(i) / T)`` and the
    centroid ``softmax(mean_i l^(i) / T)``, with T = 1 when greedy (T = 0), matching the draft
    probabilities the backends provide.

    Args:
        head_logits: ``[B, L, K, V]`` float, raw head logits at the draft positions.
        draft_probs: ``[B, L, V]`` float, the draft distribution ``p_hat``.
        temperature: ``>= 0``.

    Returns:
        ``js_draft`` ``[B, L]`` = ``JS(p_hat || p_bar)`` and ``js_heads_max`` ``[B, L]`` =
        ``max_i JS(p^(i) || p_bar)``, float32 nats in ``[0, ln 2]``.
    """
    T = temperature if temperature > 0 else 1.0
    scaled = head_logits.float() / T  # [B, L, K, V]
    # JS(p || c) = H((p + c) / 2) - (H(p) + H(c)) / 2 (entropies in nats): one log pass per distribution and one
    # over each mixture instead of two per pair; identical p and c give the same three sums, hence exactly 0
    c = torch.softmax(scaled.mean(dim=-2), dim=-1)  # [B, L, V], Eq. (5)
    p = torch.softmax(scaled, dim=-1)  # [B, L, K, V]
    h_c = torch.special.entr(c).sum(dim=-1)  # [B, L]
    h_p = torch.special.entr(p).sum(dim=-1)  # [B, L, K]
    h_mix = torch.special.entr(p.add_(c.unsqueeze(-2)).mul_(0.5)).sum(dim=-1)  # [B, L, K]
    js_heads = (h_mix - 0.5 * (h_p + h_c.unsqueeze(-1))).clamp(0.0, LN2)  # [B, L, K], Eq. (6) right
    q = draft_probs.float()
    h_q = torch.special.entr(q).sum(dim=-1)  # [B, L]
    js_draft = (torch.special.entr((q + c).mul_(0.5)).sum(dim=-1) - 0.5 * (h_q + h_c)).clamp(
        0.0, LN2
    )
    return js_draft, js_heads.amax(dim=-1)


def js_inputs(inputs: VerifyInputs, L: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The heads' logits and the draft distribution at the L drafted positions, in the heads' token space.

    Exact heads: ``head_logits[:, :L]`` ``[B, L, K, V]`` and ``draft_probs`` ``[B, L, V]``. Sparse variant
    (``head_candidates``): the heads at the C candidate tokens plus the rest-of-vocabulary entry, and the
    draft's probabilities there plus its mass outside the candidates (a masked duplicate candidate gets 0), so
    Eq. (5)-(6) compare distributions on one coarsened support of C + 1 entries; read from
    ``inputs.sparse_support`` at every position when the round left it there.
    """
    heads = inputs.head_logits[:, :L]
    cand = inputs.head_candidates
    if cand is None:
        return heads, inputs.draft_probs
    if inputs.sparse_support is not None:
        B = heads.shape[0]
        span = torch.arange(L, device=heads.device)
        rows, positions = span.new_tensor(range(B)).repeat_interleave(L), span.repeat(B)
        heads, cand = inputs.sparse_support(rows, positions)  # [B*L, K, C + 1], [B*L, C + 1]
        heads, cand = heads.view(B, L, *heads.shape[1:]), cand.view(B, L, -1)
    return heads, coarsened_draft(inputs.draft_probs[:, :L], cand[:, :L], heads)


def coarsened_draft(
    draft_probs: torch.Tensor, candidates: torch.Tensor, heads: torch.Tensor
) -> torch.Tensor:
    """The draft distribution on the sparse variant's support: its probabilities at the C candidates (0 at a
    masked duplicate, whose head logit is ``-inf``) plus its mass outside them.

    Args:
        draft_probs: ``[..., V]`` float; candidates: ``[..., C + 1]`` int64 (the last, ``-1``, the rest entry);
        heads: ``[..., K, C + 1]`` the heads on that support.

    Returns:
        ``[..., C + 1]`` float32 probabilities summing to 1.
    """
    return coarsen(draft_probs.gather(-1, candidates[..., :-1]), heads)


def coarsen(at_candidates: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """:func:`coarsened_draft` from the draft's probabilities already gathered at the C candidates ``[..., C]``."""
    q = at_candidates.float().masked_fill(
        torch.isneginf(heads[..., 0, :-1]), 0.0
    )  # duplicates count once
    q = torch.cat([q, (1.0 - q.sum(dim=-1, keepdim=True)).clamp_min(0.0)], dim=-1)  # + the rest
    return q / q.sum(dim=-1, keepdim=True)


def dropmatch_trace(
    inputs: VerifyInputs,
    head_token_ids: torch.Tensor,
    js: tuple[torch.Tensor, torch.Tensor] | None = None,
    majority: str = "strict",
) -> dict[str, torch.Tensor]:
    """Per-position analysis tensors of one round (Tables 2-3), the same for both DropMatch rules.

    Paper: Table 2 (agreement patterns, target probability of the majority token), Table 3 (JS
    divergences of accepted cases, by criterion).

    All conditions are evaluated at every draft position independently of the prefix closure (AND
    them with ``AcceptResult.accept_mask`` to keep only accepted positions).

    Args:
        inputs: the round (``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``,
            ``head_logits`` ``[B, L+1, K, V]``, optional ``draft_probs`` ``[B, L, V]``).
        head_token_ids: ``[B, L, K]`` int64, the heads' tokens the rule used.
        js: ``(js_draft, js_heads_max)`` if already computed; otherwise computed here when
            ``draft_probs`` is given.
        majority: Eq. (7) reading (:func:`majority_vote`) for ``draft_agrees_majority``.

    Returns:
        Dict with keys (``[B, L]`` unless noted):
        ``head_token_ids`` ``[B, L, K]`` int64; ``target_token_ids`` int64 (target argmax);
        ``majority_token_ids`` int64 and ``majority_counts`` int64 (plurality token and its votes,
        :func:`criteria.divergence.majority_token`);
        ``agreement_pattern`` int64 codes (names: :func:`criteria.divergence.agreement_pattern_names`);
        ``majority_target_prob`` float32, ``softmax(target_logits)`` at T = 1 of the majority token;
        ``accepted_by_naive`` bool (Eq. 4); ``draft_agrees_majority`` bool (Eq. 7 under ``majority``).
        Only when ``draft_probs`` is given: ``js_draft``, ``js_heads_max`` float32 (Eq. 6 sides);
        ``accepted_by_js`` bool (Eq. 6, first branch of Algorithm 1); ``accepted_by_majority`` bool
        (Eq. 7 and not Eq. 6: accepted only by the second branch of Algorithm 1).
    """
    draft = inputs.draft_token_ids  # [B, L]
    L = draft.shape[1]
    target = inputs.target_logits[:, :L]  # [B, L, V]
    maj_token, maj_count = majority_token(head_token_ids)  # [B, L], [B, L]
    _, maj_valid = majority_vote(head_token_ids, majority)  # [B, L]
    target_probs = torch.softmax(target.float(), dim=-1)  # [B, L, V]
    agrees = maj_valid & (maj_token == draft)  # [B, L]
    out = {
        "head_token_ids": head_token_ids,
        "target_token_ids": target.argmax(dim=-1),
        "majority_token_ids": maj_token,
        "majority_counts": maj_count,
        "agreement_pattern": agreement_pattern(head_token_ids),
        "majority_target_prob": target_probs.gather(-1, maj_token.unsqueeze(-1)).squeeze(-1),
        "accepted_by_naive": (head_token_ids == draft.unsqueeze(-1)).any(dim=-1),
        "draft_agrees_majority": agrees,
    }
    if js is None and inputs.draft_probs is not None:
        js = js_statistics(*js_inputs(inputs, L), inputs.temperature)
    if js is not None:
        js_draft, js_heads_max = js
        by_js = js_draft <= js_heads_max  # [B, L]
        out.update(
            js_draft=js_draft,
            js_heads_max=js_heads_max,
            accepted_by_js=by_js,
            accepted_by_majority=agrees & ~by_js,
        )
    return out


MAJORITY_MODES = ("strict", "plurality")


def majority_vote(head_token_ids: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The heads' majority token per position and whether it counts as a majority under ``mode``.

    Paper: Eq. (7), ``majority({y^(i)}) = y_hat``. ``strict`` (the paper's word, the default): more than
    K/2 heads vote for the token (a 2-2-1 or 1-1-1-1-1 split has no majority). ``plurality``: the most-voted
    token, ties to the earliest head (:func:`criteria.divergence.majority_token`), so a majority always exists.

    Args:
        head_token_ids: ``[..., K]`` int64.
        mode: ``"strict"`` or ``"plurality"``.

    Returns:
        ``(token [...] int64, valid [...] bool)``; Eq. (7) holds for a draft iff ``valid & (token == draft)``.

    Raises:
        ValueError: unknown ``mode`` (names ``dropmatch.majority`` and the allowed values).
    """
    if mode not in MAJORITY_MODES:
        raise ValueError(
            f"dropmatch.majority={mode!r} is invalid; allowed values: {', '.join(MAJORITY_MODES)}"
        )
    token, count = majority_token(head_token_ids)  # [...], [...]
    K = head_token_ids.shape[-1]
    valid = 2 * count > K if mode == "strict" else torch.ones_like(count, dtype=torch.bool)
    return token, valid


class DropMatchBase:
    """Settings and round structure shared by ``dropmatch_naive`` and ``dropmatch_js``.

    Paper: Sec. 3.1-3.2; Table 6 setting K = 5, p_drop = 0.3 (K and p_drop travel in a
    :class:`criteria.dropout_heads.HeadSpec`; the rule reads K off ``head_logits``).

    A subclass sets ``name`` and ``needs_draft_probs`` and implements :meth:`accept_test`. The round:
    head tokens from ``head_logits[:, :L]`` (the heads at the bonus position L are not used), the
    subclass's per-position test (OR the target's own argmax when ``include_target``), prefix closure, and
    the target's own token (``target_logits``, the plain head) at the first rejected position or at L:
    argmax (T = 0) or a sample of ``softmax(target_logits / T)``.

    RNG (T > 0 only, ``inputs.generator``): one ``torch.rand([B, L, K])`` for the head tokens, then one
    ``torch.rand([B])`` for the emitted token. None at T = 0.

    Args:
        majority: ``"strict"`` (default, the paper's "majority": more than K/2 heads) or ``"plurality"``
            (most votes, ties to the earliest head); see :func:`majority_vote`. Used by Eq. (7) and the trace.
        include_target: also accept a draft equal to the plain head's argmax (then DropMatch accepts a
            superset of greedy SD's tokens). Default False: Algorithm 1 tests only Eq. (6) and Eq. (7).

    Raises:
        ValueError: a setting out of range; the message names the ``dropmatch.*`` field and the allowed values.
    """

    name: str = ""
    needs_heads: bool = True
    needs_draft_probs: bool = False
    needs_hidden: bool = False
    heads_at_drafts_only: bool = (
        True  # the verify round need not compute heads at the bonus position
    )

    def __init__(self, majority: str = "strict", include_target: bool = False) -> None:
        if majority not in MAJORITY_MODES:
            raise ValueError(
                f"dropmatch.majority={majority!r} is invalid; allowed values: {', '.join(MAJORITY_MODES)}"
            )
        if not isinstance(include_target, bool):
            raise ValueError(
                f"dropmatch.include_target={include_target!r} is invalid; allowed values: true, false"
            )
        self.majority = majority
        self.include_target = include_target

    def accept_test(
        self, inputs: VerifyInputs, head_token_ids: torch.Tensor, every_position: bool = True
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Per-position acceptance test ``[B, L]`` bool, plus ``(js_draft, js_heads_max)`` if computed.

        ``every_position=False`` lets a rule skip work at positions the prefix closure makes irrelevant (after
        a row's first rejection): the test is exact up to and including that position, arbitrary after it.
        """
        raise NotImplementedError

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]`` int64, ``target_logits`` ``[B, L+1, V]`` float (row 0
                of the dropout-head helper), ``head_logits`` ``[B, L+1, K, V]`` float (K >= 1),
                ``draft_probs`` ``[B, L, V]`` (required if ``needs_draft_probs``),
                ``temperature``, ``generator`` (required when T > 0). Not mutated.
            trace: if True, ``AcceptResult.trace`` holds :func:`dropmatch_trace`'s tensors.

        Returns:
            :class:`AcceptResult`.

        Raises:
            ValueError: malformed inputs (see :func:`criteria.common.check_inputs`).
        """
        check_inputs(
            inputs, rule=self.name, need_draft_probs=self.needs_draft_probs, need_heads=True
        )
        L = inputs.draft_token_ids.shape[1]
        T, gen = inputs.temperature, inputs.generator
        heads = round_head_tokens(inputs, L, T, gen)  # [B, L, K]
        # untraced, the test may stop at a row's first rejection; include_target can turn that rejection into an
        # accept, after which the later positions need the test too
        ok, js = self.accept_test(
            inputs, heads, every_position=trace or self.include_target
        )  # [B, L], exact up to the first rejection
        if self.include_target:
            greedy = inputs.target_greedy  # [B, L] when the round read it off the candidates
            if greedy is None:
                greedy = inputs.target_logits[:, :L].argmax(dim=-1)
            ok = ok | (inputs.draft_token_ids == greedy)  # [B, L]
        info = dropmatch_trace(inputs, heads, js, self.majority) if trace else None
        return finish_round(ok, inputs.target_logits, T, gen, info, greedy=inputs.target_greedy)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(majority={self.majority!r}, include_target={self.include_target})"
