"""One run = one resolved config: load pair + dataset, generate, score, append records, summarise.

``run(cfg) -> summary dict`` is the whole job; ``runners.main`` is only the Hydra wrapper around it.
A finished run (summary present for the same sample count) is returned without loading anything; an
unfinished one resumes at the first sample id that has no record. A record made by other decision code is
not reused silently (:mod:`runners.records.reuse`, config ``reuse: warn | strict``).
"""

from __future__ import annotations

import logging
from typing import Any

from runners.config.decode_spec import build_rule, head_spec
from runners.config.resolve import resolve_run_config
from runners.paths import results_dir
from runners.records.fingerprint import run_decision_code
from runners.records.record import RunLockedError, RunRecord
from runners.records.reuse import check as check_reuse
from runners.records.reuse import recorded_codes
from runners.sweep.progress import RunProgress

_logger = logging.getLogger(__name__)  # (the local `logger` in run() is the W&B experiment logger)


def _repeat(backend: Any, sample: Any, decoding: Any, rule: Any, heads: Any, first: Any) -> float:
    """Generate ``sample`` again and return its wall seconds; the output must not change."""
    again = next(iter(backend.generate([sample], decoding, rule, heads)))
    if again.output_token_ids != first.output_token_ids:
        raise RuntimeError(
            f"{sample.sample_id}: a throughput repeat produced different tokens; decoding is not "
            "deterministic (set decoding.temperature=0 or repeats=1)"
        )
    return again.wall_s


def _write_exports(run_dir: Any, samples: list, tokenizer: Any, log) -> None:
    """lm-eval / Spec-Bench / EvalPlus files beside the record (derived: ``runners.rescore`` rewrites them)."""
    from runners.exports import write_exports

    try:
        write_exports(run_dir, samples, tokenizer)
    except Exception as e:  # the record is complete; a failed export is reported, not fatal
        log(
            f"[run {run_dir.name}] exports failed: {type(e).__name__}: {e} (retry: ./reproduce.sh rescore {run_dir.name})"
        )


