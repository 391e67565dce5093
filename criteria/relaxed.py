"""Relaxed top-k / delta acceptance: accept a draft among the target's top-k whose probability is within delta of
the top-1's.

Engine definition followed here: TensorRT-LLM's relaxed acceptance for MTP (``MTPDecodingConfig.relaxed_topk``,
``relaxed_delta``, defaults 1 and 0.0; ``tensorrt_llm/_torch/speculative/mtp.py`` ranks ``torch.softmax(logits)``
with ``torch.topk``, ``cpp/tensorrt_llm/kernels/speculativeDecoding/mtpKernels.cu``
``mtpRelaxedAcceptanceKernel`` decides). TensorRT-LLM applies it only inside a thinking phase (between
``begin_thinking_phase_token`` and ``end_thinking_phase_token``, else delta = 0); here it applies to every
position. Greedy only: TensorRT-LLM's relaxed path replaces greedy (strict) acceptance.
"""

from __future__ import annotations

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, finish_round
from criteria.knobs import knob_float, knob_int, refuse_sampling, scaled_probs
from criteria.registry import CRITERIA


@CRITERIA.register("relaxed_topk")
class RelaxedTopK:
    """Accept draft i iff it is one of the target's ``top_k`` tokens and ``p_i(d_i) >= p_i(top-1) - delta`` (the
    top-1 itself always passes); stop at the first rejection; emit the target's argmax.

    Source: ``mtpRelaxedAcceptanceKernel`` (module docstring): over the target's top-k, sorted by probability,
    ``threshold = p_(0) - delta``; the scan stops at the first j > 0 with ``p_(j) < threshold``; the draft is
    accepted if it equals one of the tokens scanned. ``p = softmax(target_logits)`` (probabilities, as the engine
    computes them, although its documentation says log-probabilities). The emitted token after the accepted
    prefix is the target's top-1 (the engine's "golden token").

    Ends: ``top_k = 1`` or ``delta = 0`` is ``greedy_match`` (the lossless end, the engine's defaults); ``top_k = V``
    with ``delta >= 1`` accepts every draft.

    RNG: none (greedy only).

    Args:
        top_k: an integer ``>= 1`` (capped at V); TensorRT-LLM default 1 (its DeepSeek-R1 recipe: 10).
        delta: a number ``>= 0`` (probability); TensorRT-LLM default 0.0 (its DeepSeek-R1 recipe: 0.6).

    Raises:
        ValueError: a knob out of range (names ``method.kwargs.<knob>``); from :meth:`check_round` and a call at
            ``temperature > 0`` (names ``decoding.temperature``).
    """

    name = "relaxed_topk"
    needs_heads = False
    needs_draft_probs = False
    needs_hidden = False

    def __init__(self, top_k: int = 1, delta: float = 0.0) -> None:
        self.top_k = knob_int("top_k", top_k, low=1, allowed="an integer >= 1")
        self.delta = knob_float("delta", delta, low=0.0, allowed="a number >= 0 (probability)")

    def check_round(self, *, L: int, temperature: float) -> None:
        """Raises ValueError at ``temperature > 0`` (the engine defines the rule for greedy decoding only)."""
        refuse_sampling(self.name, temperature, "TensorRT-LLM's relaxed acceptance is greedy")

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round (greedy).

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``temperature == 0``.
            trace: if True, ``[B, L]`` ``target_token_ids`` and ``target_prob`` (``p_i(d_i)``).

        Returns:
            :class:`AcceptResult`.

        Raises:
            ValueError: malformed inputs, or ``temperature > 0``.
        """
        _, L, V = check_inputs(inputs, rule=self.name)
        self.check_round(L=L, temperature=inputs.temperature)
        draft, logits = inputs.draft_token_ids, inputs.target_logits
        p = scaled_probs(logits[:, :L], 0.0)  # [B, L, V]
        values, ids = p.topk(min(self.top_k, V), dim=-1)  # [B, L, k], sorted descending
        scanned = values >= (values[..., :1] - self.delta)  # [B, L, k]
        scanned[..., 0] = True  # the kernel compares the top-1 before any threshold test
        ok = ((ids == draft.unsqueeze(-1)) & scanned).any(dim=-1)  # [B, L]
        info = None
        if trace:
            info = {
                "target_token_ids": ids[..., 0],
                "target_prob": p.gather(-1, draft.unsqueeze(-1)).squeeze(-1),
            }
        return finish_round(ok, logits, 0.0, None, info)

    def __repr__(self) -> str:
        return f"RelaxedTopK(top_k={self.top_k}, delta={self.delta})"
