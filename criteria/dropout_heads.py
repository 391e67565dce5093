"""K MC-dropout LM heads on the target's final hidden state, in one matmul: the run's head settings
(:class:`HeadSpec`), the LM head (:class:`LMHead`), the dropout masks and the heads' rows, over the whole vocabulary
or at candidate tokens (:mod:`criteria.candidates`).

Paper: DropMatch (arXiv 2603.03333) Sec. 3.1, Eq. (1)-(3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class HeadSpec:
    """The K MC-dropout heads of a run: how many and at which dropout probability (Eq. 1-3).

    Built once from the run config (``dropmatch.K`` / ``dropmatch.p_drop``) and passed to every backend
    and to :func:`criteria.verify.verify_round`; rules never carry it. ``K = 0`` means no heads
    (AR, SD, EAGLE without DropMatch).

    Attributes:
        K: number of dropout heads, an integer >= 0.
        p_drop: dropout probability, a float in ``[0, 1)`` (ignored when ``K = 0``; stored as 0.0 then).
        top_n: None (exact: the heads cover the whole vocabulary) or N >= 1: the sparse variant
            (``dropmatch.sparse_top_n``; the default profile's decision on a CPU, audited). The heads are evaluated
            on candidate tokens only. Their tokens (Eq. 4, 7) are taken among the plain head's top-N and the draft
            token (:func:`criteria.candidates.head_token_candidates`). Eq. (6) reads them, in the verify round only
            where the majority does not already decide, on the union of the plain head's and the draft's top-N
            (:func:`criteria.candidates.candidate_tokens`) plus one entry for the rest of the vocabulary (logit:
            the plain head's log-sum-exp there). Not the paper's rule: its decision agreement with the exact rule
            is measured (``audit_share``), not assumed.
        check_top_n: None, or N >= 1 (``dropmatch.sparse_check_top_n``, a measurement): the exact rule decides,
            and :func:`criteria.verify.verify_round` also decides each round with the sparse variant at top-N on
            the same dropout masks, tracing both verdicts (``exact_accept`` / ``sparse_accept``) so their
            agreement can be counted (Table 3's footer). Only with the exact rule (``top_n`` None).
        audit_share: a number in ``[0, 1]`` (``dropmatch.audit_share``): with the sparse variant (``top_n``), the
            share of rounds also decided by the exact rule on the same dropout masks (:mod:`criteria.audit`;
            the run keeps the sparse decision); 0 = no audit. Stored as 0.0 when ``K = 0``.
        escape: with the sparse variant only (``dropmatch.sparse_escape``): the rounds carry
            ``VerifyInputs.exact_heads``, so the JS rule estimates the vocabulary beyond the candidates from a
            deterministic sample instead of lumping it, and decides the positions that estimate cannot settle on
            a wider exact top with more samples and then on the exact heads
            (:func:`criteria.dropmatch_js.sampled_decision`, ``TAIL_LADDER``). Default False.

    Raises:
        ValueError: a field out of range, or an audit of an exact run; the message names ``dropmatch.K`` /
            ``dropmatch.p_drop`` / ``dropmatch.sparse_top_n`` / ``dropmatch.audit_share`` and the allowed values.
    """

    K: int = 0
    p_drop: float = 0.0
    top_n: int | None = None
    check_top_n: int | None = None
    audit_share: float = 0.0
    escape: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.K, bool) or not isinstance(self.K, int) or self.K < 0:
            raise ValueError(
                f"dropmatch.K={self.K!r} is invalid; allowed values: an integer >= 0 (0 = no heads)"
            )
        p = self.p_drop
        if (
            isinstance(p, bool)
            or not isinstance(p, (int, float))
            or not math.isfinite(p)
            or not 0.0 <= p < 1.0
        ):
            raise ValueError(
                f"dropmatch.p_drop={p!r} is invalid; allowed values: a number in [0, 1)"
            )
        n = self.top_n
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(
                f"dropmatch.sparse_top_n={n!r} is invalid; allowed values: null (exact) or an "
                "integer >= 1"
            )
        c = self.check_top_n
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1):
            raise ValueError(
                f"dropmatch.sparse_check_top_n={c!r} is invalid; allowed values: null (no check) or an "
                "integer >= 1"
            )
        if c is not None and n is not None:
            raise ValueError(
                f"dropmatch.sparse_check_top_n={c} compares the sparse variant with the exact rule, but "
                f"dropmatch.sparse_top_n={n} makes the run itself sparse; allowed: sparse_top_n=null "
                "with the check, or sparse_check_top_n=null"
            )
        a = self.audit_share
        if (
            isinstance(a, bool)
            or not isinstance(a, (int, float))
            or not math.isfinite(a)
            or not 0.0 <= a <= 1.0
        ):
            raise ValueError(
                f"dropmatch.audit_share={a!r} is invalid; allowed values: a number in [0, 1] (0 = no audit)"
            )
        if a > 0 and n is None and self.K > 0:
            raise ValueError(
                f"dropmatch.audit_share={a} audits the sparse variant against the exact rule, but "
                "dropmatch.sparse_top_n=null makes the run exact; allowed: sparse_top_n=N with the audit, "
                "or audit_share=0"
            )
        if not isinstance(self.escape, bool):
            raise ValueError(
                f"dropmatch.sparse_escape={self.escape!r} is invalid; allowed values: true, false"
            )
        if self.escape and n is None and self.K > 0:
            raise ValueError(
                "dropmatch.sparse_escape=true takes the sparse variant back to the exact heads where it is "
                "unsure, but dropmatch.sparse_top_n=null makes the run exact; allowed: sparse_top_n=N with "
                "the escape, or sparse_escape=false"
            )
        object.__setattr__(self, "audit_share", float(a) if self.K > 0 else 0.0)
        object.__setattr__(self, "escape", self.escape and self.K > 0)
        object.__setattr__(self, "p_drop", float(p) if self.K > 0 else 0.0)
        object.__setattr__(self, "top_n", n if self.K > 0 else None)
        object.__setattr__(self, "check_top_n", c if self.K > 0 else None)

    @property
    def active(self) -> bool:
        """True when the backend must compute head logits (``K >= 1``)."""
        return self.K > 0

    def as_dict(self) -> dict:
        return {
            "K": self.K,
            "p_drop": self.p_drop,
            **({"sparse_top_n": self.top_n} if self.top_n else {}),
            **({"sparse_check_top_n": self.check_top_n} if self.check_top_n else {}),
            **({"audit_share": self.audit_share} if self.audit_share else {}),
            **({"sparse_escape": True} if self.escape else {}),
        }


@dataclass(frozen=True)
class LMHead:
    """The target's LM head as the verify round uses it.

    Attributes:
        weight: ``[V_rows, d]`` (rows beyond ``vocab_size`` are padding and are cut). Under tensor
            parallelism: this rank's vocabulary shard ``[V_padded / tp, d]``.
        bias: ``[V_rows]`` or None (the shard's rows under tensor parallelism).
        vocab_size: V, the number of real vocabulary rows (``<= V_rows``, or of the gathered rows); None = all.
        gather: None, or (tensor parallelism) a function from this shard's logits ``[..., V_padded / tp]`` to
            every shard's, concatenated along the vocabulary ``[..., V_padded]`` (vLLM's
            ``tensor_model_parallel_all_gather(x, dim=-1)``); the padding is cut after it.
    """

    weight: torch.Tensor
    bias: torch.Tensor | None = None
    vocab_size: int | None = None
    gather: Callable[[torch.Tensor], torch.Tensor] | None = None

    def rows(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(weight[:V], bias[:V])``: the unpadded head (the whole shard when ``gather`` is set)."""
        V = self.vocab_size
        if self.gather is not None or V is None or V == self.weight.shape[0]:
            return self.weight, self.bias
        return self.weight[:V], None if self.bias is None else self.bias[:V]

    def full(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits of :meth:`rows` ``[..., V_rows]`` -> the whole vocabulary ``[..., V]`` (gathered, padding cut)."""
        if self.gather is None:
            return logits
        logits = self.gather(logits.contiguous())
        return logits if self.vocab_size is None else logits[..., : self.vocab_size]


def dropout_masks(
    n: int, K: int, d: int, p_drop: float, generator: torch.Generator, device: torch.device | str
) -> torch.Tensor:
    """Keep-masks of K heads at n positions (Eq. 1), drawn from one generator.

    RNG: exactly one ``torch.rand((n, K, d), dtype=float32, generator=generator, device=device)`` call;
    unit ``j`` of head ``k`` at position ``i`` is kept iff ``u[i, k, j] < 1 - p_drop``.

    Args:
        n: positions; K: heads; d: hidden size.
        p_drop: in ``(0, 1)``.
        generator: seeded ``torch.Generator`` on ``device``'s type.
        device: where the masks live (the hidden states' device).

    Returns:
        ``[n, K, d]`` bool.

    Raises:
        ValueError: the generator is on another device type than ``device``.
    """
    return mask_uniforms(n, K, d, generator, device) < (1.0 - p_drop)


def mask_uniforms(
    n: int,
    K: int,
    d: int,
    generator: torch.Generator,
    device: torch.device | str,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The uniforms :func:`dropout_masks` compares with ``1 - p_drop``: ``[n, K, d]`` float32 from exactly one
    ``torch.rand((n, K, d), dtype=float32, generator=generator, device=device)`` call, written into ``out``
    (``[n, K, d]`` float32, contiguous) when given, so that a batch's rows share one buffer and one comparison.

    Args:
        n: positions; K: heads; d: hidden size.
        generator: seeded ``torch.Generator`` on ``device``'s type.
        device: where the uniforms live (the hidden states' device).
        out: None, or the ``[n, K, d]`` float32 tensor to write them into (returned).

    Returns:
        ``[n, K, d]`` float32 in ``[0, 1)``.

    Raises:
        ValueError: the generator is on another device type than ``device``.
    """
    device = torch.device(device)
    if generator.device.type != device.type:
        raise ValueError(
            f"generator is on {generator.device} but the hidden states are on {device}; "
            f"make the generator on the model's device (runners.backends.seeding.make_generator)"
        )
    if out is None:
        return torch.rand((n, K, d), generator=generator, device=device, dtype=torch.float32)
    return torch.rand((n, K, d), generator=generator, device=device, dtype=torch.float32, out=out)


def heads_from_masks(
    hidden: torch.Tensor,
    keep: torch.Tensor,
    p_drop: float,
    lm_head_weight: torch.Tensor,
    lm_head_bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Plain + K dropout-head logits from given masks, in ONE matmul (Eq. 2-3).

    Args:
        hidden: ``[N, d]`` floating, final hidden states (LM-head input).
        keep: ``[N, K, d]`` bool keep-masks (:func:`dropout_masks`).
        p_drop: the masks' dropout probability (inverted-dropout scale ``1 / (1 - p_drop)``).
        lm_head_weight: ``[V, d]``; lm_head_bias: ``[V]`` or None.

    Returns:
        ``[N, 1 + K, V]`` logits in ``hidden``'s dtype; row 0 plain, rows 1..K the dropout heads.
    """
    N, d = hidden.shape
    K = keep.shape[1]
    dropped = dropped_hidden(hidden, keep, p_drop)  # [N, K, d], Eq. (1)-(2)
    stacked = torch.cat([hidden.unsqueeze(1), dropped], dim=1)  # [N, 1+K, d]
    logits = torch.nn.functional.linear(
        stacked.reshape(N * (1 + K), d), lm_head_weight, lm_head_bias
    )
    return logits.reshape(N, 1 + K, -1)  # [N, 1+K, V], Eq. (3)


def dropped_hidden(hidden: torch.Tensor, keep: torch.Tensor, p_drop: float) -> torch.Tensor:
    """The K dropout heads' inputs ``h * m^(i) / (1 - p_drop)`` (Eq. 1-2): ``[N, d]``, ``[N, K, d]`` -> ``[N, K, d]``.

    Paper: Eq. (1)-(2) (inverted dropout of the LM head's input).
    """
    scaled = hidden * (1.0 / (1.0 - p_drop))  # [N, d]
    # a product with the bool mask, not torch.where: the same values for finite hidden states (x * 1 = x,
    # x * 0 = ±0) at a quarter of where's time on CPU in bf16 (measured at [50, 5, 1536])
    return scaled.unsqueeze(1) * keep


# Gathered LM-head rows above this many bytes are taken one position at a time, each distinct token once (a sampled
# tail repeats tokens: about 2.5 draws per distinct token on IFEval), so that the matmul has fewer rows.
GATHER_BYTES = 16 << 20

# The buffer the gathered rows are copied into, one per (dtype, device, d, inference mode), grown to the largest gather
# seen and reused: a fresh allocation of several MB is page-faulted in at every gather, which on a CPU cost several
# times the copy itself (6,144 random bf16 rows of 1,536 on a 2-vCPU AVX512 CPU: 6.5 ms into a fresh tensor, 1.3 ms
# into a reused one). One per inference mode: torch refuses to write into a tensor made under
# ``torch.inference_mode`` (the loops decide there) from outside it (a caller deciding a round without it).
_SCRATCH: dict[tuple[torch.dtype, torch.device, int, bool], torch.Tensor] = {}


def gathered_rows(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``weight[ids]`` as ``[*ids.shape, d]``, a view of a buffer this module reuses: valid until the next call,
    so the caller consumes it at once (as :func:`heads_on_candidates` does, in a matmul).

    Args:
        weight: ``[V, d]``; ids: int64 of any shape, values in ``[0, V)``.
    """
    d = weight.shape[-1]
    n = ids.numel()
    key = (weight.dtype, weight.device, d, torch.is_inference_mode_enabled())
    buffer = _SCRATCH.get(key)
    if buffer is None or buffer.shape[0] < n:
        buffer = _SCRATCH[key] = torch.empty((n, d), dtype=weight.dtype, device=weight.device)
    out = torch.index_select(weight, 0, ids.reshape(n), out=buffer[:n])
    return out.view(*ids.shape, d)


def heads_on_candidates(
    dropped: torch.Tensor,
    lm_head_weight: torch.Tensor,
    lm_head_bias: torch.Tensor | None,
    ids: torch.Tensor,
    duplicate: torch.Tensor,
) -> torch.Tensor:
    """Dropout-head logits at candidate tokens only (Eq. 3 restricted to the rows ``W[ids]``).

    Each logit is one dot product of a head input and a weight row, however the rows are grouped (at most
    ``GATHER_BYTES`` of gathered rows at once; above that one position at a time, each distinct token once).

    Args:
        dropped: ``[M, K, d]`` head inputs (:func:`dropped_hidden`).
        lm_head_weight: ``[V, d]``; lm_head_bias: ``[V]`` or None.
        ids: ``[M, C]`` candidate token ids; duplicate: ``[M, C]`` bool, entries to mask.

    Returns:
        ``[M, K, C]`` logits in the weight's dtype, ``-inf`` at duplicates.
    """
    M, C = ids.shape
    if M * C * lm_head_weight.shape[-1] * lm_head_weight.element_size() <= GATHER_BYTES:
        rows = gathered_rows(lm_head_weight, ids)  # [M, C, d]
        logits = torch.bmm(dropped, rows.transpose(1, 2))  # [M, K, C]
    else:
        logits = torch.stack(
            [_distinct_rows_logits(dropped[i], lm_head_weight, ids[i]) for i in range(M)]
        )
    if lm_head_bias is not None:
        logits = logits + lm_head_bias[ids].unsqueeze(1)
    return logits.masked_fill(duplicate.unsqueeze(1), float("-inf"))


def _distinct_rows_logits(x: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``x`` ``[K, d]`` against the rows ``weight[ids]`` (``ids`` ``[C]``), each distinct row gathered once:
    ``[K, C]`` in the weight's dtype."""
    distinct, at = torch.unique(ids, return_inverse=True)
    return torch.nn.functional.linear(x, gathered_rows(weight, distinct))[:, at]


def dropout_head_logits(
    hidden: torch.Tensor,
    lm_head_weight: torch.Tensor,
    lm_head_bias: torch.Tensor | None = None,
    *,
    num_heads: int,
    p_drop: float,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """Logits of the plain LM head and of K inverted-dropout heads for each position.

    Paper: Eq. (1) ``m_j^(i) ~ Bernoulli(1 - p_drop)`` i.i.d. per hidden unit; Eq. (2)
    ``h^(i) = h * m^(i) / (1 - p_drop)``; Eq. (3) ``l^(i) = W h^(i)``.

    Row 0 is the plain head ``W h (+ b)`` (no dropout). Rows 1..K use independent masks, fresh per
    position and per head. All ``1 + K`` rows of all N positions come from ONE matmul of the stacked
    ``[N * (1 + K), d]`` inputs by ``W.T``, so the bias (if any) is added to every row alike.

    RNG: when ``p_drop > 0``, exactly one ``torch.rand((N, K, d), dtype=float32, generator=generator,
    device=hidden.device)`` call; unit ``j`` of head ``k`` at position ``n`` is kept iff
    ``u[n, k, j] < 1 - p_drop``. The same seed, device type and N therefore give the same masks, which
    is what lets the HF and vLLM backends make identical decisions (CPU and CUDA generators produce
    different streams). When ``p_drop == 0`` no random numbers are drawn and every row is a bitwise
    copy of row 0 (masks all ones, scale 1).

    Inputs are not mutated. Asserted on entry: ranks and matching ``d`` / ``V``, ``num_heads >= 1``,
    ``0 <= p_drop < 1``, a generator on ``hidden``'s device type when ``p_drop > 0``.

    Args:
        hidden: ``[N, d]`` floating, final hidden states after the final norm (the LM head's input).
        lm_head_weight: ``[V, d]``, same dtype and device as ``hidden``.
        lm_head_bias: ``[V]`` or None.
        num_heads: K >= 1, number of dropout heads.
        p_drop: dropout probability in ``[0, 1)``.
        generator: seeded ``torch.Generator`` on ``hidden.device``; may be None only if ``p_drop == 0``.

    Returns:
        ``[N, 1 + K, V]`` logits in the matmul's dtype (that of ``hidden``); row 0 plain, rows 1..K
        dropout heads. ``out[:, 0]`` is the target's ``target_logits``, ``out[:, 1:]`` its
        ``head_logits`` once reshaped to ``[B, L+1, K, V]``.

    Raises:
        ValueError: ``num_heads`` or ``p_drop`` out of range (the message names the field and the
            allowed values), shapes that do not fit, or a missing / wrong-device generator.
    """
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads={num_heads!r} is invalid; allowed values: an integer >= 1")
    if isinstance(p_drop, bool) or not isinstance(p_drop, (int, float)) or not 0.0 <= p_drop < 1.0:
        raise ValueError(f"p_drop={p_drop!r} is invalid; allowed values: a float in [0, 1)")
    if hidden.ndim != 2 or not hidden.is_floating_point():
        raise ValueError(
            f"hidden must be floating [N, d]; got {hidden.dtype} of shape {tuple(hidden.shape)}"
        )
    N, d = hidden.shape
    if lm_head_weight.ndim != 2 or lm_head_weight.shape[1] != d:
        raise ValueError(
            f"lm_head_weight must have shape [V, d] with d={d}; got {tuple(lm_head_weight.shape)}"
        )
    V = lm_head_weight.shape[0]
    if lm_head_bias is not None and tuple(lm_head_bias.shape) != (V,):
        raise ValueError(
            f"lm_head_bias must have shape [V] = [{V}]; got {tuple(lm_head_bias.shape)}"
        )
    K = num_heads

    if p_drop == 0:
        # Masks all ones and scale 1: every head equals the plain head; copy row 0 so the rows are
        # bitwise identical (a stacked matmul need not round identical rows identically).
        plain = torch.nn.functional.linear(hidden, lm_head_weight, lm_head_bias)  # [N, V]
        return plain.unsqueeze(1).expand(N, 1 + K, V).contiguous()  # [N, 1+K, V]

    if generator is None:
        raise ValueError(f"p_drop={p_drop} > 0 needs a seeded torch.Generator (got generator=None)")
    if generator.device.type != hidden.device.type:
        raise ValueError(
            f"generator is on {generator.device} but hidden is on {hidden.device}; pass a generator on hidden's device"
        )
    keep = dropout_masks(N, K, d, p_drop, generator, hidden.device)  # [N, K, d] bool, Eq. (1)
    return heads_from_masks(hidden, keep, p_drop, lm_head_weight, lm_head_bias)  # [N, 1+K, V]
