"""The backend seam: generate outputs for prompts with a draft-verify loop and report per-sample stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Protocol, runtime_checkable

from runners.records.counters import SpecDecodeCounters
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
        seed: the run's seed; each sample's ``torch.Generator`` (dropout masks and sampling) is seeded with
            ``runners.backends.seeding.sample_seed(seed, sample_id, seed_stream)``, independent of sample order.
        trace: record per-position criterion traces (Tables 2-3).
        ar_model: for L = 0 only: which model decodes, ``"target"`` (AR baseline) or ``"draft"`` (Table 1's
            draft-alone row).
        seed_stream: sub-stream of the per-sample seed; ``dropmatch.path`` for single-path decodes
            (``method=dropout_path``: same path index -> same masks), else 0.
    """

    num_speculative_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int = 0
    trace: bool = False
    ar_model: str = "target"
    seed_stream: int = 0

    def check_context(
        self, prompts: Mapping[str, int], limit: int, what: str, settable: bool = False
    ) -> None:
        """Refuse prompts that, with ``max_new_tokens`` output tokens and a last round's L + 1, exceed an engine's
        context.

        Args:
            prompts: ``{sample_id: prompt tokens}``.
            limit: the context, tokens.
            what: the limit's name in the message (``"the target's max_position_embeddings"``, ``"backend.n_ctx"``).
            settable: ``what`` is a config field the user may raise (the message then offers it).

        Raises:
            ValueError: naming ``decoding.max_new_tokens`` and the largest value with which every prompt fits (or,
                where the longest prompt alone leaves no room, that prompt), and how many prompts do not fit.
        """
        if not prompts:
            return
        L, m = int(self.num_speculative_tokens), int(self.max_new_tokens)
        longest, n = max(prompts.items(), key=lambda kv: kv[1])
        need = n + m + L + 1
        if need <= limit:
            return
        over = sum(p + m + L + 1 > limit for p in prompts.values())
        room = limit - n - L - 1
        wider = f", or {what} >= {need}" if settable else ""
        told = (
            f"{over} of {len(prompts)} prompts do not fit {what}={limit}: the longest, {longest} ({n} tokens), + "
            f"decoding.max_new_tokens {m} + L + 1 ({L + 1}) = {need} tokens"
        )
        if room < 1:
            raise ValueError(
                f"{told}; that prompt alone leaves no room for an output: leave it out (dataset.limit, "
                f"dataset.offset){wider}"
            )
        raise ValueError(f"{told}; allowed: decoding.max_new_tokens <= {room}{wider}")


def check_prompts_fit(backend: Any, samples: Iterable[Sample], decoding: DecodingConfig) -> None:
    """Every prompt of ``samples``, as ``backend.encode`` builds it, checked against each of the backend's context
    limits (``backend.context_limits(decoding)``: ``{name: (tokens, settable)}``) before anything decodes
    (:meth:`DecodingConfig.check_context`); a backend without either method is not checked.

    Raises:
        ValueError: as :meth:`DecodingConfig.check_context`.
    """
    limits = getattr(backend, "context_limits", None)
    if limits is None or not hasattr(backend, "encode"):
        return
    found = limits(decoding)
    if not found:
        return
    prompts = {s.sample_id: len(backend.encode(s)) for s in samples}
    for what, (limit, settable) in found.items():
        decoding.check_context(prompts, limit, what, settable)


@dataclass
class SampleResult:
    """What a backend returns for one sample (one line of ``samples.jsonl`` together with the score).

    Attributes:
        sample_id: ``Sample.sample_id``.
        output_text: decoded output, cut at the first stop string.
        output_token_ids: generated token ids (int), after the cut at EOS (removed), stop string (kept up to
            the token that completes it) and ``max_new_tokens`` (``runners.backends.output.finalize``).
        counters: spec-decode counters of this sample (``num_drafts`` = rounds), counting only tokens that are
            in the output: ``num_drafts + num_accepted_tokens == len(output_token_ids) - 1 + eos_removed``.
        num_output_tokens: ``len(output_token_ids)``, tokens.
        wall_s: generation wall time without prefill, seconds: from the sample's first round to its finish (with
            ``backend.batch_size`` > 1 the rounds are shared with other samples; see ``share_s``), without the
            exactness audit's time (``audit_s``: a measurement of the decision, not decoding).
        prefill_s: prompt prefill time (both models), seconds.
        draft_s / verify_s / criterion_s: split of ``wall_s``, seconds. audit_s: the exact rule's second decision
            of audited rounds (:mod:`criteria.audit`), seconds, outside ``wall_s``, ``share_s`` and ``criterion_s``.
        plain_s / rule_s: the parts of ``criterion_s`` to the plain logits (the LM head) and after them (the dropout
            heads and the rule), seconds (:mod:`runners.backends.round_meter`); None when not measured (no rounds,
            the exact rule with ``p_drop > 0``, vLLM).
        escape: positions that reached each rung of the escape ladder (``{"64": n, "512+512": n, "exact": n}``, rungs
            not reached left out), or None (no escape).
        accepted_per_round: accepted draft count of each round, in order, after the same cut.
        stop_reason: ``"eos"``, ``"stop"`` or ``"length"``.
        eos_removed: 1 when an EOS token ended the output (not kept in ``output_token_ids``), else 0.
        trace: optional list of per-round criterion traces (JSON-serialisable).
        audit: the exactness audit of the sparse variant over the kept rounds
            (:meth:`criteria.audit.AuditTally.record`: counts and round indices), or None (no audit).
        share_s: the sample's share of the batch's wall time, seconds (each interval split equally among the
            samples decoding then; ``runners.backends.batch_rows``); summed over a run's samples it is the run's
            decoding wall time, so ``sum(num_output_tokens) / sum(share_s)`` is the aggregate tokens/s. Equals
            ``wall_s`` at batch size 1; None when the backend does not measure it.
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
    audit_s: float = 0.0
    accepted_per_round: list[int] = field(default_factory=list)
    stop_reason: str = "length"
    eos_removed: int = 0
    trace: list[dict[str, Any]] | None = None
    share_s: float | None = None
    audit: dict[str, Any] | None = None
    plain_s: float | None = None
    rule_s: float | None = None
    escape: dict[str, int] | None = None


@runtime_checkable
class Backend(Protocol):
    """A generation engine. Built from ``conf/backend/<name>.yaml`` plus the loaded pair.

    ``generate`` yields one :class:`SampleResult` per sample as soon as it is finished, so the caller
    can append it to the run record before the next one starts.
    """

    name: str

    def generate(
        self, samples: Iterable[Sample], decoding: DecodingConfig, rule: Any, heads: Any
    ) -> Iterator[SampleResult]:
        """Decode ``samples``; ``rule`` is a built criterion, ``heads`` the run's ``criteria.dropout_heads.HeadSpec``."""
        ...
