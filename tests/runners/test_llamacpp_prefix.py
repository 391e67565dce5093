"""Which part of a kept prompt a llama.cpp prefill may reuse, and which prompts stay kept (pure: runs without
llama-cpp-python).

llama.cpp's result for a token depends on which tokens share its ``llama_decode`` call (README "Known
deviations"), so a prefill reuses a kept prompt only in whole chunks of its own fresh prefill's layout.
"""

from __future__ import annotations

import numpy as np
import pytest

from runners.backends.llamacpp_seqs import SeqPool, reusable_prefix


@pytest.mark.parametrize(
    "kept, ids, chunk, want",
    [
        (list(range(100)), list(range(60)) + [7, 7, 7], 16, 48),  # 60 shared -> 3 whole chunks
        (list(range(100)), list(range(64)) + [7], 16, 64),  # exactly 4 chunks shared
        (list(range(100)), list(range(15)) + [7] * 40, 16, 0),  # less than one chunk
        (
            list(range(33)),
            list(range(33)) + [7] * 40,
            16,
            32,
        ),  # all of kept shared: its last token is not
        (
            list(range(32)),
            list(range(32)) + [7] * 40,
            16,
            16,
        ),  # kept's last token (31) closes chunk 2: not reused
        (list(range(100)), list(range(33)), 16, 32),  # ids' last token is always computed
        (list(range(100)), list(range(32)), 16, 16),
        ([5] * 10, [6] * 10, 4, 0),  # nothing shared
        (list(range(600)), list(range(560)) + [1], 512, 512),  # the default n_batch
    ],
)
def test_reusable_prefix_is_whole_chunks_of_a_fresh_prefill(kept, ids, chunk, want):
    assert reusable_prefix(kept, ids, chunk) == want


def test_reusable_prefix_of_empty_prompts_is_zero():
    assert reusable_prefix([], [1, 2, 3], 4) == 0
    assert reusable_prefix([1, 2, 3], [1], 4) == 0


class _FakeContext:
    """The part of :class:`runners.backends.llamacpp_context.SeqContext` a :class:`SeqPool` calls: sequences as
    token lists, and the tokens each prefill computed (``computed``)."""

    def __init__(self, n_seq: int, n_batch: int = 512) -> None:
        self.n_seq, self.n_batch = n_seq, n_batch
        self.seqs: dict[int, list[int]] = {s: [] for s in range(n_seq)}
        self.computed = 0

    def decode(self, feed, hidden=None):
        for f in feed:
            assert f.pos == len(self.seqs[f.seq])
            self.seqs[f.seq].append(f.token)
        self.computed += len(feed)
        return np.zeros((1, 4), np.float32), None

    def copy(self, src: int, dst: int, n: int) -> None:
        self.seqs[dst] = list(self.seqs[src][:n])

    def clear(self, seq: int) -> None:
        self.seqs[seq] = []


def test_a_reused_prefix_outlives_prompts_that_share_none():
    """Table 6's order on one context: GSM8K's runs (8-shot block reused by every item) are 4 runs apart, with runs of
    benchmarks whose prompts share nothing between them; the block stays kept, so the next GSM8K run prefills only
    each question (the kept prompt reused least often is the one replaced)."""
    shots = list(range(1000, 1300))  # the few-shot block, 300 tokens

    def gsm8k(i):
        return shots + [10 * i + j for j in range(1, 9)]

    def other(i):
        return [50_000 + 100 * i + j for j in range(40)]

    ctx = _FakeContext(n_seq=3)
    pool = SeqPool(ctx, n_rows=1, n_kept=2, chunk=64)
    for i in range(5):  # a GSM8K run: the block computed once
        pool.prefill(0, gsm8k(i))
    for i in range(20):  # runs of other benchmarks: every prompt kept once, never reused
        pool.prefill(0, other(i))
    before = ctx.computed
    pool.prefill(0, gsm8k(7))
    assert ctx.computed - before == len(gsm8k(7)) - 256  # 4 whole chunks of the block reused
    assert ctx.seqs[0] == gsm8k(7)
