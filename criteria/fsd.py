"""Fuzzy speculative decoding: accept a draft the native test rejects when the target's and the draft's
distributions at its position are close (a divergence below a threshold T).

Paper: Holsman, Huang, Dhingra, "Fuzzy Speculative Decoding for a Tunable Accuracy-Runtime Tradeoff"
(arXiv 2502.20704, ACL Findings 2025). Engine statement followed here: the authors' TensorRT-LLM PR #12853
("When SD rejects a draft token, FSD checks whether the divergence between the target and draft next-token
distributions is below T. If so, the token is accepted anyway; if not, standard resampling proceeds as usual.
Setting T = 0 recovers exact SD."), whose erratum says the paper's "JS" results were computed as reverse KL.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import accept_prefix, check_inputs, finish_round
from criteria.divergence import js_divergence
from criteria.knobs import (
    at_tokens,
    kl_divergence,
    knob_choice,
    knob_float,
    sample_residual,
    scaled_probs,
)
from criteria.registry import CRITERIA

DIVERGENCES = ("js", "reverse_kl", "kl")


def fsd_divergence(p: torch.Tensor, q: torch.Tensor, kind: str) -> torch.Tensor:
    """The divergence FSD thresholds, per position, in nats.

    ``js``: Jensen-Shannon, :func:`criteria.divergence.js_divergence` (the one DropMatch uses; equals
    ``scipy.spatial.distance.jensenshannon(p, q) ** 2``). ``reverse_kl``: ``KL(q || p)``, the draft's
    distribution against the target's (the usual "reverse" direction for a draft q of a target p; the diff of
    PR #12853 was not readable here). ``kl``: ``KL(p || q)``.

    Args:
        p: ``[..., V]`` target probabilities; q: ``[..., V]`` draft probabilities.
        kind: one of :data:`DIVERGENCES`.

    Returns:
        ``[...]`` float32, ``>= 0`` (``+inf`` for a KL whose first argument has mass where the second has none).
    """
    if kind == "js":
        return js_divergence(p, q)
    if kind == "reverse_kl":
        return kl_divergence(q, p)
    return kl_divergence(p, q)


@CRITERIA.register("fsd")
class FuzzySpeculative:
    """Accept draft i iff the native test accepts it or ``D(p_i, q_i) < threshold``; stop at the first rejection.

    Source: arXiv 2502.20704 (FSD) as stated in TensorRT-LLM PR #12853 (module docstring). With
    ``p = softmax(target_logits / T)`` (T = 1 when greedy) and ``q = draft_probs`` at each draft position:

    - sampling (T > 0): native test ``u_i q_i(d_i) < p_i(d_i)`` (``rejection``); at the first rejection r the
      emitted token is the standard resample, ``norm(max(0, p_r - q_r))``; the bonus is a sample of ``p_L``.
    - greedy (T = 0): native test ``d_i == argmax p_i``; the emitted token is the target's argmax.

    The comparison is strict (``D < threshold``), so ``threshold = 0`` is exactly ``rejection`` / ``greedy_match``
    (the lossless end). The permissive end: a threshold above the divergence's range (``> ln 2`` for ``js``)
    accepts every draft.

    RNG (T > 0): one ``torch.rand([B, L])``, then one ``torch.rand([B])``. None at T = 0.

    Args:
        threshold: T, a number ``>= 0`` (nats). No engine default exists; 0.1 here (conf/method/fsd.yaml).
        divergence: ``reverse_kl`` (default: what the paper's reported results used, per the erratum), ``js`` (the
            paper's stated divergence), or ``kl`` (``KL(p || q)``).

    Raises:
        ValueError: a knob out of range (names ``method.kwargs.<knob>``).
    """

    name = "fsd"
    needs_heads = False
    needs_draft_probs = True
    needs_hidden = False

    def __init__(self, threshold: float = 0.1, divergence: str = "reverse_kl") -> None:
        self.threshold = knob_float(
            "threshold", threshold, low=0.0, allowed="a number >= 0 (nats; 0 = exact SD)"
        )
        self.divergence = knob_choice("divergence", divergence, DIVERGENCES)

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``draft_probs`` ``[B, L, V]``
                (always required: the divergence reads it), ``temperature``, ``generator`` (T > 0).
            trace: if True, ``[B, L]`` tensors ``target_token_ids`` and ``divergence``.

        Returns:
            :class:`AcceptResult`.

        Raises:
            ValueError: malformed inputs, or no ``draft_probs``.
        """
        T, gen = inputs.temperature, inputs.generator
        _, L, _ = check_inputs(inputs, rule=self.name, need_draft_probs=True)
        draft, logits = inputs.draft_token_ids, inputs.target_logits
        p = scaled_probs(logits, T)  # [B, L+1, V]
        q = inputs.draft_probs.float()  # [B, L, V]
        D = fsd_divergence(p[:, :L], q, self.divergence)  # [B, L]
        target_ids = logits[:, :L].argmax(dim=-1)
        info = {"target_token_ids": target_ids, "divergence": D} if trace else None
        fuzzy = D < self.threshold
        if T == 0:
            return finish_round((draft == target_ids) | fuzzy, logits, 0.0, None, info)
        u = torch.rand(draft.shape, generator=gen, device=p.device, dtype=torch.float32)
        accept_mask, num_accepted = accept_prefix(
            (u * at_tokens(q, draft) < at_tokens(p[:, :L], draft)) | fuzzy
        )
        return AcceptResult(
            accept_mask=accept_mask,
            num_accepted=num_accepted,
            next_token_ids=sample_residual(p, q, num_accepted, gen),
            trace=info,
        )

    def __repr__(self) -> str:
        return f"FuzzySpeculative(threshold={self.threshold}, divergence={self.divergence!r})"
