"""Grouped-query attention on a CPU without copying the KV cache per query head.

transformers' ``sdpa`` attention (``transformers.integrations.sdpa_attention``) hands
``torch.nn.functional.scaled_dot_product_attention`` GQA heads natively only when no attention mask is given;
with a mask (every batched or rolled-back cache here: padding and holes) it first repeats each key/value head
for its query heads (``repeat_kv``), a copy of the whole cache in every layer of every forward. On the CPU,
``scaled_dot_product_attention(..., enable_gqa=True)`` with the same mask returns the same numbers without that
copy (``tests/runners/test_attention.py`` checks equality bit for bit on the tiny pair and on random
tensors). On CUDA a mask with ``enable_gqa`` falls back to the math kernel (transformers' comment), so the
model keeps ``sdpa`` there.

Registered under :data:`NAME` in transformers' ``AttentionInterface`` and, with sdpa's mask builder, in its
``AttentionMaskInterface`` (the documented extension points; without a mask builder transformers passes no mask
to a custom attention); a model uses it through ``model.set_attn_implementation(NAME)`` (:func:`use_cpu_gqa`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "sdpa_cpu_gqa"


def sdpa_cpu_gqa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' ``sdpa`` attention, with masked GQA done by the kernel (module docstring).

    Args:
        query: ``[B, H, q, D]``; key, value: ``[B, H_kv, S, D]`` (H a multiple of H_kv).
        attention_mask: ``[B, 1, q, S]`` bool or additive float, or None.

    Returns:
        ``([B, q, H, D], None)`` as ``sdpa_attention_forward``.
    """
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


AttentionInterface.register(NAME, sdpa_cpu_gqa)
AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks transformers builds for sdpa


def use_cpu_gqa(model: Any) -> None:
    """Switch a CPU model that uses transformers' ``sdpa`` attention to :func:`sdpa_cpu_gqa` (in place)."""
    if getattr(model.config, "_attn_implementation", None) == "sdpa":
        model.set_attn_implementation(NAME)
