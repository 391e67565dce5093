"""What both DropMatch rules share: settings, head tokens, JS statistics and the per-position trace.

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (4)-(7), Algorithm 1, Tables 2-3.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import check_inputs, finish_round, sample_categorical
from criteria.divergence import agreement_pattern, centroid_probs, js_divergence, majority_token


def head_tokens(head_logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """The token y^(i) of each dropout head: argmax (T = 0) or a sample of softmax(l^(i) / T) (T > 0).

    Paper: Eq. (4) and Algorithm 1 (``y^(i) = argmax p^(i)``); Sec. 3.2 ("top-1 tokens or selected
    token by nucleus sampling") for T > 0 (no top-p here).

    RNG: none at T = 0; otherwise one ``torch.rand(head_logits.shape[:-1])`` (inverse CDF).

    Args:
        head_logits: ``[B, L, K, V]`` float, raw head logits at the draft positions.
        temperature: ``>= 0``.
        generator: required when ``temperature > 0``.

    Returns:
        ``[B, L, K]`` int64.
    """
    if temperature == 0:
        return head_logits.argmax(dim=-1)
    return sample_categorical(torch.softmax(head_logits.float() / temperature, dim=-1), generator)


def js_statistics(
    head_logits: torch.Tensor, draft_probs: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """JS divergence of the draft and of each head to the heads' centroid.

    Paper: Eq. (5)-(6), Algorithm 1. Head probabilities are ``p^(i) = softmax(l^(i) / T)`` and the
    centroid ``softmax(mean_i l^(i) / T)``, with T = 1 when greedy (T = 0), matching the draft
    probabilities the backends provide.

    Args:
        head_logits: ``[B, L, K, V]`` float, raw head logits at the draft positions.
        draft_probs: ``[B, L, V]`` float, the draft distribution ``p_hat``.
        temperature: ``>= 0``.

    Returns:
        ``js_draft`` ``[B, L]`` = ``JS(p_hat || p_bar)`` and ``js_heads_max`` ``[B, L]`` =
        ``max_i JS(p^(i) || p_bar)``, float32 nats in ``[0, ln 2]``.
    """
    T = temperature if temperature > 0 else 1.0
    scaled = head_logits.float() / T  # [B, L, K, V]
    centroid = centroid_probs(scaled)  # [B, L, V]
    js_heads = js_divergence(torch.softmax(scaled, dim=-1), centroid.unsqueeze(-2))  # [B, L, K]
    js_draft = js_divergence(draft_probs.float(), centroid)  # [B, L]
    return js_draft, js_heads.amax(dim=-1)


def dropmatch_trace(
    inputs: VerifyInputs,
    head_token_ids: torch.Tensor,
    js: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Per-position analysis tensors of one round (Tables 2-3), the same for both DropMatch rules.

    Paper: Table 2 (agreement patterns, target probability of the majority token), Table 3 (JS
    divergences of accepted cases, by criterion).

    All conditions are evaluated at every draft position independently of the prefix closure (AND
    them with ``AcceptResult.accept_mask`` to keep only accepted positions).

    Args:
        inputs: the round (``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``,
            ``head_logits`` ``[B, L+1, K, V]``, optional ``draft_probs`` ``[B, L, V]``).
        head_token_ids: ``[B, L, K]`` int64, the heads' tokens the rule used.
        js: ``(js_draft, js_heads_max)`` if already computed; otherwise computed here when
            ``draft_probs`` is given.

    Returns:
        Dict with keys (``[B, L]`` unless noted):
        ``head_token_ids`` ``[B, L, K]`` int64; ``target_token_ids`` int64 (target argmax);
        ``majority_token_ids`` int64 and ``majority_counts`` int64 (:func:`majority_token`);
        ``agreement_pattern`` int64 codes (names: :func:`criteria.divergence.agreement_pattern_names`);
        ``majority_target_prob`` float32, ``softmax(target_logits)`` at T = 1 of the majority token;
        ``accepted_by_naive`` bool (Eq. 4); ``draft_agrees_majority`` bool (Eq. 7).
        Only when ``draft_probs`` is given: ``js_draft``, ``js_heads_max`` float32 (Eq. 6 sides);
        ``accepted_by_js`` bool (Eq. 6, first branch of Algorithm 1); ``accepted_by_majority`` bool
        (Eq. 7 and not Eq. 6: accepted only by the second branch of Algorithm 1).
    """
    draft = inputs.draft_token_ids  # [B, L]
    L = draft.shape[1]
    target = inputs.target_logits[:, :L]  # [B, L, V]
    maj_token, maj_count = majority_token(head_token_ids)  # [B, L], [B, L]
    target_probs = torch.softmax(target.float(), dim=-1)  # [B, L, V]
    agrees = maj_token == draft  # [B, L]
    out = {
        "head_token_ids": head_token_ids,
        "target_token_ids": target.argmax(dim=-1),
        "majority_token_ids": maj_token,
        "majority_counts": maj_count,
        "agreement_pattern": agreement_pattern(head_token_ids),
        "majority_target_prob": target_probs.gather(-1, maj_token.unsqueeze(-1)).squeeze(-1),
        "accepted_by_naive": (head_token_ids == draft.unsqueeze(-1)).any(dim=-1),
        "draft_agrees_majority": agrees,
    }
    if js is None and inputs.draft_probs is not None:
        js = js_statistics(inputs.head_logits[:, :L], inputs.draft_probs, inputs.temperature)
    if js is not None:
        js_draft, js_heads_max = js
        by_js = js_draft <= js_heads_max  # [B, L]
        out.update(
            js_draft=js_draft,
            js_heads_max=js_heads_max,
            accepted_by_js=by_js,
            accepted_by_majority=agrees & ~by_js,
        )
    return out


class DropMatchBase:
    """Settings and round structure shared by ``dropmatch_naive`` and ``dropmatch_js``.

    Paper: Sec. 3.1-3.2; Table 6 setting K = 5, p_drop = 0.3.

    A subclass sets ``name`` and ``needs_draft_probs`` and implements :meth:`accept_test`. The round:
    head tokens from ``head_logits[:, :L]`` (the heads at the bonus position L are not used), the
    subclass's per-position test, prefix closure, and the target's own token (row 0 = ``target_logits``)
    at the first rejected position or at L: argmax (T = 0) or a sample of ``softmax(target_logits / T)``.

    RNG (T > 0 only, ``inputs.generator``): one ``torch.rand([B, L, K])`` for the head tokens, then one
    ``torch.rand([B])`` for the emitted token. None at T = 0.

    Args:
        K: number of MC-dropout heads, an integer >= 1.
        p_drop: dropout probability of the heads, a float in ``[0, 1)``. The rule only stores it for the
            backend (which computes ``head_logits`` with :func:`criteria.dropout_heads.dropout_head_logits`).

    Raises:
        ValueError: ``K`` or ``p_drop`` out of range; the message names the field and the allowed values.
    """

    name: str = ""
    needs_draft_probs: bool = False

    def __init__(self, K: int = 5, p_drop: float = 0.3) -> None:
        if isinstance(K, bool) or not isinstance(K, int) or K < 1:
            raise ValueError(f"{self.name}: K={K!r} is invalid; allowed values: an integer >= 1")
        if isinstance(p_drop, bool) or not isinstance(p_drop, (int, float)) or not 0.0 <= p_drop < 1.0:
            raise ValueError(f"{self.name}: p_drop={p_drop!r} is invalid; allowed values: a float in [0, 1)")
        self.num_heads = K
        self.p_drop = float(p_drop)

    def accept_test(
        self, inputs: VerifyInputs, head_token_ids: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Per-position acceptance test ``[B, L]`` bool, plus ``(js_draft, js_heads_max)`` if computed."""
        raise NotImplementedError

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]`` int64, ``target_logits`` ``[B, L+1, V]`` float (row 0
                of the dropout-head helper), ``head_logits`` ``[B, L+1, K, V]`` float with K =
                ``num_heads``, ``draft_probs`` ``[B, L, V]`` (required if ``needs_draft_probs``),
                ``temperature``, ``generator`` (required when T > 0). Not mutated.
            trace: if True, ``AcceptResult.trace`` holds :func:`dropmatch_trace`'s tensors.

        Returns:
            :class:`AcceptResult`.

        Raises:
            ValueError: malformed inputs (see :func:`criteria.common.check_inputs`).
        """
        check_inputs(inputs, rule=self.name, need_draft_probs=self.needs_draft_probs, num_heads=self.num_heads)
        L = inputs.draft_token_ids.shape[1]
        T, gen = inputs.temperature, inputs.generator
        heads = head_tokens(inputs.head_logits[:, :L], T, gen)  # [B, L, K]
        ok, js = self.accept_test(inputs, heads)  # [B, L]
        info = dropmatch_trace(inputs, heads, js) if trace else None
        return finish_round(ok, inputs.target_logits, T, gen, info)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(K={self.num_heads}, p_drop={self.p_drop})"
