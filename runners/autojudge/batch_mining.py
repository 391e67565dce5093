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

Lookahead (``lookahead`` G > 0): an alternative continuation mostly repeats the response it branched from
(most mismatches are synonyms or formatting), so each row also feeds up to G tokens guessed from the prompt's
earlier continuations (:func:`guess`: after the substituted token, the reference's tokens that follow the same
position; elsewhere, the tokens that follow the nearest earlier occurrence of the row's last few tokens)
and keeps the longest guessed prefix the target's own argmax confirms, plus the target's next token: prompt
lookup decoding (Saxena 2023; transformers' ``prompt_lookup_num_tokens``) with the prompt's earlier
continuations as the lookup text. Every kept token is the target's greedy token, so the continuations, labels
and features are those of one token per forward, up to the float rounding of wider batched kernels.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
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


NGRAMS = (3, 2, 1)  # n-gram lengths tried, longest first, to realign a guess with the lookup text


def guess(seq: Sequence[int], n: int, refs: Sequence[Sequence[int]], width: int) -> list[int]:
    """Up to ``width`` tokens that a greedy continuation of ``seq`` is likely to produce next.

    Args:
        seq: the row's tokens (prompt of ``n`` tokens, then the response so far).
        n: prompt length.
        refs: earlier continuations of the same prompt (prompt included), latest last.
        width: most tokens to guess (0: none).

    Returns:
        ``ref[j : j + width]`` for the reference and position j that fit best: a reference holding ``seq`` but
        its last token (``seq`` ends with a substituted token, or follows the reference: j = len(seq)); else,
        for the longest n of :data:`NGRAMS` that has a match, the position j whose preceding n tokens equal the
        last n of ``seq``, in a reference or in ``seq`` itself (the prompt and the response so far: names and
        numbers of the question recur in the answer), nearest len(seq) (latest reference on a tie); ``[]``
        when nothing matches.
    """
    if width <= 0:
        return []
    L = len(seq)
    for ref in reversed(refs):
        if len(ref) > L and list(ref[: L - 1]) == list(seq[:-1]):
            return list(ref[L : L + width])
    texts = [np.asarray(r) for r in reversed(refs)] + [np.asarray(seq[:-1])]
    for k in NGRAMS:
        if L < k:
            continue
        tail = np.asarray(seq[-k:])
        best: tuple[int, int, np.ndarray] | None = None
        for age, text in enumerate(texts):
            # j: positions after a match of the tail (text[j - k : j] == tail), with something to guess after them
            j = np.flatnonzero(text[k - 1 : len(text) - 1] == tail[-1]) + k
            for i in range(1, k):
                j = j[text[j - 1 - i] == tail[-1 - i]]
            if len(j):
                jj = int(j[np.argmin(np.abs(j - L))])
                key = (abs(jj - L), age)
                if best is None or key < best[:2]:
                    best = (*key, text[jj : jj + width])
        if best is not None:
            return best[2].tolist()
    return []


class BatchTarget:
    """The target's rows in one :class:`BatchKV`, each knowing which token ids its cache holds.

    The batched counterpart of :class:`runners.autojudge.mining.Tracked`: :meth:`feed_to` makes every row's
    cache hold a given sequence, rolling back to the longest prefix it already holds.
    """

    def __init__(self, model: object, prefix_cache: PrefixCache | None = None) -> None:
        self.model, self.prefix_cache = model, prefix_cache
        self.kv = BatchKV(model)
        self.ids: list[list[int]] = []
        self.fed = 0  # tokens the latest feed_to fed (padding excluded)

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

    def feed_to(
        self, seqs: Sequence[Sequence[int]], last: Sequence[int] | None = None
    ) -> torch.Tensor:
        """Make row b's cache hold ``seqs[b]`` (one forward for all rows); hidden states at the last tokens.

        Row b keeps the longest prefix of ``seqs[b]`` it holds, but at most ``len(seqs[b]) - last[b]`` tokens, so
        its last ``last[b]`` tokens (default 1) are fed; rows feeding fewer tokens are left-padded.

        Returns:
            ``[B, max(last), d]``: row b's last ``last[b]`` positions are its last ``last[b]`` entries.
        """
        if len(seqs) != self.kv.rows:
            raise ValueError(f"feed_to: {len(seqs)} sequences for {self.kv.rows} rows")
        last = [1] * len(seqs) if last is None else list(last)
        keep = [min(_shared(ids, s), len(s) - t) for ids, s, t in zip(self.ids, seqs, last)]
        self._roll_back(keep)
        lack = [list(s[k:]) for s, k in zip(seqs, keep)]
        width = max(len(x) for x in lack)
        dev = self.kv.device
        tokens = torch.tensor(
            [[0] * (width - len(x)) + x for x in lack], dtype=torch.long, device=dev
        )
        ok = torch.tensor([[False] * (width - len(x)) + [True] * len(x) for x in lack], device=dev)
        hidden = self.kv.forward(tokens, None if bool(ok.all()) else ok)  # [B, width, d]
        self.fed = sum(len(x) for x in lack)
        self.ids = [list(s) for s in seqs]
        if (
            self.kv.holes() > 0.25
        ):  # rollbacks and padding leave invalid slots; squeeze them out now and then
            self.kv.compact()
        return hidden[:, -max(last) :]

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
    refs: list[list[int]] = field(default_factory=list)  # the prompt's finished continuations
    guessed: list[int] = field(default_factory=list)  # tokens guessed in the current forward


class _Driver:
    """The rows of :func:`mine_batched` and what they decode (its arguments; ``stats`` filled as documented there)."""

    def __init__(
        self,
        target: BatchTarget,
        max_new_tokens: int,
        finished: Callable[[list[int]], bool],
        lookahead: int,
        stats: dict,
    ) -> None:
        self.target, self.cap, self.finished = target, max_new_tokens, finished
        self.lookahead, self.stats = lookahead, stats
        self.rows: list[_Row] = []

    def decoding(self, row: _Row) -> bool:
        return len(row.seq) - row.n < self.cap and not self.finished(row.seq[row.n :])

    def advance(self, row: _Row, hidden: torch.Tensor, tokens: Sequence[int]) -> None:
        """Row's target hidden ``[d]`` at the end of ``row.seq`` and its greedy tokens from there on: extend or end
        the continuation (then the search gets it and asks for the next one, or ends)."""
        if row.first is None:
            row.first = hidden
        for token in tokens:
            if not self.decoding(row):
                break
            row.seq.append(token)
            self.stats["kept"] += 1
        if self.decoding(row):
            return
        row.refs.append(list(row.seq))
        try:
            row.seq, row.first = list(row.steps.send((row.seq, row.first))), None
        except StopIteration as done:
            row.item = done.value

    def join(self, index: int, steps: Search) -> None:
        """A new search takes a row: its prompt is prefilled alone and its first greedy token taken."""
        t0 = time.perf_counter()
        prompt = next(steps)
        row = _Row(index=index, steps=steps, n=len(prompt), seq=list(prompt))
        h = self.target.add(prompt)
        self.rows.append(row)
        self.advance(row, h, self.target.argmax(h[None]))
        row.seconds += time.perf_counter() - t0

    def step(self) -> None:
        """One target forward for all rows, each with its guess; every row keeps the greedy tokens it confirms."""
        t0 = time.perf_counter()
        for row in self.rows:
            room = self.cap - (len(row.seq) - row.n) - 1  # a guess past the cap is never kept
            row.guessed = guess(row.seq, row.n, row.refs, min(self.lookahead, room))
        last = [len(r.guessed) + 1 for r in self.rows]
        hidden = self.target.feed_to([r.seq + r.guessed for r in self.rows], last)  # [B, G + 1, d]
        preds = _greedy(self.target, hidden, last)
        share = (time.perf_counter() - t0) / len(self.rows)
        self.stats["forwards"] += 1
        self.stats["fed"] += self.target.fed
        for b, row in enumerate(self.rows):
            t1 = time.perf_counter()
            g = len(row.guessed)
            a = next((i for i in range(g) if row.guessed[i] != preds[b][i]), g)
            self.stats["guessed"] += g
            self.stats["accepted"] += a
            self.advance(row, hidden[b, -(g + 1)], row.guessed[:a] + [preds[b][a]])
            row.seconds += share + time.perf_counter() - t1


def mine_batched(
    target_model: object,
    searches: Iterable[Search],
    *,
    batch_size: int,
    max_new_tokens: int,
    finished: Callable[[list[int]], bool],
    prefix_cache: PrefixCache | None = None,
    lookahead: int = 0,
    stats: dict | None = None,
) -> Iterator[tuple[int, MinedItem, float]]:
    """Run ``searches`` (:func:`runners.autojudge.mining.search` generators), ``batch_size`` at a time.

    Each continuation is decoded as :func:`runners.autojudge.mining.greedy_continue` decodes it (greedy, until
    ``finished(response)`` or ``max_new_tokens`` response tokens), with the target's rows fed together, each
    with up to ``lookahead`` guessed tokens (module docstring; 0: one token per row and forward).

    Args:
        stats: if given, filled with ``forwards`` (batched forwards), ``fed`` (tokens they fed: guesses and
            re-fed tokens after a rollback included, padding not), ``guessed``, ``accepted`` (guessed tokens the
            target's argmax confirmed, also those past a stop) and ``kept`` (greedy tokens appended to
            continuations, each prompt's first one from its prefill included).

    Yields:
        ``(index, item, seconds)`` as each search ends (not in input order): its index in ``searches``, its
        :class:`MinedItem`, and its share of the wall time in seconds (each batched forward's time split evenly
        among its rows, plus the time of the row's own prefill and search steps), so the shares sum to the
        wall time.

    Raises:
        ValueError: ``batch_size`` < 1 or ``lookahead`` < 0.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} is invalid; allowed: an integer >= 1")
    if lookahead < 0:
        raise ValueError(f"lookahead={lookahead} is invalid; allowed: an integer >= 0")
    stats = {} if stats is None else stats
    for key in ("forwards", "fed", "guessed", "accepted", "kept"):
        stats.setdefault(key, 0)
    run = _Driver(
        BatchTarget(target_model, prefix_cache), max_new_tokens, finished, lookahead, stats
    )
    queue = enumerate(searches)
    while True:
        while len(run.rows) < batch_size and (nxt := next(queue, None)) is not None:
            run.join(*nxt)
        gone = [i for i, r in enumerate(run.rows) if r.item is not None]
        if gone:
            run.target.keep([i for i, r in enumerate(run.rows) if r.item is None])
            for i in gone:
                yield run.rows[i].index, run.rows[i].item, run.rows[i].seconds
            run.rows = [r for r in run.rows if r.item is None]
            continue  # refill before the next forward
        if not run.rows:
            return
        run.step()


def _greedy(target: BatchTarget, hidden: torch.Tensor, last: Sequence[int]) -> list[list[int]]:
    """Row b's greedy tokens after each of its last ``last[b]`` positions of ``hidden`` ``[B, G + 1, d]``."""
    width = hidden.shape[1]
    picked = torch.cat([hidden[b, width - t :] for b, t in enumerate(last)])  # [sum(last), d]
    flat = target.argmax(picked)
    out, i = [], 0
    for t in last:
        out.append(flat[i : i + t])
        i += t
    return out