def run(cfg: Any, log=_logger.info) -> dict:
    """Execute one run (resumable) and return its summary.

    A run another live process is writing (its record is locked) is left to that process; the result
    is then ``{"run_id", "complete": False, "running_elsewhere": True}``.

    Raises:
        runners.config.validate.ConfigError: invalid field (before anything loads).
    """
    import runners.backends  # noqa: F401  (register backends)
    import runners.datasets  # noqa: F401
    import runners.scorers  # noqa: F401
    from runners.backends.base import DecodingConfig
    from runners.datasets.base import prompt_record, prompt_token_ids
    from runners.loggers import make_logger
    from runners.records.provenance import provenance
    from runners.records.summary import summarize
    from runners.registry import BACKENDS, DATASETS, SCORERS, build

    c = resolve_run_config(cfg)
    record = RunRecord(results_dir() / "runs", c)
    dataset = build(DATASETS, c["dataset"])
    samples = dataset.load()
    scorer = build(SCORERS, {"name": dataset.scorer})
    L = int(c["L"])
    tag = f"{c['method']['name']} L={L} {c['dataset']['name']} n={len(samples)}"

    finished = record.existing_summary()
    if finished is not None and finished.get("num_expected") != len(samples):
        finished = None  # more samples asked for: the run continues
    reused = check_reuse(
        record, str(c.get("reuse") or "warn"), finished, tag, log
    )  # other decision code?
    if reused is not None:
        if not reused.get("stale_decision_code"):
            log(f"[run {record.run_id}] {tag}: finished earlier, skipped ({record.dir})")
        return reused
    roles = ["target"] + (["draft"] if L > 0 or c["method"].get("ar_model") == "draft" else [])
    for role in roles:  # no record under the id of weights that cannot be loaded
        ident = c["model_identity"].get(role) or {}
        if ident.get("source") == "unavailable":
            from runners.models.sources import ModelUnavailableError

            raise ModelUnavailableError(f"pair.{role}: {ident.get('reason')}")
    with record:
        try:
            record.open(
                {
                    **provenance(),
                    "run_id": record.run_id,
                    "model_identity": c["model_identity"],
                    "decision_code": run_decision_code(c),
                }
            )
        except (
            RunLockedError
        ) as e:  # e.g. two points of one parallel sweep with the same identity (AR at L=5, 10)
            log(f"[run {record.run_id}] {tag}: skipped here, {e}; that process finishes it")
            return {"run_id": record.run_id, "complete": False, "running_elsewhere": True}
        logger = make_logger(c.get("logger") or {}, record.run_id, c)
        done = record.done_ids()
        todo = [s for s in samples if s.sample_id not in done]
        log(f"[run {record.run_id}] {tag}: {len(samples) - len(todo)} done, {len(todo)} to go")
        if todo:
            from runners.models.loader import load_pair

            pair = load_pair(
                c["pair"],
                need_draft=L > 0 or c["method"].get("ar_model") == "draft",
                load_weights=bool(c["backend"].get("loads_hf_weights", True)),
                log=log,
            )
            rule, heads = build_rule(c), head_spec(c)
            backend = build(BACKENDS, c["backend"], pair=pair)
            decoding = DecodingConfig(
                num_speculative_tokens=L,
                temperature=float(c["decoding"]["temperature"]),
                top_p=float(c["decoding"].get("top_p", 1.0)),
                max_new_tokens=int(
                    c["decoding"]["max_new_tokens"] or dataset.max_new_tokens
                ),  # null: lm-eval's cap
                stop=list(dataset.stop or []),
                seed=int(c["decoding"]["seed"]),
                trace=bool(c.get("trace")),
                ar_model=str(c["method"].get("ar_model", "target")),
                seed_stream=int(c["dropmatch"].get("path") or 0)
                if c["method"].get("ar_dropout_path")
                else 0,
            )
            ctk = dict(c["pair"].get("chat_template_kwargs") or {})
            if ctk and hasattr(
                backend, "encode"
            ):  # the prompt the record names must be the prompt sent
                if backend.encode(todo[0]) != prompt_token_ids(
                    pair.tokenizer, todo[0].messages, ctk
                ):
                    raise RuntimeError(
                        f"backend={c['backend']['name']} does not apply pair.chat_template_kwargs={ctk} (its encode "
                        f"gives other prompt ids); it must call runners.datasets.base.prompt_token_ids(tokenizer, "
                        f"messages, pair.chat_template_kwargs)"
                    )
            repeats = int(c.get("repeats") or 1)
            by_id = {s.sample_id: s for s in todo}
            progress = RunProgress(len(todo), tag, str(c.get("progress") or "auto"), log)
            for res in backend.generate(todo, decoding, rule, heads):
                sample = by_id[res.sample_id]
                quality = scorer.score([sample], [res.output_text])[0]
                rec = {
                    "sample_id": res.sample_id,
                    "prompt": prompt_record(pair.tokenizer, sample.messages, ctk),
                    "output_text": res.output_text,
                    "output_token_ids": res.output_token_ids,
                    "reference": sample.reference,
                    "quality": quality,
                    "spec": res.counters.to_dict(),
                    "accepted_per_round": res.accepted_per_round,
                    "stop_reason": res.stop_reason,
                    "eos_removed": res.eos_removed,
                    "speed": {
                        "num_output_tokens": res.num_output_tokens,
                        "wall_s": res.wall_s,
                        "prefill_s": res.prefill_s,
                        "draft_s": res.draft_s,
                        "verify_s": res.verify_s,
                        "criterion_s": res.criterion_s,
                        **({"share_s": res.share_s} if res.share_s is not None else {}),
                    },
                    "seed": int(c["decoding"]["seed"]),
                }
                if res.trace is not None:
                    rec["trace"] = res.trace
                if repeats > 1:  # re-time the same sample (Spec-Bench style throughput repeats)
                    rec["speed"]["wall_s_repeats"] = [res.wall_s] + [
                        _repeat(backend, sample, decoding, rule, heads, res)
                        for _ in range(repeats - 1)
                    ]
                record.append(rec)
                logger.log_sample(rec)
                progress.update(res.num_output_tokens, res.counters, f"[run {record.run_id}]")
            progress.close()
        all_samples = [
            s for s in record.samples() if s["sample_id"] in {x.sample_id for x in samples}
        ]
        summary = summarize(all_samples, L, scorer.aggregate)
        summary.update(
            {
                "run_id": record.run_id,
                "complete": len(all_samples) == len(samples),
                "num_expected": len(samples),
                **provenance(),
                "decision_code": run_decision_code(c)["fingerprint"],
                "decision_codes": recorded_codes(record),
            }
        )
        record.write_summary(summary)
        _write_exports(record.dir, samples, pair.tokenizer if todo else None, log)
    logger.log_summary(summary)
    logger.finish()
    log(
        f"[run {record.run_id}] done: tau={summary['spec/mean_acceptance_length']:.3f} "
        f"tok/s={summary['speed/tok_per_s']:.3f} accuracy={summary.get('quality/accuracy')}"
    )
    return summary
