"""One decode run = one resolved config: resolve, open or skip, build, decode, record, summarise.

``run(cfg) -> summary dict`` is the whole job; ``runners.main`` is only the Hydra wrapper around it.
A finished run (summary present for the same sample count) is returned without loading anything; an
unfinished one resumes at the first sample id that has no record. A record made by other decision code is
not reused silently (:mod:`runners.records.reuse`, config ``reuse: warn | strict``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import runners.backends  # noqa: F401  (fills BACKENDS)
import runners.datasets  # noqa: F401  (fills DATASETS)
import runners.scorers  # noqa: F401  (fills SCORERS)
from criteria.audit import pool as audit_pool
from runners.backends.base import check_prompts_fit
from runners.backends.warmup import warm_up, warmup_rows
from runners.config.decode_spec import build_rule, decoding_config, head_spec, needs_draft
from runners.config.errors import ConfigError
from runners.config.isa import check_torch
from runners.config.resolve import resolve_run_config
from runners.datasets.base import Sample, prompt_record, prompt_token_ids
from runners.exports import target_tokenizer, write_exports
from runners.loggers import make_logger
from runners.models.identity import check_available
from runners.models.loader import check_pair_tokenizers, load_pair
from runners.paths import results_dir
from runners.records.fingerprint import run_decision_code
from runners.records.provenance import provenance
from runners.records.record import RunRecord
from runners.records.reuse import check as check_reuse
from runners.records.reuse import recorded_codes, will_reuse
from runners.records.sample import sample_record
from runners.records.summary import summarize
from runners.registry import BACKENDS, DATASETS, SCORERS, build
from runners.sweep.progress import RunProgress

_logger = logging.getLogger(__name__)  # (the local `logger` in run() is the experiment logger)


def run(cfg: Any, log: Callable[[str], None] = _logger.info) -> dict:
    """Execute one run (resumable) and return its summary.

    A run another live process is writing (its record is locked) is left to that process; the result
    is then ``{"run_id", "complete": False, "running_elsewhere": True}``.

    Raises:
        runners.config.validate.ConfigError: invalid field (before anything loads), or a draft whose tokenizer
            is not the target's (before the record is created, no weights loaded), or a prompt that does not fit
            a model's context with ``decoding.max_new_tokens`` (after the pair loads, before anything decodes).
        runners.models.sources.ModelUnavailableError: a model has no usable source (before any record).
    """
    c = resolve_run_config(cfg)
    check_torch()  # a DROPMATCH_ISA_CAP run whose torch dispatches above the cap would time the wrong kernels
    check_available(c["model_identity"], ["target", "draft"] if needs_draft(c) else ["target"])
    dataset = build(DATASETS, c["dataset"])
    samples = dataset.load()
    scorer = build(SCORERS, {"name": dataset.scorer})
    record = RunRecord(results_dir() / "runs", c)
    if not will_reuse(record, str(c.get("reuse") or "warn")):
        # a pair that cannot share a vocabulary is refused before its run record is created
        check_pair_tokenizers(c["pair"], need_draft=needs_draft(c), log=log)
    tag = run_tag(c, cfg.get("L"), len(samples))
    with record:
        skip = record.open_or_skip(
            lambda: {
                **provenance(),
                "run_id": record.run_id,
                "model_identity": c["model_identity"],
                "decision_code": run_decision_code(c),
            },
            num_expected=len(samples),
            tag=tag,
            log=log,
            reuse=lambda done: check_reuse(record, str(c.get("reuse") or "warn"), done, tag),
        )
        if skip is not None:
            return skip
        logger = make_logger(c.get("logger") or {}, record.run_id, c)
        todo = [s for s in samples if s.sample_id not in record.done_ids()]
        log(f"[run {record.run_id}] {tag}: {len(samples) - len(todo)} done, {len(todo)} to go")
        # nothing left to decode (a run killed while writing its exports): the exports still render the prompts
        tokenizer = (
            decode(c, dataset, scorer, todo, record, logger, tag, log)
            if todo
            else target_tokenizer(c)
        )
        summary = run_summary(c, record, samples, scorer)
        # the summary marks the record finished, so it comes last: a run killed while its exports are written
        # has none and resumes (nothing left to decode) to write them
        _write_exports(record.dir, samples, tokenizer, summary, log)
        record.write_summary(summary)
    logger.log_summary(summary)
    logger.finish()
    log(
        f"[run {record.run_id}] done: tau={summary['spec/mean_acceptance_length']:.3f} "
        f"tok/s={summary['speed/tok_per_s']:.3f} (mean per item, prefill excluded) "
        f"accuracy={_rounded(summary.get('quality/accuracy'))}"
    )
    return summary


def decode(
    c: Mapping[str, Any],
    dataset: Any,
    scorer: Any,
    todo: Sequence[Sample],
    record: RunRecord,
    logger: Any,
    tag: str,
    log: Callable[[str], None],
) -> Any:
    """Load the pair, build rule, heads and backend, then generate, score and append every sample of ``todo``
    as it finishes. Returns the target tokenizer (the exports use it)."""
    pair = load_pair(
        c["pair"],
        need_draft=needs_draft(c),
        load_weights=bool(c["backend"].get("loads_hf_weights", True)),
        log=log,
    )
    rule, heads = build_rule(c), head_spec(c)
    backend = build(BACKENDS, c["backend"], pair=pair)
    decoding = decoding_config(c, dataset)
    ctk = dict(c["pair"].get("chat_template_kwargs") or {})
    _check_prompt_ids(backend, pair.tokenizer, todo[0], ctk, c["backend"]["name"])
    try:  # before the warm-up decodes: a setting, reported as the config checks report theirs
        check_prompts_fit(backend, todo, decoding)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    rows = warmup_rows(str(c["backend"]["name"]), int(c["backend"].get("batch_size") or 1))
    if rows:
        tokens, seconds = warm_up(backend, todo, decoding, rule, heads, rows)
        log(
            f"[run {record.run_id}] warm-up (untimed, not recorded): {tokens} tokens in {seconds:.1f} s, "
            f"{rows} row{'s' if rows > 1 else ''}"
        )
    repeats = int(c.get("repeats") or 1)
    by_id = {s.sample_id: s for s in todo}
    progress = RunProgress(len(todo), tag, str(c.get("progress") or "auto"), log)
    for res in backend.generate(todo, decoding, rule, heads):
        sample = by_id[res.sample_id]
        rec = sample_record(
            res,
            prompt=prompt_record(pair.tokenizer, sample.messages, ctk),
            reference=sample.reference,
            quality=scorer.score([sample], [res.output_text])[0],
            seed=int(c["decoding"]["seed"]),
        )
        if repeats > 1:  # re-time the same sample (Spec-Bench style throughput repeats)
            rec["speed"]["wall_s_repeats"] = [res.wall_s] + [
                _repeat(backend, sample, decoding, rule, heads, res) for _ in range(repeats - 1)
            ]
        record.append(rec)
        logger.log_sample(rec)
        progress.update(res.num_output_tokens, res.counters, f"[run {record.run_id}]")
    progress.close()
    return pair.tokenizer


def run_summary(
    c: Mapping[str, Any], record: RunRecord, samples: Sequence[Sample], scorer: Any
) -> dict:
    """The summary of the run's selected samples (:func:`runners.records.summary.summarize`) with its identity,
    provenance, the decision code of this session and of every session that wrote the record, and the pooled
    audit of a sparse run (:func:`criteria.audit.pool`)."""
    wanted = {s.sample_id for s in samples}
    done = [s for s in record.samples() if s["sample_id"] in wanted]
    summary = summarize(done, int(c["L"]), scorer.aggregate)
    summary.update(
        {
            "run_id": record.run_id,
            "complete": len(done) == len(samples),
            "num_expected": len(samples),
            **provenance(),
            "decision_code": run_decision_code(c)["fingerprint"],
            "decision_codes": recorded_codes(record),
            **audit_pool(done),
        }
    )
    return summary


def _check_prompt_ids(
    backend: Any, tokenizer: Any, sample: Sample, ctk: Mapping[str, Any], name: str
) -> None:
    """The prompt a record names must be the prompt sent: a backend with its own ``encode`` must apply the
    pair's chat-template variables as :func:`runners.datasets.base.prompt_token_ids` does."""
    if not ctk or not hasattr(backend, "encode"):
        return
    if backend.encode(sample) != prompt_token_ids(tokenizer, sample.messages, ctk):
        raise RuntimeError(
            f"backend={name} does not apply pair.chat_template_kwargs={dict(ctk)} (its encode gives other "
            f"prompt ids); it must call runners.datasets.base.prompt_token_ids(tokenizer, messages, "
            f"pair.chat_template_kwargs)"
        )


