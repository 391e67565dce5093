"""Probability thresholds: accept a draft the target gives probability at least t, or with probability
``min(1, p / t_acc)``.

Engine definition followed here: SGLang's ``--speculative-accept-threshold-single`` /
``--speculative-accept-threshold-acc`` (``ServerArgs``, defaults 1.0 and 1.0; help: "Accept a draft token if its
probability in the target model is greater than this threshold." / "The accept probability of a draft token is
raised from its target probability p to min(1, p / threshold_acc)."), decided by
``sgl-kernel/csrc/speculative/speculative_sampling.cuh`` ``TreeSpeculativeSamplingTargetOnly`` on a chain
(``speculative_eagle_topk = 1``: one candidate per depth, so its ``prob_acc`` is the candidate's own probability).
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import (
    accept_prefix,
    check_inputs,
    finish_round,
    sample_categorical,
    select_position,
)
from criteria.knobs import at_tokens, knob_float, scaled_probs
from criteria.registry import CRITERIA


@CRITERIA.register("prob_threshold")
class ProbThreshold:
    """Accept draft i iff ``p_i(d_i) >= threshold_single`` or ``u_i <= p_i(d_i) / threshold_acc``; stop at the
    first rejection.

    Source: SGLang ``TreeSpeculativeSamplingTargetOnly`` (module docstring), ``p = softmax(target_logits / T)``.
    "Target-only": the draft's distribution is not read. At the first rejected position r the emitted token is a
    sample of ``p_r`` with the rejected draft's probability set to 0 (the kernel writes ``p_r(d_r)`` into its
    otherwise-zero draft probabilities and samples ``relu(p - draft_probs)``); when all L drafts are accepted, a
    sample of ``p_L``. With the defaults (1, 1) the rule accepts with probability ``p(d)``, which preserves the
    target distribution when the draft is deterministic (a greedy drafter, as SGLang's EAGLE), not when drafts
    are sampled from q.

    Greedy (T = 0): SGLang verifies greedy requests by exact match and ignores both thresholds; this rule keeps
    exact match and adds the deterministic single-token test on ``softmax(target_logits)`` (T = 1 scale):
    accept iff ``d_i == argmax p_i`` or ``p_i(d_i) >= threshold_single``; the emitted token is the argmax.
    ``threshold_acc`` (a coin) has no greedy reading and is not used. With the defaults this is SGLang's greedy
    verification (``p(d) >= 1`` only for the argmax).

    Ends: the defaults (1, 1) are the lossless end (for a deterministic draft at T > 0; ``greedy_match`` at
    T = 0); ``threshold_single = 0`` accepts every draft.

    RNG (T > 0): one ``torch.rand([B, L])`` (the kernel's coins), then one ``torch.rand([B])``. None at T = 0.

    Args:
        threshold_single: ``[0, 1]``, SGLang default 1.0.
        threshold_acc: ``(0, 1]``, SGLang default 1.0 (SGLang floors it at 1e-9).

    Raises:
        ValueError: a knob out of range (names ``method.kwargs.<knob>``).
    """

    name = "prob_threshold"
    needs_heads = False
    needs_draft_probs = False
    needs_hidden = False

    def __init__(self, threshold_single: float = 1.0, threshold_acc: float = 1.0) -> None:
        self.threshold_single = knob_float(
            "threshold_single", threshold_single, low=0.0, high=1.0, allowed="a number in [0, 1]"
        )
        self.threshold_acc = knob_float(
            "threshold_acc",
            threshold_acc,
            low=0.0,
            high=1.0,
            low_open=True,
            allowed="a number in (0, 1]",
        )

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``temperature``,
                ``generator`` (T > 0). ``draft_probs`` is not read.
            trace: if True, ``[B, L]`` ``target_token_ids`` and ``target_prob`` (``p_i(d_i)``).

        Returns:
            :class:`AcceptResult`.
        """
        T, gen = inputs.temperature, inputs.generator
        _, L, _ = check_inputs(inputs, rule=self.name)
        draft, logits = inputs.draft_token_ids, inputs.target_logits
        p = scaled_probs(logits, T)  # [B, L+1, V]
        px = at_tokens(p[:, :L], draft)  # [B, L]
        target_ids = logits[:, :L].argmax(dim=-1)
        info = {"target_token_ids": target_ids, "target_prob": px} if trace else None
        single = px >= self.threshold_single
        if T == 0:
            return finish_round((draft == target_ids) | single, logits, 0.0, None, info)
        coin = torch.rand(draft.shape, generator=gen, device=p.device, dtype=torch.float32)
        accept_mask, num_accepted = accept_prefix((coin <= px / self.threshold_acc) | single)
        p_at = select_position(p, num_accepted)  # [B, V]
        rejected = select_position(
            torch.cat([draft, draft.new_full((draft.shape[0], 1), -1)], dim=1), num_accepted
        )  # [B], -1 at the bonus
        excluded = p_at.scatter(
            -1, rejected.clamp_min(0)[:, None], 0.0
        )  # the rejected draft's probability set to 0
        residual = torch.where((rejected >= 0)[:, None], excluded, p_at)
        has_mass = residual.sum(dim=-1, keepdim=True) > 0
        next_token_ids = sample_categorical(torch.where(has_mass, residual, p_at), gen)
        return AcceptResult(accept_mask, num_accepted, next_token_ids, info)

    def __repr__(self) -> str:
        return (
            f"ProbThreshold(threshold_single={self.threshold_single}, "
            f"threshold_acc={self.threshold_acc})"
        )
