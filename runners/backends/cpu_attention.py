"""Grouped-query attention for the transformers loop on a CPU: decode steps and verify passes as grouped matmuls.

transformers' ``sdpa`` attention (``transformers.integrations.sdpa_attention``) repeats each key/value head for
its query heads (``repeat_kv``) whenever a mask is given, a copy of the whole cache in every layer; and the CPU
kernel of ``torch.nn.functional.scaled_dot_product_attention`` is slow for a few query tokens over a long cache
in bf16 even without that copy (``scripts/attention_cost.py``: 11.7 ms per layer for a batch-8 decode step over
1,200 cached tokens, where the matmuls below take under 1 ms).

:func:`cpu_gqa` therefore computes the attention of up to :data:`GROUPED_MAX_QUERY` new tokens (a decode step,
a verify pass of L + 1 tokens) directly: each group's query heads times the group's shared K and V, no copy of
the cache. Scores and softmax are float32 (the query and keys upcast; a float32 K of one layer is small next to
the weights a step reads), the probabilities go back to the value's dtype for the second matmul, as the CPU
flash kernel does, so its error against a float64 reference matches SDPA's
(``tests/runners/test_cpu_attention.py``). Longer queries (prefills) keep SDPA, with ``enable_gqa`` under a mask
so the cache is not repeated either. CUDA keeps transformers' ``sdpa``: a mask with ``enable_gqa`` falls back to
its math kernel there.

Registered under :data:`NAME` in transformers' ``AttentionInterface`` and, with sdpa's mask builder, in its
``AttentionMaskInterface`` (the documented extension points; without a mask builder transformers passes no mask
to a custom attention). The loader and the transformers loop switch CPU models to it (:func:`use_cpu_gqa`); the
loop imports this module, so its numbers are part of the loop's decision-code fingerprint
(``runners.records.fingerprint``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "cpu_gqa"
# New tokens up to which the grouped matmuls run: a verify pass has L + 1 (L <= 10 in every profile); beyond,
# the float32 scores [B, H, q, S] of a prefill would be large, and SDPA's blocked kernel does better.
GROUPED_MAX_QUERY = 32


def grouped_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
) -> torch.Tensor:
    """Softmax attention of grouped query heads over their shared key/value heads.

    Args:
        query: ``[B, H, q, D]``; key, value: ``[B, H_kv, S, D]``, H a multiple of H_kv (query head h reads
            key/value head ``h // (H / H_kv)``, as ``repeat_kv``).
        attention_mask: ``[B or 1, 1, q, S]`` bool (True: attend) or additive float, or None (every query token
            attends every key: a single new token).
        scaling: the factor on ``q · k``.

    Returns:
        ``[B, H, q, D]`` in ``value``'s dtype; a query token that may attend nothing gets zeros (as SDPA).
    """
    B, H, q, D = query.shape
    Hk = key.shape[1]
    g = H // Hk
    scores = torch.matmul(
        query.float().reshape(B, Hk, g * q, D) * scaling, key.float().transpose(-1, -2)
    ).view(B, Hk, g, q, -1)  # [B, H_kv, g, q, S] float32
    if attention_mask is not None:
        m = attention_mask[:, :, None]  # [B, 1, 1, q, S]: the same for every head
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~m, float("-inf"))
        else:
            scores = scores + m
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs.to(value.dtype).view(B, Hk, g * q, -1), value).view(B, H, q, D)
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        sees = attention_mask.any(dim=-1)  # [B, 1, q]
        if not bool(sees.all()):  # all -inf: softmax gives NaN there, SDPA gives 0
            out = out.masked_fill(~sees[..., None], 0.0)
    return out


def cpu_gqa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: :func:`grouped_attention` for a few new tokens (module docstring),
    else SDPA without repeating the key/value heads.

    Args:
        query: ``[B, H, q, D]``; key, value: ``[B, H_kv, S, D]`` (H a multiple of H_kv).
        attention_mask: ``[B, 1, q, S]`` bool or additive float, or None (then causal among the new tokens when
            ``q > 1``, as transformers' sdpa path).

    Returns:
        ``([B, q, H, D], None)`` as ``sdpa_attention_forward``.
    """
    q = query.shape[2]
    grouped_ok = (
        query.device.type == "cpu"
        and dropout == 0.0
        and q <= GROUPED_MAX_QUERY
        and (attention_mask is not None or q == 1)
        and kwargs.get("position_bias") is None
        and kwargs.get("cache") is None
        and not kwargs.get("output_attentions", False)
    )
    if grouped_ok:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        out = grouped_attention(query, key, value, attention_mask, scale)
        return out.transpose(1, 2).contiguous(), None
    if (
        attention_mask is None
        or key.shape[1] == query.shape[1]
        or kwargs.get("position_bias") is not None
        or kwargs.get("cache") is not None
        or query.device.type != "cpu"
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        scale=scaling,
        is_causal=False,  # as transformers' sdpa path whenever a mask is given
        enable_gqa=True,
    )
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, cpu_gqa)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks transformers builds for sdpa


def use_cpu_gqa(model: Any) -> None:
    """Switch a CPU model that uses transformers' ``sdpa`` attention to :func:`cpu_gqa` (in place; a model on
    another device, or with another attention, is left as it is)."""
    device = getattr(model, "device", None)
    if device is None or torch.device(device).type != "cpu":
        return
    if getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(NAME)
