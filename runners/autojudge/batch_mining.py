"""Auto-Judge mining with the target's greedy continuations of several prompts decoded together.

Algorithm 1 (:func:`runners.autojudge.mining.search`) stays sequential within a prompt: each prompt's search
asks for one greedy target continuation at a time (its response, then one alternative per mismatch) and the
labels depend on the previous ones. Across prompts the searches are independent, so up to ``batch_size`` of
them advance in lockstep: every row of a :class:`runners.backends.batch_kv.BatchKV` decodes the continuation
its search asked for, one target forward per token for all rows. When a row's continuation ends, its search
reads the draft (alone, through its own :class:`runners.autojudge.mining.Tracked`) and asks for the next
one, which the row decodes from the next step on; when a search ends, its row leaves and the next prompt
joins (continuous batching: prompts differ in their number of mismatches, so fixed groups would wait for
their slowest prompt).

Exactness: a row attends only to its own tokens at its own positions (:mod:`runners.backends.batch_kv`), so
its hidden states equal the sequential ones up to the float rounding of batched kernels; the labels are the
sequential ones unless that rounding flips a near-tied argmax of the target. The draft's reads, and so the
``dd`` features, are the sequential computations themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

from runners.autojudge.mining import MinedItem, Search
from runners.backends.batch_kv import BatchKV
from runners.backends.kv_state import KVState, PrefixCache


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of ``a`` and ``b``."""
    if len(a) <= len(b) and list(b[: len(a)]) == list(a):
        return len(a)
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class BatchTarget:
    """The target's rows in one :class:`BatchKV`, each knowing which token ids its cache holds.

    The batched counterpart of :class:`runners.autojudge.mining.Tracked`: :meth:`feed_to` makes every row's
    cache hold a given sequence, rolling back to the longest prefix it already holds.
    """

    def __init__(self, model: object, prefix_cache: PrefixCache | None = None) -> None:
        self.model, self.prefix_cache = model, prefix_cache
        self.kv = BatchKV(model)
        self.ids: list[list[int]] = []

    def add(self, prompt: Sequence[int]) -> torch.Tensor:
        """Prefill ``prompt`` alone (prefix cache) and append it as the last row; its last hidden ``[d]``."""
        state = KVState(self.model, self.prefix_cache)
        h = state.prefill(list(prompt))
        self.kv.add(state.cache)
        self.ids.append(list(prompt))
        return h

    def keep(self, rows: Sequence[int]) -> None:
        """Keep only ``rows`` (indices, in order); the others leave the batch."""
        self.kv.compact(rows)
        self.ids = [self.ids[i] for i in rows]

    def feed_to(self, seqs: Sequence[Sequence[int]]) -> torch.Tensor:
        """Make row b's cache hold ``seqs[b]`` (one forward for all rows); hidden ``[B, d]`` at each last token.

        Row b keeps the longest prefix of ``seqs[b]`` it holds (at most ``len(seqs[b]) - 1`` tokens, so at least
        one token is fed) and feeds the rest; rows feeding fewer tokens are left-padded.
        """
        if len(seqs) != self.kv.rows:
            raise ValueError(f"feed_to: {len(seqs)} sequences for {self.kv.rows} rows")
        keep = [min(_shared(ids, s), len(s) - 1) for ids, s in zip(self.ids, seqs)]
        self._roll_back(keep)
        lack = [list(s[k:]) for s, k in zip(seqs, keep)]
        width = max(len(x) for x in lack)
        dev = self.kv.device
        tokens = torch.tensor(
            [[0] * (width - len(x)) + x for x in lack], dtype=torch.long, device=dev
        )
        ok = torch.tensor([[False] * (width - len(x)) + [True] * len(x) for x in lack], device=dev)
        hidden = self.kv.forward(tokens, None if bool(ok.all()) else ok)  # [B, width, d]
        self.ids = [list(s) for s in seqs]
        if (
            self.kv.holes() > 0.25
        ):  # rollbacks and padding leave invalid slots; squeeze them out now and then
            self.kv.compact()
        return hidden[:, -1]

    def _roll_back(self, keep: Sequence[int]) -> None:
        """Row b keeps its first ``keep[b]`` committed tokens (:meth:`BatchKV.keep_last` over the tail)."""
        held = [len(ids) for ids in self.ids]
        if all(k >= n for k, n in zip(keep, held)):
            return
        S = self.kv.valid.shape[1]
        counts = self.kv.valid.cumsum(dim=1)  # [B, S] committed tokens up to each slot
        # slots a row keeps: those up to its keep[b]-th committed token (the rest of a row past it is dropped)
        ends = [
            int((counts[b] <= k).sum()) if k < n else S for b, (k, n) in enumerate(zip(keep, held))
        ]
        m = S - min(ends)
        self.kv.keep_last(m, torch.tensor([e - (S - m) for e in ends], device=self.kv.device))

    def argmax(self, hidden: torch.Tensor) -> list[int]:
        """Greedy next token of each row of ``hidden`` ``[B, d]``."""
        return self.kv.logits(hidden).argmax(-1).tolist()


