"""The criterion seam: inputs of one verification round and the decision it returns.

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2; Leviathan et al. 2023 Alg. 1; vLLM v1
``rejection_sampler.py`` vocabulary (draft / target / bonus / recovered tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, runtime_checkable

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
        head_logits: ``[B, P, K, V]`` floating (float32 or the model's dtype) or None, the K MC-dropout heads
            (Eq. 3) at the first P positions, ``P = L + 1`` or ``P = L`` (rules with ``heads_at_drafts_only``
            read no heads at the bonus position, so the verify round does not compute them). Required by
            DropMatch rules. With ``head_candidates`` the last dim is C (the heads at candidate tokens only).
        temperature: sampling temperature; ``0`` means greedy (argmax everywhere).
        generator: seeded ``torch.Generator`` for every random draw a rule makes (never the global RNG),
            on the logits' device.
        target_hidden: ``[B, L+1, d]`` or None, the target's final hidden states of the verify pass (the LM
            head's input). Filled by :func:`criteria.verify.verify_round` for rules with ``needs_hidden``.
        draft_hidden: ``[B, L, d_draft]`` or None, the draft model's final hidden state AT each draft token
            (after reading ``d_i``: Auto-Judge's "DD" feature; the backend runs one extra draft step for ``d_L``).
            Filled for rules with ``needs_hidden`` when the backend has it.
        head_candidates: ``[B, P, C + 1]`` int64 or None: the sparse variant (``HeadSpec.top_n``): the token id of
            each entry of ``head_logits``' last dim (:func:`criteria.candidates.candidate_tokens`), the last one
            ``-1`` (the rest of the vocabulary); None = exact heads over the whole vocabulary.
        exact_heads: None, or with ``head_candidates`` (the sparse variant with ``HeadSpec.escape``) the heads
            beyond the candidates: ``exact_heads(rows [m] int64, positions [m] int64, rung=None)`` gives the K
            heads at those positions on the round's dropout masks, over the whole vocabulary (``([m, K, V], None,
            None)``) or, with ``rung = (E, S)``, at the plain head's and the draft's top-E tokens plus S sampled tail
            tokens (``([m, K, C + S]``, ``[m, C + S]`` ids, ``[m, C + S]`` importance weights)``,
            :func:`criteria.sparse_heads.exact_heads_at`). The
            JS rule reads it where Eq. (6) decides (:func:`criteria.dropmatch_js.sampled_decision`).
        sparse_support: None, or with ``head_candidates`` (the sparse variant as the verify round builds it) the
            support of Eq. (6): ``sparse_support(rows [m] int64, positions [m] int64)`` gives the K heads at those
            positions on the round's dropout masks at the candidate tokens plus the rest entry, and their ids
            (``([m, K, C + 1] float32, [m, C + 1] int64)``, :func:`criteria.sparse_heads.sparse_round_heads`).
            ``head_logits`` then holds the heads at the tokens their argmax needs only (the rest entry ``-inf``),
            and rules read the support through :func:`criteria.dropmatch_base.js_inputs`, or where they need it.
        target_greedy: ``[B, L]`` int64 or None: the plain head's argmax at each drafted position, when the verify
            round found it already (greedy rounds of the sparse variant: read off its candidates,
            :func:`criteria.verify._target_argmax`), so that a rule's next token need not take it over V again
            (:func:`criteria.common.finish_round`); None = not given.
    """

    draft_token_ids: torch.Tensor
    target_logits: torch.Tensor
    draft_probs: torch.Tensor | None = None
    head_logits: torch.Tensor | None = None
    temperature: float = 0.0
    generator: torch.Generator | None = None
    target_hidden: torch.Tensor | None = None
    draft_hidden: torch.Tensor | None = None
    head_candidates: torch.Tensor | None = None
    exact_heads: (
        Callable[..., tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]] | None
    ) = None
    sparse_support: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    target_greedy: torch.Tensor | None = None


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
        target_argmax: ``[B, L]`` int64, the target's greedy token at each drafted position (set by the rule or
            else by :func:`criteria.verify.verify_round`), so a backend can count accepted drafts that differ from
            it (what a lossy rule accepts beyond exact match); None when not filled.
    """

    accept_mask: torch.Tensor
    num_accepted: torch.Tensor
    next_token_ids: torch.Tensor
    trace: dict[str, torch.Tensor] | None = field(default=None)
    target_argmax: torch.Tensor | None = field(default=None)


@runtime_checkable
class RoundMeter(Protocol):
    """What a backend measures inside one verify round; the round only reports to it (no clock in ``criteria``).

    :func:`criteria.verify.verify_round` calls :meth:`plain` once, when the plain head's float32 logits
    ``[B, L+1, V]`` are ready and nothing that depends on the dropout heads has run yet (every path but the exact
    rule's with ``p_drop > 0``, whose heads share the plain rows' matmul), and :meth:`escape` at each rung of the
    escape ladder (:func:`criteria.dropmatch_js.sampled_decision`).
    """

    def plain(self) -> None:
        """The plain logits are ready: what follows is the rule's own decision (dropout heads and test)."""
        ...

    def escape(self, rung: str, rows: torch.Tensor) -> None:
        """One rung of the escape ladder reached at ``rows`` ``[m]`` int64 (the batch row of each position,
        repeated for several positions of a row); ``rung`` its name (:func:`criteria.sparse_heads.rung_name`:
        ``"64"``, ``"512+512"``, ``"exact"``)."""
        ...


@runtime_checkable
class Criterion(Protocol):
    """An acceptance rule. Pure: no I/O, no global RNG, inputs are not mutated.

    A rule is built from its own settings only (``method`` config); the MC-dropout heads it reads are
    described by a :class:`criteria.dropout_heads.HeadSpec` that travels separately, and K is read from
    ``head_logits``' shape.

    Attributes:
        name: registry key (the value of ``method.criterion`` in ``conf/method/*.yaml``).
        needs_heads: whether ``VerifyInputs.head_logits`` must be filled (a HeadSpec with ``K >= 1``).
        needs_draft_probs: whether ``VerifyInputs.draft_probs`` must be filled.
        needs_hidden: whether ``VerifyInputs.target_hidden`` / ``draft_hidden`` must be filled.
    """

    name: str
    needs_heads: bool
    needs_draft_probs: bool
    needs_hidden: bool

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult: ...
