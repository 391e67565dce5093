"""Big Little Decoder: the small model keeps its tokens while it is confident and the large model does not
disagree too strongly.

Paper: Kim et al., "Speculative Decoding with Big Little Decoder" (BiLD, arXiv 2302.07863, NeurIPS 2023),
Sec. 3.1 (fallback policy: hand control to the large model when the small model's top probability falls below
alpha_FB) and Sec. 3.2 (rollback policy: roll back to the first small-model token whose distance to the large
model's prediction, the cross-entropy ``-log p_large(token)``, exceeds alpha_RB; the large model's token replaces it).
Defaults: those of the public research engine "Secure Speculative Decoding" (``bild_fallback_threshold`` 0.35,
``bild_rollback_threshold`` 8.0, its method table); the paper tunes both per task.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, finish_round
from criteria.knobs import knob_float, refuse_sampling
from criteria.registry import CRITERIA


@CRITERIA.register("bild")
class BigLittleDecoder:
    """Accept draft i iff ``max_v q_i(v) >= fallback_threshold`` and ``-log p_i(d_i) <= rollback_threshold``; stop
    at the first failure; emit the target's argmax there (or at L).

    Source: BiLD Sec. 3.1-3.2 (module docstring), greedy. ``q = draft_probs`` (``softmax`` of the draft's logits),
    ``p = softmax(target_logits)``. A draft position that fails the fallback test is one the small model would
    not have produced: BiLD hands that position to the large model, whose token is emitted, as here. The loop
    drafts L tokens per round, so this is BiLD with the small model's run capped at L tokens (a forced fallback
    after L: the bonus token is the target's). BiLD's cost savings from stopping the draft early are not modelled;
    its tokens are.

    Ends: ``fallback_threshold = 0`` with a large ``rollback_threshold`` accepts every draft the target gives
    probability ``>= exp(-rollback_threshold)`` (the permissive end); no setting equals greedy SD (BiLD never
    compares the draft with the target's argmax).

    RNG: none (greedy only).

    Args:
        fallback_threshold: alpha_FB in ``[0, 1]``, default 0.35.
        rollback_threshold: alpha_RB in nats, ``>= 0``, default 8.0.

    Raises:
        ValueError: a knob out of range (names ``method.kwargs.<knob>``); from :meth:`check_round` and a call at
            ``temperature > 0`` (names ``decoding.temperature``).
    """

    name = "bild"
    needs_heads = False
    needs_draft_probs = True
    needs_hidden = False

    def __init__(self, fallback_threshold: float = 0.35, rollback_threshold: float = 8.0) -> None:
        self.fallback_threshold = knob_float(
            "fallback_threshold",
            fallback_threshold,
            low=0.0,
            high=1.0,
            allowed="a number in [0, 1]",
        )
        self.rollback_threshold = knob_float(
            "rollback_threshold", rollback_threshold, low=0.0, allowed="a number >= 0 (nats)"
        )

    def check_round(self, *, L: int, temperature: float) -> None:
        """Raises ValueError at ``temperature > 0`` (BiLD's policies are stated for greedy decoding)."""
        refuse_sampling(self.name, temperature, "BiLD's fallback and rollback policies are greedy")

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round (greedy).

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``draft_probs`` ``[B, L, V]``
                (required), ``temperature == 0``.
            trace: if True, ``[B, L]`` ``target_token_ids``, ``draft_confidence`` (``max q``) and ``rollback_nll``
                (``-log p(d)``).

        Returns:
            :class:`AcceptResult`.

        Raises:
            ValueError: malformed inputs, no ``draft_probs``, or ``temperature > 0``.
        """
        _, L, _ = check_inputs(inputs, rule=self.name, need_draft_probs=True)
        self.check_round(L=L, temperature=inputs.temperature)
        draft, logits = inputs.draft_token_ids, inputs.target_logits
        confidence = inputs.draft_probs.float().amax(dim=-1)  # [B, L]
        nll = -torch.log_softmax(logits[:, :L].float(), dim=-1).gather(-1, draft[..., None])[..., 0]
        ok = (confidence >= self.fallback_threshold) & (nll <= self.rollback_threshold)
        info = None
        if trace:
            info = {
                "target_token_ids": logits[:, :L].argmax(dim=-1),
                "draft_confidence": confidence,
                "rollback_nll": nll,
            }
        return finish_round(ok, logits, 0.0, None, info)

    def __repr__(self) -> str:
        return (
            f"BigLittleDecoder(fallback_threshold={self.fallback_threshold}, "
            f"rollback_threshold={self.rollback_threshold})"
        )
