"""Typical acceptance: accept a draft the target finds typical enough, whatever the draft's own probability.

Paper: Medusa (Cai et al., arXiv 2401.10774) Sec. 3.3.1. Engine definition followed here: vLLM V0's
``TypicalAcceptanceSampler`` (``vllm/model_executor/layers/typical_acceptance_sampler.py``, removed with V0;
defaults ``typical_acceptance_sampler_posterior_threshold = 0.09``, ``..._posterior_alpha = 0.3`` from V0's
``SpeculativeConfig``).
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import accept_prefix, check_inputs, select_position, target_tokens
from criteria.knobs import at_tokens, knob_float, scaled_probs
from criteria.registry import CRITERIA

ENTROPY_EPS = 1e-5  # vLLM V0 adds it inside the log of the entropy (log of zero)


def typical_threshold(p: torch.Tensor, epsilon: float, alpha: float) -> torch.Tensor:
    """``min(epsilon, alpha * exp(-H(p)))`` with ``H(p) = -sum_x p(x) log(p(x) + 1e-5)`` (vLLM V0's entropy).

    Args:
        p: ``[..., V]`` target probabilities.
        epsilon: posterior threshold; alpha: posterior alpha.

    Returns:
        ``[...]`` float32.
    """
    H = -(p * torch.log(p + ENTROPY_EPS)).sum(dim=-1)
    return torch.minimum(torch.full_like(H, epsilon), alpha * torch.exp(-H))


@CRITERIA.register("typical")
class TypicalAcceptance:
    """Accept draft i iff ``p_i(d_i) > min(epsilon, alpha * exp(-H(p_i)))``; stop at the first rejection.

    Source: Medusa Sec. 3.3.1; vLLM V0 ``TypicalAcceptanceSampler`` (``_evaluate_accepted_tokens``,
    ``_get_recovered_token_ids``, ``_create_output``). ``p = softmax(target_logits / T)`` (vLLM V0's sampler
    probabilities: T = 1 for a greedy request). The draft's distribution is not read (V0: "draft_probs: This
    parameter is unused"). At the first rejected position the emitted token is the target's argmax, at every
    temperature (V0's recovered token); when all L drafts are accepted the bonus is the target's own token:
    its argmax at T = 0, a sample of ``p_L`` at T > 0 (V0's bonus token from the regular sampler).

    Ends: ``posterior_threshold = 0`` accepts every draft the target gives positive probability (the permissive
    end). No setting equals greedy SD: with ``alpha <= 1`` the target's argmax always passes (``exp(-H) <= max p``),
    so the rule accepts a superset of greedy SD's drafts; ``posterior_threshold = alpha = 1`` is the strictest.

    RNG (T > 0): one ``torch.rand([B])`` for the bonus token (drawn for every row). None at T = 0.

    Args:
        posterior_threshold: epsilon in ``[0, 1]``; vLLM V0 default 0.09.
        posterior_alpha: delta (Medusa's name), a number ``>= 0``; vLLM V0 default 0.3.

    Raises:
        ValueError: a knob out of range (names ``method.kwargs.<knob>``).
    """

    name = "typical"
    needs_heads = False
    needs_draft_probs = False
    needs_hidden = False

    def __init__(self, posterior_threshold: float = 0.09, posterior_alpha: float = 0.3) -> None:
        self.posterior_threshold = knob_float(
            "posterior_threshold",
            posterior_threshold,
            low=0.0,
            high=1.0,
            allowed="a number in [0, 1]",
        )
        self.posterior_alpha = knob_float(
            "posterior_alpha", posterior_alpha, low=0.0, allowed="a number >= 0"
        )

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``temperature``,
                ``generator`` (T > 0). ``draft_probs`` is not read.
            trace: if True, ``[B, L]`` tensors ``target_token_ids``, ``target_prob`` (``p_i(d_i)``) and
                ``threshold``.

        Returns:
            :class:`AcceptResult`.
        """
        T, gen = inputs.temperature, inputs.generator
        _, L, _ = check_inputs(inputs, rule=self.name)
        draft, logits = inputs.draft_token_ids, inputs.target_logits
        p = scaled_probs(logits[:, :L], T)  # [B, L, V]
        px = at_tokens(p, draft)  # [B, L]
        thr = typical_threshold(p, self.posterior_threshold, self.posterior_alpha)  # [B, L]
        accept_mask, num_accepted = accept_prefix(px > thr)
        target_ids = logits[:, :L].argmax(dim=-1)  # [B, L]
        bonus = target_tokens(logits[:, L], T, gen)  # [B]
        recovered = select_position(
            torch.cat([target_ids, bonus[:, None]], dim=1), num_accepted
        )  # [B]; = bonus when all L were accepted
        info = (
            {"target_token_ids": target_ids, "target_prob": px, "threshold": thr} if trace else None
        )
        return AcceptResult(accept_mask, num_accepted, recovered, info)

    def __repr__(self) -> str:
        return (
            f"TypicalAcceptance(posterior_threshold={self.posterior_threshold}, "
            f"posterior_alpha={self.posterior_alpha})"
        )
