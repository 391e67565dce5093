"""The criterion seam: inputs of one verification round and the decision it returns.

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2; Leviathan et al. 2023 Alg. 1; vLLM v1
``rejection_sampler.py`` vocabulary (draft / target / bonus / recovered tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

PLACEHOLDER_TOKEN_ID = -1


@dataclass
class VerifyInputs:
    """Everything a rule may look at for one round of B sequences.

    Attributes:
        draft_token_ids: ``[B, L]`` int64, the draft model's proposals.
        target_logits: ``[B, L+1, V]`` float32, the target's own LM head (no dropout) at each
            drafted position and one beyond (for the bonus token). Raw logits, temperature not applied.
        draft_probs: ``[B, L, V]`` float32 or None, the distribution each draft was sampled from
            (softmax of the draft logits at temperature ``max(T, 1)`` when greedy: see backends).
            Required by ``rejection`` and ``dropmatch_js``.
        head_logits: ``[B, L+1, K, V]`` float32 or None, the K MC-dropout heads (Eq. 3), from
            :func:`criteria.dropout_heads.dropout_head_logits`. Required by DropMatch rules.
        temperature: sampling temperature; ``0`` means greedy (argmax everywhere).
        generator: seeded ``torch.Generator`` for every random draw a rule makes (never the global RNG).
        target_hidden: ``[B, L+1, d]`` float or None, the target's final hidden states of the verify pass
            (the LM-head input; row i is the position holding ``[pending, d_1..d_L][i]``). Filled for rules
            with ``needs_hidden = True``.
        draft_hidden: ``[B, L, d_draft]`` float or None, the draft model's final hidden state AT each draft
            token (after feeding ``d_i``; Auto-Judge's "DD" feature, which costs one extra draft forward for
            ``d_L``). Filled for rules with ``needs_hidden = True``.
    """

    draft_token_ids: torch.Tensor
    target_logits: torch.Tensor
    draft_probs: torch.Tensor | None = None
    head_logits: torch.Tensor | None = None
    temperature: float = 0.0
    generator: torch.Generator | None = None
    target_hidden: torch.Tensor | None = None
    draft_hidden: torch.Tensor | None = None


@dataclass
class AcceptResult:
    """Decision of one round.

    Attributes:
        accept_mask: ``[B, L]`` bool, prefix-closed (once False, False to the end).
        num_accepted: ``[B]`` int64 in ``[0, L]``, ``accept_mask.sum(-1)``.
        next_token_ids: ``[B]`` int64, the token emitted after the accepted prefix: the recovered
            (correction) token after a rejection, or the bonus token when all L drafts are accepted.
        trace: optional per-position tensors for analysis (Tables 2-3), e.g. ``head_token_ids``
            ``[B, L, K]``, ``js_draft`` ``[B, L]``, ``js_heads_max`` ``[B, L]``; None unless asked for.
    """

    accept_mask: torch.Tensor
    num_accepted: torch.Tensor
    next_token_ids: torch.Tensor
    trace: dict[str, torch.Tensor] | None = field(default=None)


@runtime_checkable
class Criterion(Protocol):
    """An acceptance rule. Pure: no I/O, no global RNG, inputs are not mutated.

    Attributes:
        name: registry key (the value of ``method.criterion`` in ``conf/method/*.yaml``).
        num_heads: K, the number of MC-dropout heads the backend must compute (0: none).
        p_drop: dropout probability for those heads (ignored when ``num_heads == 0``).
        needs_draft_probs: whether ``VerifyInputs.draft_probs`` must be filled.
    """

    name: str
    num_heads: int
    p_drop: float
    needs_draft_probs: bool

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult: ...
