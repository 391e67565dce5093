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
from runners.record import RunLockedError, RunRecord
from runners.validate import validate


def resolve_run_config(cfg: Any) -> dict:
    """Validate, then normalise to the plain dict the run id hashes and ``config.json`` stores.

    Normalisation: the profile's per-dataset ``limit`` / ``max_new_tokens`` fill unset fields;
    autoregressive methods get ``L = 0``; DropMatch fields a method does not use are fixed (so a sweep
    over ``dropmatch.p_drop`` runs SD once, not once per value); likewise ``method.threshold`` is dropped
    from methods without a judge (a sweep ``++method.threshold=...`` runs SD once). Auto-Judge methods get
    ``method.judge.key`` (:func:`runners.autojudge.artefact.attach_judge`).

    Raises:
        runners.validate.ConfigError: an invalid field, or a missing judge artefact (nothing has been loaded yet).
    """
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):  # a DictConfig is a Mapping too: resolve it into plain containers
        cfg = OmegaConf.to_container(cfg, resolve=True)
    c = {k: v for k, v in dict(cfg).items() if k != "hydra"}
    c["dataset"], c["decoding"], c["method"] = dict(c["dataset"]), dict(c["decoding"]), dict(c["method"])
    c["dropmatch"] = dict(c.get("dropmatch") or {})
    method = c["method"]
    if method.get("autoregressive"):
        c["L"] = 0
    validate(c)
    if isinstance(method.get("judge"), Mapping):
        _check_judge_method(c)
    else:
        method.pop("threshold", None)
    spec_method = (c.get("pair") or {}).get("spec_method")  # the pair says what its draft is (eagle3 head)
    if spec_method and dict(c["backend"]).get("name") == "vllm":
        c["backend"] = {**dict(c["backend"]), "spec_method": str(spec_method)}
    profile = c.get("profile") or {}
    name = c["dataset"]["name"]
    if c["dataset"].get("limit") is None and (profile.get("limit") or {}).get(name) is not None:
        c["dataset"]["limit"] = int(profile["limit"][name])
    cap = (profile.get("max_new_tokens") or {}).get(name)
    if c["decoding"].get("max_new_tokens") is None:
        c["decoding"]["max_new_tokens"] = int(cap) if cap is not None else c["dataset"].get("max_new_tokens")
    if c.get("repeats") is None:
        c["repeats"] = int(profile.get("repeats") or 1)
    dm = c["dropmatch"]
    if method.get("uses_dropmatch"):
        dm["path"] = 0
    elif method.get("ar_dropout_path"):
        dm["K"] = 1
    else:
        c["dropmatch"] = {"unused": True}
    if isinstance(method.get("judge"), Mapping):
        from runners.autojudge.artefact import attach_judge

        attach_judge(c)
    return c


def _check_judge_method(c: Mapping[str, Any]) -> None:
    from runners.validate import ConfigError

    thr = c["method"].get("threshold")
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not 0.0 <= float(thr) <= 1.0:
        raise ConfigError(f"method.threshold={thr!r} is invalid; allowed: a number in [0, 1] (accept a mismatch iff "
                          f"the judge's p_important < threshold)")
    if c["backend"]["name"] != "hf":
        raise ConfigError(f"method={c['method']['name']} with backend={c['backend']['name']}: the judge reads the draft's and "
                          f"the target's hidden states in the verify step, which only backend=hf passes so far; allowed: backend=hf")
    if float(c["decoding"]["temperature"]) != 0.0:
        raise ConfigError(f"decoding.temperature={c['decoding']['temperature']} with method={c['method']['name']}; "
                          f"allowed: 0 (Auto-Judge is greedy)")


def build_criterion(c: Mapping[str, Any]) -> Any:
    """The acceptance rule for ``method.criterion`` (None for AR), with DropMatch's K and p_drop."""
    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA

    key = c["method"].get("criterion")
    if key is None:
        return None
    kwargs = {"K": int(c["dropmatch"]["K"]), "p_drop": float(c["dropmatch"]["p_drop"])} if c["method"].get("uses_dropmatch") else {}
    judge = c["method"].get("judge")
    if isinstance(judge, Mapping):  # Auto-Judge: the built judge head and its threshold
        from runners.autojudge.artefact import judge_dir

        kwargs.update(threshold=float(c["method"]["threshold"]), judge=str(judge_dir(judge["key"]) / "judge.pt"))
    return CRITERIA.get(key)(**kwargs)


