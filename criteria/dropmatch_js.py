"""DropMatch JS-divergence criterion with the majority-vote fallback (the paper's main rule).

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (5)-(7), Algorithm 1.
"""

from __future__ import annotations

import torch

from criteria.base import VerifyInputs
from criteria.divergence import majority_token
from criteria.dropmatch_base import DropMatchBase, js_statistics
from criteria.registry import CRITERIA


@CRITERIA.register("dropmatch_js")
class DropMatchJS(DropMatchBase):
    """Accept draft t iff ``JS(p_hat_t || p_bar_t) <= max_i JS(p_t^(i) || p_bar_t)`` or the heads'
    majority token equals the draft; stop at the first rejection.

    Paper: Eq. (5) centroid, Eq. (6) JS test, Eq. (7) majority test, Algorithm 1.

    ``p_hat_t`` is ``draft_probs``; head probabilities ``p^(i) = softmax(l^(i) / T)`` and the centroid
    ``softmax(mean_i l^(i) / T)`` use T = 1 when greedy (T = 0). The majority is a plurality vote with
    ties going to the token of the lowest head index (:func:`criteria.divergence.majority_token`).
    Head tokens, next token, RNG use and settings: see :class:`criteria.dropmatch_base.DropMatchBase`.
    With ``p_drop = 0`` every head equals the centroid (max JS = 0 up to rounding), so a draft
    distribution different from the target's fails Eq. (6) and the rule equals ``greedy_match`` at
    T = 0 (Eq. (7) then means "draft = target argmax").

    Args:
        K: number of MC-dropout heads (integer >= 1).
        p_drop: dropout probability in ``[0, 1)``.

    Attributes:
        name: ``"dropmatch_js"``.
        num_heads: K.
        p_drop: p_drop.
        needs_draft_probs: True.
    """

    name = "dropmatch_js"
    needs_draft_probs = True

    def accept_test(
        self, inputs: VerifyInputs, head_token_ids: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Eq. (6) OR Eq. (7) at each draft position: ``[B, L]`` bool, and ``(js_draft, js_heads_max)``."""
        L = inputs.draft_token_ids.shape[1]
        js_draft, js_heads_max = js_statistics(inputs.head_logits[:, :L], inputs.draft_probs, inputs.temperature)
        majority, _ = majority_token(head_token_ids)  # [B, L]
        ok = (js_draft <= js_heads_max) | (majority == inputs.draft_token_ids)  # [B, L]
        return ok, (js_draft, js_heads_max)
