"""Decoding along one MC-dropout path: the token of dropout head 1 at every step (no drafts).

Paper: DropMatch (arXiv 2603.03333) Sec. 3.1, Table 1 and Fig. 3 (single-path decodes H_i, Eq. 1-3).
"""

from __future__ import annotations

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, target_tokens
from criteria.registry import CRITERIA


@CRITERIA.register("dropout_path")
class DropoutPath:
    """Emit the token of the single dropout head at the last position (``L = 0``: an autoregressive step).

    Paper: Table 1's "H_i" rows: the target decodes alone through one MC-dropout LM head with a fresh mask
    per step (Eq. 1-3); the run's seed and ``dropmatch.path`` select the path (the masks' stream).

    RNG: none at T = 0; one ``torch.rand([B])`` at T > 0 (after the masks, which the verify round draws).

    Attributes:
        name: ``"dropout_path"``; needs_heads: True (a HeadSpec with K = 1); needs_draft_probs / needs_hidden: False.
    """

    name = "dropout_path"
    needs_heads = True
    needs_draft_probs = False
    needs_hidden = False

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """One step: ``next_token_ids`` ``[B]`` = head 1's token at position 0; nothing accepted.

        Raises:
            ValueError: drafts given (``L > 0``), K != 1, or malformed inputs.
        """
        B, L, _ = check_inputs(inputs, rule=self.name, need_heads=True)
        if L != 0 or inputs.head_logits.shape[2] != 1:
            raise ValueError(
                f"{self.name}: needs L = 0 and K = 1 head; got L={L}, K={inputs.head_logits.shape[2]}"
            )
        head = inputs.head_logits[:, 0, 0]  # [B, V]
        nxt = target_tokens(head, inputs.temperature, inputs.generator)  # [B]
        empty = inputs.draft_token_ids.new_zeros((B, 0), dtype=bool)
        return AcceptResult(
            accept_mask=empty, num_accepted=nxt.new_zeros(B), next_token_ids=nxt, trace=None
        )

    def __repr__(self) -> str:
        return "DropoutPath()"
