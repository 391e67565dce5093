"""What the field's training-free lossy rules share: knob checks, the target distribution, the emitted token.

The rules (``fly``, ``fsd``, ``typical``, ``relaxed_topk``, ``prob_threshold``, ``static_ensemble``, ``bild``,
``block_verify``) are built from ``method.kwargs`` (``conf/method/<name>.yaml``). A knob outside its range makes
the constructor raise ``ValueError`` naming the field (``method.kwargs.<knob>``) and the allowed values; config
validation (:func:`runners.config.validate.validate`) builds the rule and calls its ``check_round(L=, temperature=)``,
so a bad knob, a draft length the rule cannot use or a temperature it does not define is refused before any
model loads.

Every function here is pure: inputs are not mutated, random draws come only from the generator passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from criteria.common import sample_categorical, select_position

FIELD = "method.kwargs"


def _invalid(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{FIELD}.{name}={value!r} is invalid; allowed: {allowed}")


def knob_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allowed: str,
) -> float:
    """``value`` as a float if it is a finite number in the range, else ValueError naming ``method.kwargs.<name>``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _invalid(name, value, allowed)
    v = float(value)
    if low is not None and (v < low or (low_open and v == low)):
        raise _invalid(name, value, allowed)
    if high is not None and (v > high or (high_open and v == high)):
        raise _invalid(name, value, allowed)
    return v


def knob_int(name: str, value: Any, *, low: int, allowed: str) -> int:
    """``value`` as an int (an integral float counts) ``>= low``, else ValueError naming the field."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not float(value).is_integer()
        or value < low
    ):
        raise _invalid(name, value, allowed)
    return int(value)


def knob_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value`` if it is one of ``choices``, else ValueError naming the field and the choices."""
    if value not in choices:
        raise _invalid(name, value, ", ".join(choices))
    return str(value)


def refuse_sampling(rule: str, temperature: float, why: str) -> None:
    """ValueError for a greedy-only rule at ``temperature > 0`` (names ``decoding.temperature``)."""
    if temperature > 0:
        raise ValueError(
            f"decoding.temperature={temperature} is not defined for method.criterion={rule!r}; "
            f"allowed: 0 ({why})"
        )


def scaled_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``softmax(logits / T)`` in float32, with ``T = 1`` when greedy (``temperature == 0``).

    The scale the field's engines use for a greedy request's probabilities: vLLM's samplers replace a greedy
    temperature by 1 before the softmax, and the backends' draft probabilities are ``softmax(draft_logits)`` then.

    Args:
        logits: ``[..., V]`` raw logits.
        temperature: ``>= 0``.

    Returns:
        ``[..., V]`` float32 probabilities.
    """
    T = temperature if temperature > 0 else 1.0
    return torch.softmax(logits.float() / T, dim=-1)


def at_tokens(probs: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """``probs[b, i, token_ids[b, i]]``: ``[B, L, V]`` and ``[B, L]`` int64 -> ``[B, L]``."""
    return probs.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def sample_residual(
    p: torch.Tensor,
    q: torch.Tensor,
    num_accepted: torch.Tensor,
    generator: torch.Generator,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """The token emitted after the accepted prefix: a sample of ``norm(max(0, s * p_r - q_r))`` at the first
    rejected position r, or of ``p_L`` (the bonus) when all L drafts were accepted.

    Paper: Leviathan et al. 2023 Alg. 1 (residual ``max(0, p - q)``, ``s = 1``); block verification (Sun et al.
    2024, arXiv 2403.10444, Alg. 2) uses ``s = p_tau``, the prefix's joint ratio. A residual with no mass (``p``
    and ``q`` equal up to rounding) falls back to ``p_r``, as ``rejection`` does.

    RNG: exactly one ``torch.rand([B])`` (:func:`criteria.common.sample_categorical`).

    Args:
        p: ``[B, L+1, V]`` float target probabilities (position L = bonus).
        q: ``[B, L, V]`` float draft probabilities.
        num_accepted: ``[B]`` int64 in ``[0, L]``.
        generator: the round's generator.
        scale: ``[B]`` float ``s`` (default 1).

    Returns:
        ``[B]`` int64 token ids.
    """
    q_pad = torch.cat(
        [q.float(), torch.zeros_like(p[:, :1])], dim=1
    )  # [B, L+1, V]; q = 0 at the bonus
    p_at = select_position(p, num_accepted)  # [B, V]
    scaled = p_at if scale is None else p_at * scale.unsqueeze(-1)
    residual = (scaled - select_position(q_pad, num_accepted)).clamp_min(
        0.0
    )  # [B, V]; = p_L at bonus
    has_mass = residual.sum(dim=-1, keepdim=True) > 0
    return sample_categorical(torch.where(has_mass, residual, p_at), generator)


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``KL(p || q) = sum_x p(x) (log p(x) - log q(x))`` in nats, over the last dim.

    Terms with ``p(x) = 0`` count 0; ``p(x) > 0 = q(x)`` gives ``+inf``. Not clamped.

    Args:
        p, q: ``[..., V]`` probabilities, broadcastable.

    Returns:
        ``[...]`` float32 (float64 stays float64), ``>= 0`` up to rounding.
    """
    dtype = torch.promote_types(torch.promote_types(p.dtype, q.dtype), torch.float32)
    p, q = p.to(dtype), q.to(dtype)
    zero = torch.zeros((), dtype=dtype, device=p.device)
    terms = torch.where(p > 0, p * (torch.log(p) - torch.log(q)), zero)
    return terms.sum(dim=-1)