class _Progress:
    """Progress of one run: samples done, tok/s, running tau and ETA.

    ``mode`` (config ``progress``): ``bar`` a tqdm bar on stderr, ``log`` one line per ~10% of the samples
    (for non-interactive Slurm/CI logs), ``quiet`` nothing, ``auto`` bar on a terminal else log.
    """

    def __init__(self, total: int, desc: str, mode: str, log) -> None:
        mode = mode if mode in ("bar", "log", "quiet") else ("bar" if sys.stderr.isatty() else "log")
        self.total, self.mode, self.log, self.n, self.tokens = total, mode, log, 0, 0
        self.drafts = self.accepted = 0
        self.t0 = time.perf_counter()
        self.bar = None
        if mode == "bar":
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="sample", dynamic_ncols=True)

    def update(self, num_tokens: int, counters: Any, prefix: str) -> None:
        self.n += 1
        self.tokens += num_tokens
        self.drafts += counters.num_drafts
        self.accepted += counters.num_accepted_tokens
        elapsed = time.perf_counter() - self.t0
        rate, tau = self.tokens / max(elapsed, 1e-9), 1 + self.accepted / max(self.drafts, 1)
        if self.bar is not None:  # tqdm shows elapsed<remaining (ETA) itself
            self.bar.set_postfix(tok_s=f"{rate:.2f}", tau=f"{tau:.2f}")
            self.bar.update(1)
        elif self.mode == "log" and (self.n == self.total or self.n % max(1, self.total // 10) == 0):
            eta = elapsed / self.n * (self.total - self.n)
            self.log(f"{prefix} {self.n}/{self.total} samples, {rate:.2f} tok/s, tau {tau:.2f}, "
                     f"elapsed {_hms(elapsed)}, ETA {_hms(eta)}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _repeat(backend: Any, sample: Any, decoding: Any, criterion: Any, first: Any) -> float:
    """Generate ``sample`` again and return its wall seconds; the output must not change."""
    again = next(iter(backend.generate([sample], decoding, criterion)))
    if again.output_token_ids != first.output_token_ids:
        raise RuntimeError(f"{sample.sample_id}: a throughput repeat produced different tokens; decoding is not "
                           "deterministic (set decoding.temperature=0 or repeats=1)")
    return again.wall_s


def run(cfg: Any, log=print) -> dict:
    """Execute one run (resumable) and return its summary.

    A run another live process is writing (its record is locked) is left to that process; the result
    is then ``{"run_id", "complete": False, "running_elsewhere": True}``.

    Raises:
        runners.validate.ConfigError: invalid field (before anything loads).
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
    record = RunRecord(results_dir() / "runs", c)
    dataset = build(DATASETS, c["dataset"])
    samples = dataset.load()
    scorer = build(SCORERS, {"name": dataset.scorer})
    L = int(c["L"])
    tag = f"{c['method']['name']} L={L} {c['dataset']['name']} n={len(samples)}"

    finished = record.existing_summary()
    if finished is not None and finished.get("num_expected") == len(samples):
        log(f"[run {record.run_id}] {tag}: finished earlier, skipped ({record.dir})")
        return finished
    with record:
        try:
            record.open({**provenance(), "run_id": record.run_id})
        except RunLockedError as e:  # e.g. two points of one parallel sweep with the same identity (AR at L=5, 10)
            log(f"[run {record.run_id}] {tag}: skipped here, {e}; that process finishes it")
            return {"run_id": record.run_id, "complete": False, "running_elsewhere": True}
        logger = make_logger(c.get("logger") or {}, record.run_id, c)
        done = record.done_ids()
        todo = [s for s in samples if s.sample_id not in done]
        log(f"[run {record.run_id}] {tag}: {len(samples) - len(todo)} done, {len(todo)} to go")
        if todo:
            from runners.models.loader import load_pair

            pair = load_pair(c["pair"], need_draft=L > 0 or c["method"].get("ar_model") == "draft",
                             load_weights=bool(c["backend"].get("loads_hf_weights", True)), log=log)
            criterion = build_criterion(c)
            backend = build(BACKENDS, c["backend"], pair=pair)
            decoding = DecodingConfig(
                num_speculative_tokens=L, temperature=float(c["decoding"]["temperature"]),
                top_p=float(c["decoding"].get("top_p", 1.0)), max_new_tokens=int(c["decoding"]["max_new_tokens"]),
                stop=list(c["dataset"].get("stop") or []), seed=int(c["decoding"]["seed"]), trace=bool(c.get("trace")),
                ar_model=str(c["method"].get("ar_model", "target")),
                ar_dropout_p=float(c["dropmatch"]["p_drop"]) if c["method"].get("ar_dropout_path") else None,
                ar_path=int(c["dropmatch"].get("path") or 0),
            )
            repeats = int(c.get("repeats") or 1)
            by_id = {s.sample_id: s for s in todo}
            progress = _Progress(len(todo), tag, str(c.get("progress") or "auto"), log)
            for res in backend.generate(todo, decoding, criterion):
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
                if repeats > 1:  # re-time the same sample (Spec-Bench style throughput repeats)
                    rec["speed"]["wall_s_repeats"] = [res.wall_s] + [
                        _repeat(backend, sample, decoding, criterion, res) for _ in range(repeats - 1)]
                record.append(rec)
                logger.log_sample(rec)
                progress.update(res.num_output_tokens, res.counters, f"[run {record.run_id}]")
            progress.close()
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
