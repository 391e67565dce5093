"""One model's KV cache as a growing token sequence: feed new tokens, crop on rollback, reuse a shared prefix.

Shapes: ``forward`` returns final hidden states ``[n, d]`` float32 (after the model's final norm, i.e.
the LM-head input) for the ``n`` tokens fed. The LM head is applied by the caller, so the target's own
head and the K dropout heads share one matmul (criteria.dropout_heads).
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch


def crop_cache(cache: Any, length: int) -> None:
    """Truncate a transformers ``DynamicCache`` to its first ``length`` positions (in place).

    transformers 5.x ``DynamicCache.crop`` takes a negative count of positions to remove.
    """
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


class PrefixCache:
    """Keeps the KV caches of a few prompts so later prompts sharing a token prefix skip that prefill.

    The 8-shot GSM8K prompt (~1,000 tokens) is the same for every question; like vLLM's prefix
    caching, its keys/values are computed once per model and copied for each sample. Entries are
    kept for the last ``max_entries`` distinct prompts (one per benchmark in a sweep).
    """

    def __init__(self, min_shared: int = 16, max_entries: int = 4) -> None:
        self.min_shared = min_shared
        self.max_entries = max_entries
        self.entries: list[tuple[tuple[int, ...], Any]] = []

    @staticmethod
    def _shared(a: Sequence[int], b: Sequence[int]) -> int:
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    def lookup(self, ids: Sequence[int]) -> tuple[Any, int]:
        """Return ``(cache copy cropped to the longest shared prefix, its length)`` or ``(None, 0)``."""
        best, best_n = None, 0
        for stored_ids, cache in self.entries:
            n = self._shared(stored_ids, ids)
            if n > best_n:
                best, best_n = cache, n
        best_n = min(best_n, len(ids) - 1)  # always feed at least the last prompt token
        if best is None or best_n < self.min_shared:
            return None, 0
        cache = copy.deepcopy(best)
        crop_cache(cache, best_n)
        return cache, best_n

    def store(self, ids: Sequence[int], cache: Any) -> None:
        """Remember ``cache`` for ``ids`` unless an entry already shares most of it."""
        for stored_ids, _ in self.entries:
            if self._shared(stored_ids, ids) >= max(self.min_shared, len(ids) // 2):
                return
        self.entries.append((tuple(ids), copy.deepcopy(cache)))
        del self.entries[: -self.max_entries]


class KVState:
    """A model plus its cache over the committed-and-fed token sequence.

    Attributes:
        model: transformers causal LM (``model.model`` is the decoder returning ``last_hidden_state``).
        length: number of positions in the cache.
    """

    def __init__(self, model: Any, prefix_cache: PrefixCache | None = None) -> None:
        from transformers import DynamicCache

        self.model = model
        self.prefix_cache = prefix_cache
        self.cache = DynamicCache()
        self.length = 0
        head = model.get_output_embeddings()
        self.lm_head_weight = head.weight  # [V, d]
        self.lm_head_bias = getattr(head, "bias", None)

    def prefill(self, ids: Sequence[int]) -> torch.Tensor:
        """Fill the cache with ``ids`` (reusing a shared prefix when a PrefixCache is set).

        Returns the final hidden state ``[d]`` of the last prompt position (it predicts the first
        output token). At least that last token is always fed, even on a full prefix-cache hit.
        """
        start = 0
        if self.prefix_cache is not None:
            cache, start = self.prefix_cache.lookup(ids)
            if cache is not None:
                self.cache, self.length = cache, start
        hidden = self.forward(ids[start:])
        if self.prefix_cache is not None:
            self.prefix_cache.store(ids, self.cache)
        return hidden[-1]

    @torch.inference_mode()
    def forward(self, new_ids: Sequence[int]) -> torch.Tensor:
        """Feed ``new_ids`` after the cached positions; return their final hidden states ``[n, d]``."""
        x = torch.tensor([list(new_ids)], dtype=torch.long, device=self.lm_head_weight.device)
        out = self.model.model(input_ids=x, past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        self.length += len(new_ids)
        return out.last_hidden_state[0]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Plain LM head: ``[n, d] -> [n, V]`` float32."""
        out = hidden @ self.lm_head_weight.T
        if self.lm_head_bias is not None:
            out = out + self.lm_head_bias
        return out.float()

    def rollback(self, length: int) -> None:
        """Drop cached positions beyond ``length`` (rejected drafts)."""
        if length < self.length:
            crop_cache(self.cache, length)
            self.length = length
