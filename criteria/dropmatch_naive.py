"""DropMatch naive token matching: accept a draft that any MC-dropout head also produces.

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (4).
"""

from __future__ import annotations

import torch

from criteria.base import VerifyInputs
from criteria.dropmatch_base import DropMatchBase
from criteria.registry import CRITERIA


@CRITERIA.register("dropmatch_naive")
class DropMatchNaive(DropMatchBase):
    """Accept draft t iff it is in the set of head tokens ``{y_t^(i)}``; stop at the first miss.

    Paper: Eq. (4), ``y_hat_t in {y_t^(i) | i = 1..K}``.

    Head tokens are argmax of each head at T = 0 and samples of ``softmax(l^(i) / T)`` at T > 0. Next
    token, RNG use and settings: see :class:`criteria.dropmatch_base.DropMatchBase`. With
    ``p_drop = 0`` every head equals the target head, so the rule equals ``greedy_match`` at T = 0.

    Args: ``majority`` (trace only), ``include_target``: see :class:`criteria.dropmatch_base.DropMatchBase`.

    Attributes:
        name: ``"dropmatch_naive"``.
        needs_heads: True.
        needs_draft_probs: False (``draft_probs``, if given, only fills the JS fields of the trace).
    """

    name = "dropmatch_naive"
    needs_draft_probs = False

    def accept_test(
        self, inputs: VerifyInputs, head_token_ids: torch.Tensor, every_position: bool = True
    ) -> tuple[torch.Tensor, None]:
        """Eq. (4) at each draft position: ``[B, L]`` bool; no JS statistics."""
        return (head_token_ids == inputs.draft_token_ids.unsqueeze(-1)).any(dim=-1), None  # [B, L]
