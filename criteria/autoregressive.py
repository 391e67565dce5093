"""The autoregressive step: emit the target's own token (no drafts, nothing to accept).

Paper: the AR baseline of every speed table; also the first output token of every run, which comes from the
prefill's last position (as in vLLM).
"""

from __future__ import annotations

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, target_tokens
from criteria.registry import CRITERIA


@CRITERIA.register("autoregressive")
class Autoregressive:
    """``next_token_ids`` = argmax (T = 0) or a sample of ``softmax(target_logits / T)`` at position 0; ``L = 0``.

    RNG: none at T = 0; one ``torch.rand([B])`` at T > 0.

    Attributes:
        name: ``"autoregressive"``; needs_heads / needs_draft_probs / needs_hidden: False.
    """

    name = "autoregressive"
    needs_heads = False
    needs_draft_probs = False
    needs_hidden = False

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """One step. Raises ValueError when drafts are given (``L > 0``) or inputs are malformed."""
        B, L, _ = check_inputs(inputs, rule=self.name)
        if L != 0:
            raise ValueError(f"{self.name}: takes no drafts (L = 0); got L={L}")
        nxt = target_tokens(inputs.target_logits[:, 0], inputs.temperature, inputs.generator)  # [B]
        empty = inputs.draft_token_ids.new_zeros((B, 0), dtype=bool)
        return AcceptResult(
            accept_mask=empty, num_accepted=nxt.new_zeros(B), next_token_ids=nxt, trace=None
        )

    def __repr__(self) -> str:
        return "Autoregressive()"
