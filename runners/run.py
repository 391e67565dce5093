"""One run = one resolved config: load pair + dataset, generate, score, append records, summarise.

``run(cfg) -> summary dict`` is the whole job; ``runners.main`` is only the Hydra wrapper around it.
A finished run (summary present for the same sample count) is returned without loading anything; an
unfinished one resumes at the first sample id that has no record.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Mapping

from runners.paths import results_dir
from runners.record import RunRecord
from runners.validate import validate


def resolve_run_config(cfg: Any) -> dict:
    """Plain-dict config with the profile's limits applied and method=ar normalised to L=0.

    The result is what the run id hashes and what ``config.json`` stores.
    """
    if not isinstance(cfg, Mapping):
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(cfg, resolve=True)
    c = {k: v for k, v in dict(cfg).items() if k != "hydra"}
    c["dataset"] = dict(c["dataset"])
    c["decoding"] = dict(c["decoding"])
    profile = c.get("profile") or {}
    name = c["dataset"]["name"]
    if c["dataset"].get("limit") is None and (profile.get("limit") or {}).get(name) is not None:
        c["dataset"]["limit"] = int(profile["limit"][name])
    cap = (profile.get("max_new_tokens") or {}).get(name)
    if c["decoding"].get("max_new_tokens") is None:
        c["decoding"]["max_new_tokens"] = int(cap) if cap is not None else c["dataset"].get("max_new_tokens")
    if c["method"]["name"] == "ar":
        c["L"] = 0
    if not c["method"].get("uses_dropmatch"):
        c["dropmatch"] = dict(c.get("dropmatch") or {}, unused=True)
    return c


def build_criterion(c: Mapping[str, Any]) -> Any:
    """The acceptance rule for ``method.criterion`` (None for AR), with DropMatch's K and p_drop."""
    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA

    key = c["method"].get("criterion")
    if key is None:
        return None
    kwargs = {"K": int(c["dropmatch"]["K"]), "p_drop": float(c["dropmatch"]["p_drop"])} if c["method"].get("uses_dropmatch") else {}
    return CRITERIA.get(key)(**kwargs)


def _progress(total: int, desc: str):
    """tqdm bar on a terminal; one log line every 10% in non-interactive logs."""
    from tqdm import tqdm

    interactive = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit="sample", dynamic_ncols=True, disable=None if interactive else True)


def run(cfg: Any, log=print) -> dict:
    """Execute one run (resumable) and return its summary.

    Raises:
        runners.validate.ConfigError: invalid field (before anything loads).
        runners.record.RunLockedError: another process is writing this run.
    """
    import runners.backends  # noqa: F401  (register backends)
    import runners.datasets  # noqa: F401
    import runners.scorers  # noqa: F401
    from runners.backends.base import DecodingConfig
    from runners.logger import make_logger
    from runners.provenance import provenance
    from runners.registry import BACKENDS, DATASETS, SCORERS, build
    from runners.summary import summarize

    c = resolve_run_config(cfg)
    validate(c)
    record = RunRecord(results_dir() / "runs", c)
    dataset = build(DATASETS, c["dataset"])
    samples = dataset.load()
    scorer = build(SCORERS, {"name": dataset.scorer})
    L = int(c["L"])
    tag = f"{c['method']['name']} L={L} {c['dataset']['name']} n={len(samples)}"

    logger = make_logger(c.get("logger") or {}, record.run_id, c)
    with record:
        record.open({**provenance(), "run_id": record.run_id})
        done = record.done_ids()
        todo = [s for s in samples if s.sample_id not in done]
        log(f"[run {record.run_id}] {tag}: {len(samples) - len(todo)} done, {len(todo)} to go")
        if todo:
            from runners.models.loader import load_pair

            pair = load_pair(c["pair"], need_draft=L > 0, log=log)
            criterion = build_criterion(c)
            backend = build(BACKENDS, c["backend"], pair=pair)
            decoding = DecodingConfig(
                num_speculative_tokens=L, temperature=float(c["decoding"]["temperature"]),
                top_p=float(c["decoding"].get("top_p", 1.0)), max_new_tokens=int(c["decoding"]["max_new_tokens"]),
                stop=list(c["dataset"].get("stop") or []), seed=int(c["decoding"]["seed"]), trace=bool(c.get("trace")),
            )
            by_id = {s.sample_id: s for s in todo}
            bar = _progress(len(todo), tag)
            t_run = time.perf_counter()
            tokens = 0
            for i, res in enumerate(backend.generate(todo, decoding, criterion), 1):
                sample = by_id[res.sample_id]
                quality = scorer.score([sample], [res.output_text])[0]
                rec = {
                    "sample_id": res.sample_id,
                    "output_text": res.output_text,
                    "output_token_ids": res.output_token_ids,
                    "reference": sample.reference,
                    "quality": quality,
                    "spec": res.counters.to_dict(),
                    "accepted_per_round": res.accepted_per_round,
                    "speed": {
                        "num_output_tokens": res.num_output_tokens, "wall_s": res.wall_s, "prefill_s": res.prefill_s,
                        "draft_s": res.draft_s, "verify_s": res.verify_s, "criterion_s": res.criterion_s,
                    },
                    "seed": int(c["decoding"]["seed"]),
                }
                if res.trace is not None:
                    rec["trace"] = res.trace
                record.append(rec)
                logger.log_sample(rec)
                tokens += res.num_output_tokens
                rate = tokens / max(time.perf_counter() - t_run, 1e-9)
                bar.set_postfix(tok_s=f"{rate:.2f}", tau=f"{1 + res.counters.num_accepted_tokens / max(res.counters.num_drafts, 1):.2f}")
                bar.update(1)
                if not bar.disable or i == len(todo) or i % max(1, len(todo) // 10) == 0:
                    if bar.disable:
                        log(f"[run {record.run_id}] {i}/{len(todo)} samples, {rate:.2f} tok/s")
            bar.close()
        all_samples = [s for s in record.samples() if s["sample_id"] in {x.sample_id for x in samples}]
        summary = summarize(all_samples, L, scorer.aggregate)
        summary.update({"run_id": record.run_id, "complete": len(all_samples) == len(samples),
                        "num_expected": len(samples), **provenance()})
        record.write_summary(summary)
    logger.log_summary(summary)
    logger.finish()
    log(f"[run {record.run_id}] done: tau={summary['spec/mean_acceptance_length']:.3f} "
        f"tok/s={summary['speed/tok_per_s']:.3f} accuracy={summary.get('quality/accuracy')}")
    return summary