@dataclass
class _Row:
    index: int  # position of the search in the input
    steps: Search
    n: int  # prompt tokens
    seq: list[int]  # the continuation being decoded (prefix included)
    first: torch.Tensor | None = None  # target hidden at the prefix's last token, once fed
    seconds: float = 0.0  # this search's share of the wall time
    item: MinedItem | None = None


def mine_batched(
    target_model: object,
    searches: Iterable[Search],
    *,
    batch_size: int,
    max_new_tokens: int,
    finished: Callable[[list[int]], bool],
    prefix_cache: PrefixCache | None = None,
) -> Iterator[tuple[int, MinedItem, float]]:
    """Run ``searches`` (:func:`runners.autojudge.mining.search` generators), ``batch_size`` at a time.

    Each continuation is decoded as :func:`runners.autojudge.mining.greedy_continue` decodes it (greedy, until
    ``finished(response)`` or ``max_new_tokens`` response tokens), with the target's rows fed together.

    Yields:
        ``(index, item, seconds)`` as each search ends (not in input order): its index in ``searches``, its
        :class:`MinedItem`, and its share of the wall time in seconds (each batched forward's time split evenly
        among its rows, plus the time of the row's own prefill and search steps), so the shares sum to the
        wall time.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is invalid; allowed: an integer >= 1")
    target = BatchTarget(target_model, prefix_cache)
    rows: list[_Row] = []
    queue = enumerate(searches)

    def decoding(row: _Row) -> bool:
        return len(row.seq) - row.n < max_new_tokens and not finished(row.seq[row.n :])

    def advance(row: _Row, hidden: torch.Tensor, token: int) -> None:
        """Row's target hidden ``[d]`` at the end of ``row.seq`` and its greedy token: extend or end the continuation."""
        if row.first is None:
            row.first = hidden
        if decoding(row):
            row.seq.append(token)
            if decoding(row):
                return
        try:
            row.seq, row.first = list(row.steps.send((row.seq, row.first))), None
        except StopIteration as done:
            row.item = done.value

    while True:
        while len(rows) < batch_size and (nxt := next(queue, None)) is not None:
            t0 = time.perf_counter()
            index, steps = nxt
            prompt = next(steps)
            row = _Row(index=index, steps=steps, n=len(prompt), seq=list(prompt))
            h = target.add(prompt)
            rows.append(row)
            advance(row, h, target.argmax(h[None])[0])
            row.seconds += time.perf_counter() - t0
        gone = [i for i, r in enumerate(rows) if r.item is not None]
        if gone:
            target.keep([i for i, r in enumerate(rows) if r.item is None])
            for i in gone:
                yield rows[i].index, rows[i].item, rows[i].seconds
            rows = [r for r in rows if r.item is None]
            continue  # refill before the next forward
        if not rows:
            return
        t0 = time.perf_counter()
        hidden = target.feed_to([r.seq for r in rows])  # [B, d]
        tokens = target.argmax(hidden)
        share = (time.perf_counter() - t0) / len(rows)
        for b, row in enumerate(rows):
            t1 = time.perf_counter()
            advance(row, hidden[b], tokens[b])
            row.seconds += share + time.perf_counter() - t1
