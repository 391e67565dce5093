"""Static ensemble verification: speculative sampling against the mixture ``w p + (1 - w) q`` instead of ``p``.

Paper: DIVERSED (arXiv 2604.07622), static variant. Engine definition followed here: HF transformers 5.19,
``GenerationConfig.assistant_ensemble_weight`` (``transformers/generation/utils.py``: ``_speculative_sampling``
at ``do_sample=True``, the greedy branch of ``_assisted_decoding`` otherwise); tests/criteria compare the rule with
transformers' own assisted generation on the tiny pair.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import accept_prefix, check_inputs, select_position
from criteria.knobs import at_tokens, knob_float, sample_residual, scaled_probs
from criteria.registry import CRITERIA


@CRITERIA.register("static_ensemble")
class StaticEnsemble:
    """Verify the drafts against ``v = w p + (1 - w) q``: ``p = softmax(target_logits / T)``, ``q = draft_probs``.

    Source: transformers 5.19 (module docstring).

    - sampling (T > 0): accept draft i iff ``u_i q_i(d_i) < v_i(d_i)``, i.e. with probability
      ``min(1, 1 - w + w p/q)`` (transformers: ``r <= 1 - w + w p/q``; equal up to the probability-zero event of
      equality); at the first rejection r emit a sample of ``norm(max(0, p_r - q_r))`` (transformers: the
      residual of v, ``w max(0, p - q)``, normalises to the same; a residual with no mass falls back to ``p_r``);
      when all L are accepted, a sample of ``p_L``.
    - greedy (T = 0): accept draft i iff ``d_i == argmax v_i`` with ``p`` at T = 1 (transformers compares
      the candidates with ``argmax(w softmax(target logits) + (1 - w) softmax(candidate logits))``); at the first
      rejection r emit ``argmax v_r``, not the target's argmax; when all L are accepted, the target's argmax at L.

    Ends: ``weight = 1`` is ``rejection`` / ``greedy_match`` (the lossless end; transformers spells it
    ``assistant_ensemble_weight=None`` and accepts only ``(0, 1)``); ``weight = 0`` accepts every draft sampled from
    q (and every greedy draft, ``argmax q``).

    RNG (T > 0): one ``torch.rand([B, L])``, then one ``torch.rand([B])``. None at T = 0.

    Args:
        weight: w in ``[0, 1]``; transformers has no default (None = lossless); 0.5 here (conf/method).

    Raises:
        ValueError: a knob out of range (names ``method.kwargs.weight``).
    """

    name = "static_ensemble"
    needs_heads = False
    needs_draft_probs = True
    needs_hidden = False

    def __init__(self, weight: float = 0.5) -> None:
        self.weight = knob_float(
            "weight", weight, low=0.0, high=1.0, allowed="a number in [0, 1] (1 = lossless)"
        )

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``draft_probs`` ``[B, L, V]``
                (required), ``temperature``, ``generator`` (T > 0).
            trace: if True, ``[B, L]`` ``target_token_ids`` and ``mixture_token_ids`` (``argmax v``).

        Returns:
            :class:`AcceptResult`.
        """
        T, gen = inputs.temperature, inputs.generator
        _, L, _ = check_inputs(inputs, rule=self.name, need_draft_probs=True)
        draft, logits, w = inputs.draft_token_ids, inputs.target_logits, self.weight
        p = scaled_probs(logits, T)  # [B, L+1, V]
        q = inputs.draft_probs.float()  # [B, L, V]
        v = w * p[:, :L] + (1.0 - w) * q  # [B, L, V]
        mix_ids = v.argmax(dim=-1)  # [B, L]
        info = (
            {"target_token_ids": logits[:, :L].argmax(dim=-1), "mixture_token_ids": mix_ids}
            if trace
            else None
        )
        if T == 0:
            accept_mask, num_accepted = accept_prefix(draft == mix_ids)
            bonus = logits[:, L].argmax(dim=-1)  # [B]
            nxt = select_position(torch.cat([mix_ids, bonus[:, None]], dim=1), num_accepted)
            return AcceptResult(accept_mask, num_accepted, nxt, info)
        u = torch.rand(draft.shape, generator=gen, device=p.device, dtype=torch.float32)
        accept_mask, num_accepted = accept_prefix(u * at_tokens(q, draft) < at_tokens(v, draft))
        return AcceptResult(
            accept_mask=accept_mask,
            num_accepted=num_accepted,
            next_token_ids=sample_residual(p, q, num_accepted, gen),
            trace=info,
        )

    def __repr__(self) -> str:
        return f"StaticEnsemble(weight={self.weight})"
