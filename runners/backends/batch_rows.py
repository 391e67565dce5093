"""Per-sequence state of the batched draft-verify loop: committed ids, random stream, counters, timing, end check.

One :class:`Row` per sample in the batch. The loop (``runners.backends.hf_loop``) runs rounds for all rows at
once; each row keeps its own accepted counts, its own ``torch.Generator`` (on the model's device) and its own
clock.

Timing of a row (seconds):
  - ``prefill_s``: its own prompt prefill (both models) and first token;
  - ``wall_s``: from the end of its prefill (its first round) to its finish: the wall time the sample spent in
    the batch, including rounds and other samples' prefills while it waited, excluding the time the caller
    spends between results (at ``B = 1``: generation time without prefill, as before);
  - ``share_s``: its share of the batch's wall time: every interval while it was in the batch divided equally
    among the rows in the batch then. Summed over the samples of a run, this is the batch run's decoding wall
    time, so ``sum(tokens) / sum(share_s)`` is the aggregate throughput (Table 5); at ``B = 1``,
    ``share_s == wall_s``;
  - ``draft_s`` / ``verify_s`` / ``criterion_s`` / ``audit_s``: the batch's draft / verify / decision / exactness-audit
    time over its rounds. The loops leave the audit's time out of ``wall_s`` and ``share_s`` (:meth:`BatchClock.skip`):
    it measures the decision, it is not decoding.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch

from runners.backends.output import _first_stop


class StopCheck:
    """Incremental end check of one output: cap, EOS, or a stop string completed by the newest tokens.

    Equivalent to :func:`runners.backends.output.is_finished` called after every round, without decoding the
    whole output each time: a stop string that was not in the text before must end in the new tokens, and its
    ``m`` characters span at most ``4 m`` tokens (UTF-8 bytes), so only a window of the last
    ``new + 4 m + 2`` tokens is decoded. A hit is confirmed on the full text (once per output).
    """

    def __init__(
        self, tokenizer: Any, eos_ids: Iterable[int], stops: Sequence[str], cap: int
    ) -> None:
        self.tokenizer, self.eos, self.cap = tokenizer, set(eos_ids), int(cap)
        self.stops = [s for s in stops if s]
        self.margin = 4 * max((len(s) for s in self.stops), default=0) + 2

    def finished(self, out: Sequence[int], new: int) -> bool:
        """Whether the output ``out`` (its last ``new`` tokens just committed) is complete."""
        if len(out) >= self.cap or any(t in self.eos for t in out[len(out) - new :]):
            return True
        if not self.stops:
            return False
        window = out[max(0, len(out) - new - self.margin) :]
        if (
            _first_stop(self.tokenizer.decode(list(window), skip_special_tokens=True), self.stops)
            < 0
        ):
            return False
        return (
            _first_stop(self.tokenizer.decode(list(out), skip_special_tokens=True), self.stops) >= 0
        )


@dataclass
class Row:
    """One sequence in the batch.

    Attributes:
        sample: the dataset sample.
        ids: prompt + committed output token ids (the last one, ``pending``, is not yet in the target cache).
        prompt_len: prompt tokens.
        gen: the sample's generator (``sample_seed``), on the model's device.
        stop: its :class:`StopCheck`.
        prefill_s: seconds of its prefill.
        t_join: ``time.perf_counter()`` when its first round could start.
        accepted: accepted drafts per round, as the rule decided (cut later).
        mismatched: per round, a 0/1 flag per accepted draft: it differs from the target's greedy token.
        traces: per-round criterion traces (``decoding.trace``) or None.
        audit: its audited rounds (:class:`criteria.audit.AuditTally`) when the run audits the sparse
            variant (``HeadSpec.audit_share`` > 0), else None.
        timing: ``draft`` / ``verify`` / ``criterion`` / ``audit`` seconds of the rounds it took part in, and
            ``plain`` / ``rule`` (the parts of ``criterion`` to the plain logits and after them) when the rounds
            measured them (:mod:`runners.backends.round_meter`).
        escape: its positions that reached each rung of the escape ladder (``"64"``, ``"512+512"``, ``"exact"``: :func:`criteria.sparse_heads.rung_name`).
        share_s: its share of the batch's wall time (module docstring).
    """

    sample: Any
    ids: list[int]
    prompt_len: int
    gen: torch.Generator
    stop: StopCheck
    prefill_s: float
    t_join: float = field(default_factory=time.perf_counter)
    accepted: list[int] = field(default_factory=list)
    mismatched: list[list[int]] = field(default_factory=list)
    traces: list[dict] | None = None
    audit: Any = None
    timing: dict[str, float] = field(
        default_factory=lambda: {"draft": 0.0, "verify": 0.0, "criterion": 0.0, "audit": 0.0}
    )
    share_s: float = 0.0
    escape: dict[str, int] = field(default_factory=dict)
    done: bool = False

    @property
    def out(self) -> list[int]:
        """Committed output ids (the prefill's token first)."""
        return self.ids[self.prompt_len :]

    def commit(self, tokens: Sequence[int]) -> None:
        """Append a round's tokens and update :attr:`done`."""
        self.ids.extend(tokens)
        self.done = self.stop.finished(self.ids[self.prompt_len :], len(tokens))


class BatchClock:
    """Splits the batch's wall time among the rows present (``Row.share_s``) and adds round timings."""

    def __init__(self) -> None:
        self.t = time.perf_counter()

    def tick(self, rows: Sequence[Row], parts: dict[str, float] | None = None) -> None:
        """Charge the time since the last tick to ``rows`` (equal shares) and add ``parts`` to each."""
        now = time.perf_counter()
        if rows:
            share = (now - self.t) / len(rows)
            for r in rows:
                r.share_s += share
                for k, v in (parts or {}).items():
                    r.timing[k] += v
        self.t = now

    def skip(self, rows: Sequence[Row], seconds: float) -> None:
        """Leave ``seconds`` out of every clock (time spent outside the loop, e.g. the caller handling a result)."""
        self.t += seconds
        for r in rows:
            r.t_join += seconds
