"""B sequences' KV caches in one padded cache: a valid-slot mask per row instead of per-row cropping.

Each row of the batch owns a token sequence of its own length. The cache holds ``S`` slots per row; slot
``s`` of row ``b`` is *valid* when it holds a committed token of that row, else it is padding (a row that
joined with a shorter prompt is left-padded) or a hole (a draft the row rejected while another row accepted
more). Invalid slots are masked out of attention, so a row attends exactly to its own committed tokens; the
rotary position of every token is its index in its own sequence (``position_ids``). Hence a row's hidden
states equal those of the same row decoded alone, up to the float rounding of batched kernels.

Rollback is "mark invalid" (no per-row crop); slots invalid in every row at the end are cropped, so at
``B = 1`` a rollback is the plain crop. Holes are squeezed out (:meth:`BatchKV.compact`, one gather per layer)
when they exceed a quarter of the cache, and whenever rows leave.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer


def _layer(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    """A transformers ``DynamicLayer`` holding ``keys`` / ``values`` ``[B, H, S, D]`` (contiguous).

    Kept as transformers' own layer, which concatenates on every forward: SDPA's grouped-query path at
    q_len = 1 is slower on CPU with the non-contiguous keys a preallocated buffer's views would give.
    """
    layer = DynamicLayer()
    layer.keys, layer.values = keys.contiguous(), values.contiguous()
    layer.dtype, layer.device, layer.is_initialized = keys.dtype, keys.device, True
    return layer


def _layers(cache: Any) -> list:
    layers = list(cache.layers)
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise ValueError(
                f"batched decoding supports full-attention caches only; got {type(layer).__name__}"
            )
    return layers


class BatchKV:
    """One model and the padded cache of the B rows it decodes together.

    Attributes:
        model: transformers causal LM (``model.model`` returns ``last_hidden_state``).
        valid: ``[B, S]`` bool on the model's device, which slots hold committed tokens.
        cache: a ``DynamicCache`` (None while the batch is empty).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        head = model.get_output_embeddings()
        self.lm_head_weight = head.weight  # [V, d]
        self.lm_head_bias = getattr(head, "bias", None)
        self.device = self.lm_head_weight.device
        self.cache: Any = None
        self.valid = torch.zeros((0, 0), dtype=torch.bool, device=self.device)

    @property
    def rows(self) -> int:
        return self.valid.shape[0]

    def lengths(self) -> list[int]:
        """Committed tokens in the cache, per row."""
        return self.valid.sum(dim=1).tolist()

    def add(self, single: Any) -> None:
        """Append a row whose cache ``single`` (a 1-row DynamicCache, all slots valid) was filled alone."""
        src = _layers(single)
        n = src[0].get_seq_length()
        S = self.valid.shape[1]
        width = max(S, n)
        new_valid = torch.zeros((1, width), dtype=torch.bool, device=self.device)
        new_valid[0, width - n :] = True
        if self.cache is None:
            self.cache = DynamicCache()
            self.cache.layers = [_layer(layer.keys, layer.values) for layer in src]
            self.cache.layer_class_to_replicate = None
            self.valid = new_valid
            return
        pad_old, pad_new = width - S, width - n
        layers = []
        for old, layer in zip(self.cache.layers, src):
            k = torch.cat([_left_pad(old.keys, pad_old), _left_pad(layer.keys, pad_new)])
            v = torch.cat([_left_pad(old.values, pad_old), _left_pad(layer.values, pad_new)])
            layers.append(_layer(k, v))
        self.cache.layers = layers
        self.valid = torch.cat([_left_pad(self.valid, pad_old, dim=1), new_valid])

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, new_valid: torch.Tensor | None = None) -> torch.Tensor:
        """Feed ``tokens`` ``[B, n]`` int64 after the cache; return final hidden states ``[B, n, d]``.

        ``new_valid`` ``[B, n]`` bool marks padding among the fed tokens (left padding of rows that need fewer
        tokens; None = all valid). A valid token's position is the row's committed count before it.
        """
        B, n = tokens.shape
        if new_valid is None:
            new_valid = torch.ones((B, n), dtype=torch.bool, device=self.device)
        valid = torch.cat([self.valid, new_valid], dim=1)  # [B, S + n]
        counts = valid.cumsum(dim=1)[
            :, -n:
        ]  # [B, n] committed tokens up to and including each fed slot
        positions = (counts - 1).clamp(min=0)  # a valid token's index in its own sequence
        mask = (
            None if bool(valid.all()) else valid.long()
        )  # no padding anywhere: plain causal attention
        out = self.model.model(
            input_ids=tokens,
            attention_mask=mask,
            position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
        )
        self.cache = out.past_key_values
        self.valid = valid
        return out.last_hidden_state

    def keep_last(self, m: int, keep: torch.Tensor) -> None:
        """Of the last ``m`` slots, row ``b`` keeps its first ``keep[b]`` (rollback of rejected drafts).

        Args:
            m: slots written by the latest forwards that the decision covers.
            keep: ``[B]`` int64 in ``[0, m]``, on the model's device.
        """
        if m <= 0:
            return
        S = self.valid.shape[1]
        idx = torch.arange(m, device=self.device)
        tail = self.valid[:, S - m :] & (idx[None, :] < keep[:, None])
        self.valid = torch.cat([self.valid[:, : S - m], tail], dim=1)
        self._trim_tail()

    def _trim_tail(self) -> None:
        any_valid = self.valid.any(dim=0)  # [S]
        S = any_valid.shape[0]
        last = int(any_valid.nonzero().max()) + 1 if bool(any_valid.any()) else 0
        if last < S:
            self.cache.crop(-(S - last))
            self.valid = self.valid[:, :last]

    def holes(self) -> float:
        """Share of invalid slots in the cache (padding + holes), in [0, 1]."""
        return 0.0 if self.valid.numel() == 0 else 1.0 - float(self.valid.float().mean())

    def compact(self, rows: Sequence[int] | None = None) -> None:
        """Keep ``rows`` (default: all) and squeeze invalid slots out: each row's valid slots, left-padded.

        One gather per layer (copies the cache). Rows leave the batch this way.
        """
        B = self.rows
        keep = list(range(B)) if rows is None else list(rows)
        if not keep:
            self.cache, self.valid = None, torch.zeros((0, 0), dtype=torch.bool, device=self.device)
            return
        sel = torch.tensor(keep, dtype=torch.long, device=self.device)
        valid = self.valid.index_select(0, sel)  # [B', S]
        n = valid.sum(dim=1)  # [B']
        width = int(n.max())
        S = valid.shape[1]
        # source slot of each target slot: valid slots in order, right-aligned; padding reads slot 0
        order = torch.argsort(
            (~valid).to(torch.int8), dim=1, stable=True
        )  # valid slots first, in order
        j = torch.arange(width, device=self.device)
        offset = (width - n)[:, None]  # [B', 1] padding on the left
        src = order.gather(1, (j[None, :] - offset).clamp(min=0, max=S - 1))  # [B', width]
        new_valid = j[None, :] >= offset
        src = torch.where(new_valid, src, torch.zeros_like(src))
        layers = []
        for layer in self.cache.layers:
            k, v = layer.keys.index_select(0, sel), layer.values.index_select(0, sel)
            H, D, Dv = k.shape[1], k.shape[-1], v.shape[-1]
            gk = k.gather(2, src[:, None, :, None].expand(-1, H, -1, D))
            gv = v.gather(2, src[:, None, :, None].expand(-1, H, -1, Dv))
            layers.append(_layer(gk, gv))
        self.cache.layers = layers
        self.valid = new_valid

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Plain LM head: ``[..., d] -> [..., V]`` float32."""
        return torch.nn.functional.linear(hidden, self.lm_head_weight, self.lm_head_bias).float()


def _left_pad(t: torch.Tensor, n: int, dim: int = 2) -> torch.Tensor:
    """Prepend ``n`` zero (False) slots along ``dim``."""
    if n == 0:
        return t
    shape = list(t.shape)
    shape[dim] = n
    return torch.cat([torch.zeros(shape, dtype=t.dtype, device=t.device), t], dim=dim)
