"""The backend seam: generate outputs for prompts with a draft-verify loop and report per-sample stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Protocol, runtime_checkable

from runners.counters import SpecDecodeCounters
from runners.datasets.base import Sample


@dataclass
class DecodingConfig:
    """Decoding settings of one run.

    Attributes:
        num_speculative_tokens: L, draft tokens per round (0 = autoregressive baseline, no draft model).
        temperature: 0 = greedy.
        top_p: nucleus mass (1.0 = off).
        max_new_tokens: generation limit, tokens.
        stop: stop strings; output is cut before the first one.
        seed: seeds the per-sample ``torch.Generator`` (seed + sample index) used for dropout masks and sampling.
        trace: record per-position criterion traces (Tables 2-3).
        ar_model: for L = 0 only: which model decodes, ``"target"`` (AR baseline) or ``"draft"`` (Table 1's
            draft-alone row).
        ar_dropout_p: for L = 0 only: if set, every step decodes from ONE MC-dropout path of the target's
            LM head with a freshly sampled mask at this p_drop (Table 1 / Fig. 3 single-path decoding).
        ar_path: index i of that path; it seeds the path's masks (same i -> same path).
    """

    num_speculative_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int = 0
    trace: bool = False
    ar_model: str = "target"
    ar_dropout_p: float | None = None
    ar_path: int = 0


@dataclass
class SampleResult:
    """What a backend returns for one sample (one line of ``samples.jsonl`` together with the score).

    Attributes:
        sample_id: ``Sample.sample_id``.
        output_text: decoded output, cut at the first stop string.
        output_token_ids: generated token ids (int), after the stop cut.
        counters: spec-decode counters of this sample (``num_drafts`` = rounds).
        num_output_tokens: ``len(output_token_ids)``, tokens.
        wall_s: generation wall time without prefill, seconds.
        prefill_s: prompt prefill time (both models), seconds.
        draft_s / verify_s / criterion_s: split of ``wall_s``, seconds.
        accepted_per_round: accepted draft count of each round, in order.
        trace: optional list of per-round criterion traces (JSON-serialisable).
    """

    sample_id: str
    output_text: str
    output_token_ids: list[int]
    counters: SpecDecodeCounters
    num_output_tokens: int
    wall_s: float
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    criterion_s: float = 0.0
    accepted_per_round: list[int] = field(default_factory=list)
    trace: list[dict[str, Any]] | None = None


@runtime_checkable
class Backend(Protocol):
    """A generation engine. Built from ``conf/backend/<name>.yaml`` plus the loaded pair.

    ``generate`` yields one :class:`SampleResult` per sample as soon as it is finished, so the caller
    can append it to the run record before the next one starts.
    """

    name: str

    def generate(self, samples: Iterable[Sample], decoding: DecodingConfig, criterion: Any) -> Iterator[SampleResult]:
        ...
