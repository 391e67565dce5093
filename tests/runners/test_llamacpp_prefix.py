"""Which part of a kept prompt a llama.cpp prefill may reuse (pure: runs without llama-cpp-python).

llama.cpp's result for a token depends on which tokens share its ``llama_decode`` call (README "Known
deviations"), so a prefill reuses a kept prompt only in whole chunks of its own fresh prefill's layout.
"""

from __future__ import annotations

import pytest

from runners.backends.llamacpp_seqs import reusable_prefix


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