def _repeat(backend: Any, sample: Any, decoding: Any, rule: Any, heads: Any, first: Any) -> float:
    """Generate ``sample`` again and return its wall seconds; the output must not change."""
    again = next(iter(backend.generate([sample], decoding, rule, heads)))
    if again.output_token_ids != first.output_token_ids:
        raise RuntimeError(
            f"{sample.sample_id}: a throughput repeat produced different tokens; decoding is not "
            "deterministic (set decoding.temperature=0 or repeats=1)"
        )
    return again.wall_s


def _write_exports(
    run_dir: Path, samples: list, tokenizer: Any, summary: dict, log: Callable[[str], None]
) -> None:
    """lm-eval / Spec-Bench / EvalPlus files beside the record, from its samples and the ``summary`` about to be
    written (derived: ``runners.rescore`` rewrites them)."""
    try:
        write_exports(run_dir, samples, tokenizer, summary)
    except Exception as e:  # the record is complete; a failed export is reported, not fatal
        log(
            f"[run {run_dir.name}] exports failed: {type(e).__name__}: {e} "
            f"(retry: ./reproduce.sh rescore {run_dir.name})"
        )


def _rounded(value: object) -> object:
    """A score for the console line: 4 decimals (the summary keeps the full value); anything else as is."""
    return round(value, 4) if isinstance(value, float) else value


def run_tag(c: Mapping[str, Any], requested_L: Any, n: int) -> str:
    """What a run's log lines say after ``[run <id>]``: method, draft length, dataset and item count, e.g.
    ``sd L=5 gsm8k n=10``. An autoregressive run drafts nothing (its resolved ``L`` is 0, whatever the sweep's
    grid gave it), so its tag says so beside the grid's value: ``ar L=0 (autoregressive: the sweep's L=5 unused)
    gsm8k n=10``, which Hydra's own ``L=5 method=ar`` line above it would otherwise contradict.

    Args:
        c: the resolved run config (:func:`runners.config.resolve.resolve_run_config`).
        requested_L: the composed config's ``L`` (the sweep's value), or None.
        n: the run's item count.
    """
    L = int(c["L"])
    note = ""
    if L == 0 and requested_L not in (None, 0):
        note = f" (autoregressive: the sweep's L={requested_L} unused)"
    return f"{c['method']['name']} L={L}{note} {c['dataset']['name']} n={n}"
