"""Sequence slots of one llama.cpp context: one per row of the batch, plus a few that keep whole prompts.

A prompt that shares a long token prefix with a kept prompt (the 8-shot GSM8K block, ~1,000 tokens, is the same
for every question) starts from that prefix, in whole chunks of a fresh prefill (:func:`reusable_prefix`): the kept
sequence's KV entries are copied to the row (:meth:`runners.backends.llamacpp_context.SeqContext.copy`) and only
the rest of the prompt is computed. This is the HF loop's
``PrefixCache`` (same ``min_shared``, same rule for which prompts are worth keeping) on llama.cpp's sequences. Kept
prompts stay in the context across runs of one process, as the HF loop's prefix caches do; a new prompt takes the
slot whose prompt was reused least often (the oldest among ties), so a sweep's few-shot block survives the runs of
benchmarks without a shared prefix between its methods' runs (Table 6: AR, SD, SD+DM of GSM8K are 4 runs apart,
each IFEval or HumanEval prompt is kept once and never reused).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from runners.backends.llamacpp_context import Feed, SeqContext


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common leading run of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def reusable_prefix(kept: Sequence[int], ids: Sequence[int], chunk: int) -> int:
    """Tokens of a prefill of ``ids`` that may come from the kept prompt ``kept``: their shared prefix, cut to whole
    chunks of ``chunk`` tokens, never ``ids``' last token nor ``kept``'s (each prefill computes its last token
    alone, outside the chunks). A multiple of ``chunk``, 0 when less than one chunk is shared."""
    m = min(shared_prefix(kept, ids), len(kept) - 1, len(ids) - 1)
    return max(m, 0) // chunk * chunk


# Tokens per llama_decode call of a prompt's prefill, and so the unit in which a kept prefix is reused: small, so
# that little of a shared prefix is computed again (Table 6 on llama.cpp, AVX2 build: 1,634 s with 64 against
# 1,796 s with 512; README "Known deviations"), and fixed, so that every prompt is fed in the same calls.
PREFILL_CHUNK = 64


class SeqPool:
    """Row sequences ``0..n_rows-1`` and kept-prompt sequences ``n_rows..n_rows+n_kept-1`` of ``ctx``.

    Args:
        ctx: a :class:`SeqContext` with at least ``n_rows + n_kept`` sequences.
        n_rows: B, rows decoded together.
        n_kept: prompts kept for prefix reuse (0 = no reuse).
        min_shared: shortest shared prefix worth reusing, tokens.
        chunk: tokens per prefill call, at most the context's ``n_batch`` (:data:`PREFILL_CHUNK`).
    """

    def __init__(
        self,
        ctx: SeqContext,
        n_rows: int,
        n_kept: int = 2,
        min_shared: int = 16,
        chunk: int = PREFILL_CHUNK,
    ) -> None:
        if ctx.n_seq < n_rows + n_kept:
            raise ValueError(
                f"context has {ctx.n_seq} sequences; need {n_rows} rows + {n_kept} kept"
            )
        self.ctx, self.n_rows, self.min_shared = ctx, n_rows, min_shared
        self.chunk = min(int(chunk), ctx.n_batch)
        self.kept: dict[int, tuple[int, ...]] = {n_rows + i: () for i in range(n_kept)}
        # per kept slot: (times its prompt was reused, tick of its last store or reuse); the least is replaced
        self.uses: dict[int, tuple[int, int]] = {s: (0, -1) for s in self.kept}
        self._tick = 0
        self.free = list(range(n_rows))

    def reset_rows(self) -> None:
        """Every row sequence cleared and free (kept prompts stay)."""
        for s in range(self.n_rows):
            self.ctx.clear(s)
        self.free = list(range(self.n_rows))

    def acquire(self) -> int:
        """A free row sequence id.

        Raises:
            RuntimeError: all ``n_rows`` are in use.
        """
        if not self.free:
            raise RuntimeError(f"all {self.n_rows} row sequences are in use")
        return self.free.pop(0)

    def release(self, seq: int) -> None:
        """Clear row ``seq`` and make it free."""
        self.ctx.clear(seq)
        self.free.append(seq)

    def prefill(self, seq: int, ids: Sequence[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """Fill row ``seq`` with the prompt ``ids`` (from a kept prefix where one is shared).

        At least the last prompt token is always computed (its output predicts the first token); the prompt
        before it is fed without outputs in calls of ``chunk`` tokens from position 0, and the last token alone
        (so that only its hidden state is extracted). llama.cpp's results for a token depend on which tokens
        share its ``llama_decode`` call (README "Known deviations"), so a kept prefix is reused only in whole
        chunks of that layout (:func:`reusable_prefix`): every prompt then gets the KV entries and logits of its
        own fresh prefill, whichever prompts were kept before it.

        Returns:
            ``(logits [V], hidden [d] or None)`` of the last prompt position.
        """
        slot, n = None, 0
        for s, kept in self.kept.items():
            m = reusable_prefix(kept, ids, self.chunk)
            if m > n:
                slot, n = s, m
        if slot is not None and n >= self.min_shared:
            self.ctx.copy(slot, seq, n)
            self._tick += 1
            self.uses[slot] = (self.uses[slot][0] + 1, self._tick)
        else:
            self.ctx.clear(seq)
            n = 0
        last = len(ids) - 1
        for start in range(n, last, self.chunk):
            self.ctx.decode(
                [
                    Feed(seq, p, int(ids[p]), False)
                    for p in range(start, min(start + self.chunk, last))
                ],
                hidden=False,
            )
        logits, hidden = self.ctx.decode([Feed(seq, last, int(ids[last]), True)])
        self._keep(seq, ids)
        return logits[-1], None if hidden is None else hidden[-1]

    def _keep(self, seq: int, ids: Sequence[int]) -> None:
        """Keep the prompt now in row ``seq`` unless a kept prompt already shares most of it; it replaces the kept
        prompt reused least often (the least recently stored or reused among ties; empty slots first)."""
        if not self.kept:
            return
        if any(
            shared_prefix(k, ids) >= max(self.min_shared, len(ids) // 2) for k in self.kept.values()
        ):
            return
        slot = min(self.kept, key=lambda s: self.uses[s])
        self.ctx.copy(seq, slot, len(ids))
        self.kept[slot] = tuple(int(t) for t in ids)
        self._tick += 1
        self.uses[slot] = (0, self._tick)
