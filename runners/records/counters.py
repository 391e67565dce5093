"""Spec-decode counters, mirroring vLLM v1 ``SpecDecodingStats``; ratios derived only by functions.

Definitions (one place for the whole project; README's glossary quotes them):
    num_drafts: verification rounds that had at least one draft token.
    num_draft_tokens: draft tokens proposed (L per round).
    num_accepted_tokens: draft tokens accepted.
    num_accepted_tokens_per_pos[i]: rounds whose accepted prefix reached position i (prefix counts).
    mean_acceptance_length tau = 1 + num_accepted_tokens / num_drafts (bonus/correction included;
        equals tokens committed per target forward). 1.0 with no drafts.
    acceptance_rate = num_accepted_tokens / num_draft_tokens.
    per_position_rate[i] = num_accepted_tokens_per_pos[i] / num_drafts.
    num_accepted_mismatched: accepted draft tokens that differ from the target's greedy token (0 for greedy
        SD; what a lossy rule accepts beyond exact match); None when the backend does not count it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class SpecDecodeCounters:
    """Additive counters of one sample or one run (``a + b`` sums them)."""

    num_speculative_tokens: int
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    num_accepted_mismatched: int | None = None

    def __post_init__(self) -> None:
        if not self.num_accepted_tokens_per_pos:
            self.num_accepted_tokens_per_pos = [0] * self.num_speculative_tokens

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """Record one verification round of one sequence (call only when it had draft tokens)."""
        if not 0 <= num_accepted_tokens <= num_draft_tokens <= self.num_speculative_tokens:
            raise ValueError(
                f"need 0 <= accepted ({num_accepted_tokens}) <= drafted ({num_draft_tokens}) <= L "
                f"({self.num_speculative_tokens})"
            )
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for i in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[i] += 1

    def __add__(self, other: SpecDecodeCounters) -> SpecDecodeCounters:
        if other.num_speculative_tokens != self.num_speculative_tokens:
            raise ValueError("cannot add counters of different draft lengths L")
        return SpecDecodeCounters(
            num_speculative_tokens=self.num_speculative_tokens,
            num_drafts=self.num_drafts + other.num_drafts,
            num_draft_tokens=self.num_draft_tokens + other.num_draft_tokens,
            num_accepted_tokens=self.num_accepted_tokens + other.num_accepted_tokens,
            num_accepted_tokens_per_pos=[
                a + b
                for a, b in zip(self.num_accepted_tokens_per_pos, other.num_accepted_tokens_per_pos)
            ],
            num_accepted_mismatched=_add_known(
                self.num_accepted_mismatched, other.num_accepted_mismatched
            ),
        )

    def to_dict(self) -> dict:
        """The counters as a record stores them (``num_accepted_mismatched`` only when counted)."""
        d = asdict(self)
        if d["num_accepted_mismatched"] is None:
            del d["num_accepted_mismatched"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> SpecDecodeCounters:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _add_known(a: int | None, b: int | None) -> int | None:
    """Sum of two counts where None means "not counted" (None only when neither was)."""
    return None if a is None and b is None else (a or 0) + (b or 0)


def acceptance_histogram(accepted_per_round: list[int]) -> dict[int, int]:
    """``{accepted draft count: rounds}`` over rounds, zero-count entries omitted (the bonus/correction token
    not counted): the accepted-draft-length distribution vLLM's per-request metrics report."""
    out: dict[int, int] = {}
    for a in accepted_per_round:
        out[int(a)] = out.get(int(a), 0) + 1
    return dict(sorted(out.items()))


def mean_acceptance_length(c: SpecDecodeCounters) -> float:
    """tau = 1 + accepted / drafts (tokens committed per round, bonus/correction included)."""
    return 1.0 + c.num_accepted_tokens / c.num_drafts if c.num_drafts else 1.0


def acceptance_rate(c: SpecDecodeCounters) -> float:
    """accepted / drafted; NaN with no drafts."""
    return c.num_accepted_tokens / c.num_draft_tokens if c.num_draft_tokens else float("nan")


def per_position_rate(c: SpecDecodeCounters) -> list[float]:
    """accepted at position i / drafts, i = 0..L-1."""
    return [
        n / c.num_drafts if c.num_drafts else float("nan") for n in c.num_accepted_tokens_per_pos
    ]
