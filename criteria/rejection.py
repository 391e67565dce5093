"""Lossless speculative sampling: accept with probability min(1, p/q), resample from the residual.

Paper: Leviathan et al. 2023 (arXiv 2211.17192), Alg. 1; Chen et al. 2023 (arXiv 2302.01318), Alg. 2.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import accept_prefix, check_inputs, sample_categorical, select_position
from criteria.greedy_match import GreedyMatch
from criteria.registry import CRITERIA


@CRITERIA.register("rejection")
class RejectionSampling:
    """Standard speculative sampling; the output follows the target distribution exactly.

    Paper: Leviathan et al. 2023, Alg. 1.

    At temperature T > 0, with ``p = softmax(target_logits / T)`` and ``q = draft_probs``, draft
    ``x_i`` is accepted iff ``u_i * q_i(x_i) < p_i(x_i)`` (probability ``min(1, p/q)``; a token with
    ``p = 0`` is never accepted), left to right, stopping at the first rejection. At the first rejected
    position r the recovered token is sampled from ``max(0, p_r - q_r)`` normalised (falling back to
    ``p_r`` if that residual has no mass); when all L drafts are accepted the bonus token is sampled
    from ``p_L``. At T = 0 the rule is exactly :class:`criteria.greedy_match.GreedyMatch`.

    RNG (T > 0 only; the generator in ``inputs``): first one ``torch.rand([B, L])`` for the acceptance
    uniforms (drawn for every position, also past the first rejection, so consumption depends only on
    the shape), then one ``torch.rand([B])`` for the emitted token (inverse-CDF sampling).

    Attributes:
        name: ``"rejection"``.
        needs_heads: False.
        needs_draft_probs: True (used when T > 0; at T = 0 ``draft_probs`` may be None).
        needs_hidden: False.
    """

    name = "rejection"
    needs_heads = False
    needs_draft_probs = True
    needs_hidden = False

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]`` int64; ``target_logits`` ``[B, L+1, V]`` float;
                ``draft_probs`` ``[B, L, V]`` float (required when T > 0: the distribution each draft
                was sampled from, at the same temperature); ``temperature``; ``generator`` (T > 0).
            trace: if True and T > 0, ``trace = {"accept_probs": [B, L] float32}`` with
                ``min(1, p/q)`` at each draft position; at T = 0 the trace of ``greedy_match``.

        Returns:
            :class:`AcceptResult`.

        Raises:
            ValueError: malformed inputs, or T > 0 without ``draft_probs`` or ``generator``.
        """
        T = inputs.temperature
        check_inputs(inputs, rule=self.name, need_draft_probs=T > 0)
        if T == 0:
            return GreedyMatch()(inputs, trace=trace)
        draft, gen = inputs.draft_token_ids, inputs.generator
        B, L = draft.shape
        p = torch.softmax(inputs.target_logits.float() / T, dim=-1)  # [B, L+1, V]
        q = inputs.draft_probs.float()  # [B, L, V]
        p_draft = p[:, :L].gather(-1, draft.unsqueeze(-1)).squeeze(-1)  # [B, L]
        q_draft = q.gather(-1, draft.unsqueeze(-1)).squeeze(-1)  # [B, L]
        u = torch.rand((B, L), generator=gen, device=p.device, dtype=torch.float32)  # [B, L]
        accept_mask, num_accepted = accept_prefix(u * q_draft < p_draft)  # [B, L], [B]

        q_pad = torch.cat(
            [q, torch.zeros_like(p[:, :1])], dim=1
        )  # [B, L+1, V]; q = 0 at the bonus slot
        p_at = select_position(p, num_accepted)  # [B, V]
        residual = (p_at - select_position(q_pad, num_accepted)).clamp_min(
            0.0
        )  # [B, V]; = p_L at bonus
        has_mass = residual.sum(dim=-1, keepdim=True) > 0  # [B, 1]
        next_token_ids = sample_categorical(torch.where(has_mass, residual, p_at), gen)  # [B]

        info = None
        if trace:
            # P(u * q < p) over u ~ U[0, 1): min(1, p/q); 1 if q = 0 < p; 0 if p = 0.
            ratio = (p_draft / q_draft.clamp_min(torch.finfo(torch.float32).tiny)).clamp_max(
                1.0
            )  # [B, L]
            info = {"accept_probs": torch.where(q_draft > 0, ratio, (p_draft > 0).float())}
        return AcceptResult(
            accept_mask=accept_mask,
            num_accepted=num_accepted,
            next_token_ids=next_token_ids,
            trace=info,
        )

    def __repr__(self) -> str:
        return "RejectionSampling()"
