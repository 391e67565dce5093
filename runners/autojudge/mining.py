"""Auto-Judge mining: find draft/target mismatches in the target's greedy answer and label each one.

Paper: Garipov et al. 2025 (arXiv 2504.20039), Algorithm 1 "Search for important tokens"; the authors'
``src/find_important_tokens.py`` (GSM8K) and ``find_important_tokens_lcb.py`` (LiveCodeBench).

For one prompt x:
  1. the target decodes greedily: response y (the "current response");
  2. the draft reads x + y once (teacher forcing); a mismatch is a position i >= ``left`` where the draft's
     argmax differs from y_i; take the first one, m;
  3. substitute the draft token at m and let the target continue greedily from ``x + y[:m] + [draft]``;
  4. label the mismatch *important* if the outcome changes (``label="answer"``: the extracted final answer
     differs from the target's, the authors' GSM8K rule; ``label="correctness"``: the scorer's pass/fail
     differs, the authors' LiveCodeBench rule). If unimportant, the alternative becomes the current response;
  5. ``left = m + 1``; repeat until no mismatch is left.
Features (the authors' ``calc_hiddens.py``, "DD-DT"): the draft's and the target's final hidden state at
position m of the sequence holding the draft token, i.e. after each model has read it. They are taken from
the same forwards the search makes (the target's first step of the alternative continuation; the draft's
read of ``y[:m] + [draft]``), through :class:`runners.backends.kv_state.KVState` as the decoding backend.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from runners.backends.kv_state import KVState


class Tracked:
    """A :class:`KVState` that knows which token ids it holds, so any sequence can be fed incrementally.

    ``preds[i]`` is the model's argmax after position i (the token it predicts for position i + 1).
    """

    def __init__(self, state: KVState) -> None:
        self.state, self.ids, self.preds = state, [], []

    def prefill(self, prompt: Sequence[int]) -> torch.Tensor:
        """Fill with the prompt (reusing the backend's prefix cache); the last hidden ``[d]``."""
        h = self.state.prefill(list(prompt))
        self.ids = list(prompt)
        self.preds = [-1] * (len(prompt) - 1) + [int(self.state.logits(h[None])[0].argmax())]
        return h

    def feed_to(self, seq: Sequence[int]) -> torch.Tensor:
        """Make the cache hold ``seq``; return the hidden states ``[n, d]`` of the positions fed (n >= 1)."""
        n = 0
        for a, b in zip(self.ids, seq):
            if a != b:
                break
            n += 1
        keep = min(n, len(seq) - 1)
        self.state.rollback(keep)
        h = self.state.forward(list(seq[keep:]))  # [len(seq) - keep, d]
        self.ids = list(seq)
        self.preds = self.preds[:keep] + self.state.logits(h).argmax(-1).tolist()
        return h


@dataclass
class Mismatch:
    """One mined mismatch. ``pos`` counts response tokens (0 = first generated token)."""

    pos: int
    important: bool
    target_token: int
    draft_token: int
    alt_outcome: Any
    dd: torch.Tensor  # [d_draft] float32, draft hidden at the draft token
    dt: torch.Tensor  # [d] float32, target hidden at the draft token


@dataclass
class MinedItem:
    """The search result of one prompt."""

    response: list[int]
    outcome: Any
    mismatches: list[Mismatch] = field(default_factory=list)
    truncated: bool = False  # stopped at max_mismatches
    skipped: bool = False  # the target's own outcome was unusable (no answer): no mismatch searched


def greedy_continue(
    target: Tracked,
    seq: list[int],
    n_prompt: int,
    max_new_tokens: int,
    finished: Callable[[list[int]], bool],
    first_hidden: torch.Tensor | None = None,
) -> list[int]:
    """Greedy target decoding after ``seq`` until ``finished(response)`` or ``max_new_tokens`` response tokens.

    ``first_hidden`` ``[d]``: the hidden at ``seq[-1]`` when the caller has just fed it.
    """
    out = list(seq)
    h = first_hidden if first_hidden is not None else target.feed_to(out)[-1]
    while len(out) - n_prompt < max_new_tokens and not finished(out[n_prompt:]):
        out.append(int(target.state.logits(h[None])[0].argmax()))
        if len(out) - n_prompt >= max_new_tokens or finished(out[n_prompt:]):
            break
        h = target.feed_to(out)[-1]
    return out


# What the search asks of the target: the greedy continuation of a prefix, answered with that continuation
# (prefix included) and the target's hidden ``[d]`` at the prefix's last token.
Search = Generator[list[int], tuple[list[int], torch.Tensor], MinedItem]


def search(
    draft: Tracked,
    prompt: list[int],
    *,
    outcome: Callable[[list[int]], Any],
    max_mismatches: int | None = None,
    on_mismatch: Callable[[Mismatch], None] | None = None,
    skip: Callable[[Any], bool] | None = None,
) -> Search:
    """Algorithm 1 on one prompt (module docstring), the target's greedy decoding left to the caller.

    Each value yielded is a prefix (prompt ids + response ids so far: first the prompt itself, then one
    ``response[:m] + [draft token]`` per mismatch); the caller sends back ``(continuation, hidden)``: the
    target's greedy continuation of that prefix (:func:`greedy_continue`), prefix included, and the target's
    final hidden state ``[d]`` at the prefix's last token. So one driver may decode one prompt
    (:func:`mine_prompt`) and another several prompts' continuations together
    (:mod:`runners.autojudge.batch_mining`) while the labels stay those of one sequential search.

    Args: as :func:`mine_prompt` (``draft``: a fresh :class:`Tracked` of the draft model, read here).

    Returns (as ``StopIteration.value``):
        :class:`MinedItem`; ``mismatches`` in order of position.
    """
    n = len(prompt)
    response, _ = yield list(prompt)
    ref = outcome(response[n:])
    item = MinedItem(response=response[n:], outcome=ref)
    if skip is not None and skip(ref):
        item.skipped = True
        return item
    draft.prefill(prompt)
    left = n
    while True:
        draft.feed_to(response)
        m = next((i for i in range(left, len(response)) if draft.preds[i - 1] != response[i]), None)
        if m is None:
            break
        if max_mismatches is not None and len(item.mismatches) >= max_mismatches:
            item.truncated = True
            break
        d_tok = draft.preds[m - 1]
        alt_prefix = response[:m] + [d_tok]
        dd = draft.feed_to(alt_prefix)[-1].float().clone()
        alt, ht = yield alt_prefix
        alt_out = outcome(alt[n:])
        important = alt_out != ref
        item.mismatches.append(
            Mismatch(
                pos=m - n,
                important=bool(important),
                target_token=response[m],
                draft_token=d_tok,
                alt_outcome=alt_out,
                dd=dd,
                dt=ht.float().clone(),
            )
        )
        if on_mismatch is not None:
            on_mismatch(item.mismatches[-1])
        if not important:
            response = alt
        left = m + 1
    item.response = response[n:]
    return item


def mine_prompt(
    target: Tracked,
    draft: Tracked,
    prompt: list[int],
    *,
    max_new_tokens: int,
    finished: Callable[[list[int]], bool],
    outcome: Callable[[list[int]], Any],
    max_mismatches: int | None = None,
    on_mismatch: Callable[[Mismatch], None] | None = None,
    skip: Callable[[Any], bool] | None = None,
) -> MinedItem:
    """Run the search (module docstring) on one prompt, one target token per forward.

    Args:
        target / draft: fresh :class:`Tracked` states of the two models.
        prompt: prompt token ids.
        max_new_tokens: response cap, tokens (as the decoding runs).
        finished: ``finished(response_ids)``: EOS or a stop string reached (the backend's stopping).
        outcome: ``outcome(response_ids)``: what must not change (extracted answer, or pass/fail).
        max_mismatches: stop after this many (None: all).
        on_mismatch: called with each labelled mismatch (progress).
        skip: ``skip(outcome)`` True: the target's answer is unusable (e.g. no final answer within the cap); the
            prompt is returned without a search (the authors drop such prompts: ``--remove_target_nones``).

    Returns:
        :class:`MinedItem`; ``mismatches`` in order of position.
    """
    n = len(prompt)
    steps = search(
        draft,
        prompt,
        outcome=outcome,
        max_mismatches=max_mismatches,
        on_mismatch=on_mismatch,
        skip=skip,
    )
    prefix = next(steps)
    h = target.prefill(prefix)
    while True:
        cont = greedy_continue(target, prefix, n, max_new_tokens, finished, first_hidden=h)
        try:
            prefix = steps.send((cont, h))
        except StopIteration as done:
            return done.value
        h = target.feed_to(prefix)[-1]
