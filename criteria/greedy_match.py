"""Exact-match verification for greedy decoding (lossless at temperature 0).

Paper: Leviathan et al. 2023, Sec. 2 (greedy case of Alg. 1); DropMatch baseline "SD" at T = 0.
"""

from __future__ import annotations

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, finish_round
from criteria.registry import CRITERIA


@CRITERIA.register("greedy_match")
class GreedyMatch:
    """Accept draft i iff it equals the target's argmax at i; stop at the first mismatch.

    Paper: Leviathan et al. 2023, Alg. 1 with one-hot p (greedy).

    The next token is the target argmax at the first rejected position, or the bonus argmax at L
    when all drafts match. ``inputs.temperature`` is ignored (always argmax), no RNG is used,
    ``draft_probs`` and ``head_logits`` are ignored.

    Attributes:
        name: ``"greedy_match"``.
        needs_heads / needs_draft_probs / needs_hidden: False.
    """

    name = "greedy_match"
    needs_heads = False
    needs_draft_probs = False
    needs_hidden = False

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]`` int64, ``target_logits`` ``[B, L+1, V]`` float.
            trace: if True, ``trace = {"target_token_ids": [B, L] int64}`` (target argmax per draft position).

        Returns:
            :class:`AcceptResult`; ``accept_mask`` ``[B, L]``, ``num_accepted`` ``[B]``, ``next_token_ids`` ``[B]``,
            ``target_argmax`` ``[B, L]`` (the argmax it tested against).

        Raises:
            ValueError: malformed inputs (see :func:`criteria.common.check_inputs`).
        """
        _, L, _ = check_inputs(inputs, rule=self.name)
        target_ids = inputs.target_logits.argmax(dim=-1)  # [B, L+1]
        ok = inputs.draft_token_ids == target_ids[:, :L]  # [B, L]
        info = {"target_token_ids": target_ids[:, :L]} if trace else None
        res = finish_round(ok, inputs.target_logits, 0.0, None, info)
        res.target_argmax = target_ids[:, :L]  # what the verify round would compute again
        return res

    def __repr__(self) -> str:
        return "GreedyMatch()"
