"""DropMatch JS-divergence criterion with the majority-vote fallback (the paper's main rule).

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (5)-(7), Algorithm 1.
"""

from __future__ import annotations

import torch

from criteria.base import VerifyInputs
from criteria.dropmatch_base import DropMatchBase, js_inputs, js_statistics, majority_vote
from criteria.registry import CRITERIA


@CRITERIA.register("dropmatch_js")
class DropMatchJS(DropMatchBase):
    """Accept draft t iff ``JS(p_hat_t || p_bar_t) <= max_i JS(p_t^(i) || p_bar_t)`` or the heads'
    majority token equals the draft; stop at the first rejection.

    Paper: Eq. (5) centroid, Eq. (6) JS test, Eq. (7) majority test, Algorithm 1.

    ``p_hat_t`` is ``draft_probs``; head probabilities ``p^(i) = softmax(l^(i) / T)`` and the centroid
    ``softmax(mean_i l^(i) / T)`` use T = 1 when greedy (T = 0). The majority (Eq. 7) is strict (more than
    K/2 heads) by default or a plurality with ``majority="plurality"`` (:func:`criteria.dropmatch_base.majority_vote`).
    Head tokens, next token, RNG use and settings: see :class:`criteria.dropmatch_base.DropMatchBase`.
    With ``p_drop = 0`` every head equals the centroid (max JS = 0 up to rounding), so a draft
    distribution different from the target's fails Eq. (6) and the rule equals ``greedy_match`` at
    T = 0 (Eq. (7) then means "draft = target argmax").

    Args: ``majority``, ``include_target``: see :class:`criteria.dropmatch_base.DropMatchBase`.

    Attributes:
        name: ``"dropmatch_js"``.
        needs_heads: True.
        needs_draft_probs: True.
    """

    name = "dropmatch_js"
    needs_draft_probs = True

    def accept_test(
        self, inputs: VerifyInputs, head_token_ids: torch.Tensor, every_position: bool = True
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Eq. (6) OR Eq. (7) at each draft position: ``[B, L]`` bool, and ``(js_draft, js_heads_max)``.

        With ``every_position=False`` the JS test (Eq. 6, the expensive part: K + 1 distributions over V) runs
        only where it can change the round: at positions the majority (Eq. 7) does not already accept, up to
        each row's first rejection, one position at a time over the rows still accepting. The values it computes
        there are those of the full computation (same per-row operations), so the decisions are the same; the
        test is then exact up to the first rejection only, and no JS values are returned. The sparse variant
        (``head_candidates``) tests every position at once either way (its JS is over C + 1 entries).
        """
        L = inputs.draft_token_ids.shape[1]
        majority, valid = majority_vote(head_token_ids, self.majority)  # [B, L], [B, L]
        by_majority = valid & (majority == inputs.draft_token_ids)  # [B, L]
        heads, draft_probs = js_inputs(
            inputs, L
        )  # [B, L, K, V], [B, L, V] (or C: the sparse variant)
        if every_position or inputs.head_candidates is not None:
            # the sparse variant's JS is over C + 1 entries: one call for all positions costs less than the
            # per-position calls below (each a dozen small kernels), with the same values
            js_draft, js_heads_max = js_statistics(heads, draft_probs, inputs.temperature)
            return (js_draft <= js_heads_max) | by_majority, (js_draft, js_heads_max)
        ok = by_majority.clone()
        alive = torch.ones(
            ok.shape[0], dtype=torch.bool, device=ok.device
        )  # [B] rows with no rejection yet
        for t in range(L):
            need = (
                (alive & ~by_majority[:, t]).nonzero().squeeze(-1)
            )  # rows whose position t needs Eq. (6)
            if need.numel():
                js_draft, js_heads_max = js_statistics(
                    heads[need, t : t + 1], draft_probs[need, t : t + 1], inputs.temperature
                )
                ok[need, t] = js_draft[:, 0] <= js_heads_max[:, 0]
            alive = alive & ok[:, t]
            if not bool(alive.any()):
                break
        return ok, None
