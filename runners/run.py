"""One run = one resolved config: load pair + dataset, generate, score, append records, summarise.

``run(cfg) -> summary dict`` is the whole job; ``runners.main`` is only the Hydra wrapper around it.
A finished run (summary present for the same sample count) is returned without loading anything; an
unfinished one resumes at the first sample id that has no record. A record made by other decision code is
not reused silently (:mod:`runners.reuse`, config ``reuse: warn | strict``).
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any, Mapping

from runners.fields import canonical
from runners.fingerprint import decision_code
from runners.paths import results_dir
from runners.record import RunLockedError, RunRecord
from runners.reuse import check as check_reuse
from runners.reuse import recorded_codes
from runners.validate import validate

_logger = logging.getLogger(__name__)  # (the local `logger` in run() is the W&B experiment logger)


def resolve_run_config(cfg: Any, identify_models: bool = True) -> dict:
    """Validate, then normalise to the plain dict the run id hashes and ``config.json`` stores.

    Normalisation: numeric fields take their declared type (:func:`runners.fields.canonical`); the
    profile's per-dataset ``limit`` / ``max_new_tokens`` fill unset fields;
    autoregressive methods get ``L = 0``; ``backend: auto`` becomes the chosen backend's config
    (:mod:`runners.backends.select`); DropMatch fields a method does not use are fixed (so a sweep
    over ``dropmatch.p_drop`` runs SD once, not once per value); ``model_identity`` records the weights
    each model will be loaded from (:func:`runners.models.identity.model_identity`; skipped with
    ``identify_models=False``, for validation only). ``method.threshold`` is dropped from methods without a judge (a sweep
    ``++method.threshold=...`` runs SD once); Auto-Judge methods get ``method.judge.key``
    (:func:`runners.autojudge.artefact.attach_judge`).

    Raises:
        runners.validate.ConfigError: an invalid field, or a missing judge artefact (nothing has been loaded yet).
    """
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):  # a DictConfig is a Mapping too: resolve it into plain containers
        cfg = OmegaConf.to_container(cfg, resolve=True)
    c = {k: v for k, v in dict(cfg).items() if k != "hydra"}
    c["dataset"], c["decoding"], c["method"] = (
        dict(c["dataset"]),
        dict(c["decoding"]),
        dict(c["method"]),
    )
    c["dropmatch"] = dict(c.get("dropmatch") or {})
    method = c["method"]
    if method.get("autoregressive"):
        c["L"] = 0
    c["backend"] = _resolve_backend(c)  # backend=auto -> the engine this machine runs fastest
    validate(c)
    canonical(
        c
    )  # each numeric field as its declared type (decoding.temperature=0 -> 0.0), as config.json stores it
    if method.get(
        "measure"
    ):  # a measurement run (runners/measure/): its own fields are checked before loading
        from runners.measure import check

        check(c)
    if isinstance(method.get("judge"), Mapping):
        _check_judge_method(c)
    else:
        method.pop("threshold", None)
    spec_method = (c.get("pair") or {}).get(
        "spec_method"
    )  # the pair says what its draft is (eagle3 head)
    if spec_method and dict(c["backend"]).get("name") == "vllm":
        c["backend"] = {**dict(c["backend"]), "spec_method": str(spec_method)}
    profile = c.get("profile") or {}
    name = c["dataset"]["name"]
    if c["dataset"].get("limit") is None and (profile.get("limit") or {}).get(name) is not None:
        c["dataset"]["limit"] = int(profile["limit"][name])
    cap = (profile.get("max_new_tokens") or {}).get(name)
    if c["decoding"].get("max_new_tokens") is None:
        c["decoding"]["max_new_tokens"] = (
            int(cap) if cap is not None else c["dataset"].get("max_new_tokens")
        )
    if c.get("repeats") is None:
        c["repeats"] = int(profile.get("repeats") or 1)
    dm = c["dropmatch"]
    if method.get("uses_dropmatch") or method.get("measure"):
        dm["path"] = 0
    elif method.get("ar_dropout_path"):  # one path: K = 1; the rule's settings do not apply
        c["dropmatch"] = {"K": 1, "p_drop": dm["p_drop"], "path": dm.get("path", 0)}
    else:
        c["dropmatch"] = {"unused": True}
    if isinstance(method.get("judge"), Mapping):
        from runners.autojudge.artefact import attach_judge

        attach_judge(c)
    if identify_models:
        from runners.models.identity import model_identity

        c["model_identity"] = model_identity(c["pair"], c["backend"])
    return c


def _resolve_backend(c: Mapping[str, Any]) -> dict:
    """``backend: auto`` resolved (:func:`runners.backends.select.resolve_backend`); any other backend as is.

    Raises:
        runners.validate.ConfigError: a setting given to ``auto`` that the chosen backend lacks.
    """
    from runners.backends.select import resolve_backend
    from runners.validate import ConfigError

    try:
        return resolve_backend(c, log=_logger.info)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_judge_method(c: Mapping[str, Any]) -> None:
    """An Auto-Judge method's own fields (its backend is checked by validation: ``autojudge`` mode)."""
    from runners.validate import ConfigError

    thr = c["method"].get("threshold")
    if isinstance(thr, bool) or not isinstance(thr, (int, float)) or not 0.0 <= float(thr) <= 1.0:
        raise ConfigError(
            f"method.threshold={thr!r} is invalid; allowed: a number in [0, 1] (accept a mismatch iff "
            f"the judge's p_important < threshold)"
        )
    if float(c["decoding"]["temperature"]) != 0.0:
        raise ConfigError(
            f"decoding.temperature={c['decoding']['temperature']} with method={c['method']['name']}; "
            f"allowed: 0 (Auto-Judge is greedy)"
        )


DROPMATCH_RULE_FIELDS = (
    "majority",
    "include_target",
)  # dropmatch.* fields that are the rule's own settings


def build_rule(c: Mapping[str, Any]) -> Any:
    """The acceptance rule ``method.criterion`` built from its own settings only.

    DropMatch rules take ``dropmatch.majority`` / ``dropmatch.include_target``; any rule takes
    ``method.kwargs``; Auto-Judge rules (``method.judge``) take ``method.threshold`` and their built judge head
    (``judge.pt`` of ``method.judge.key``). K and p_drop are not rule settings: see :func:`head_spec`.
    """
    import criteria.rules  # noqa: F401
    from criteria.registry import CRITERIA

    kwargs = dict(c["method"].get("kwargs") or {})
    if c["method"].get("uses_dropmatch"):
        kwargs.update({k: c["dropmatch"][k] for k in DROPMATCH_RULE_FIELDS if k in c["dropmatch"]})
    judge = c["method"].get("judge")
    if isinstance(judge, Mapping):
        from runners.autojudge.artefact import judge_dir

        kwargs.update(
            threshold=float(c["method"]["threshold"]),
            judge=str(judge_dir(judge["key"]) / "judge.pt"),
        )
    return CRITERIA.get(c["method"]["criterion"])(**kwargs)


def head_spec(c: Mapping[str, Any]) -> Any:
    """The run's MC-dropout heads (:class:`criteria.dropout_heads.HeadSpec`), built once from the config."""
    from criteria.dropout_heads import HeadSpec

    if c["method"].get("uses_dropmatch") or c["method"].get("ar_dropout_path"):
        top_n = c["dropmatch"].get("sparse_top_n")
        check = (
            c["dropmatch"].get("sparse_check_top_n") if c["method"].get("uses_dropmatch") else None
        )
        return HeadSpec(
            K=int(c["dropmatch"]["K"]),
            p_drop=float(c["dropmatch"]["p_drop"]),
            top_n=None if top_n is None else int(top_n),
            check_top_n=None if check is None else int(check),
        )
    return HeadSpec()


class _Progress:
    """Progress of one run: samples done, tok/s, running tau and ETA.

    ``mode`` (config ``progress``): ``bar`` a tqdm bar on stderr, ``log`` one line per ~10% of the samples
    (for non-interactive Slurm/CI logs), ``quiet`` nothing, ``auto`` bar on a terminal else log.
    """

    def __init__(self, total: int, desc: str, mode: str, log) -> None:
        mode = (
            mode if mode in ("bar", "log", "quiet") else ("bar" if sys.stderr.isatty() else "log")
        )
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
        elif self.mode == "log" and (
            self.n == self.total or self.n % max(1, self.total // 10) == 0
        ):
            eta = elapsed / self.n * (self.total - self.n)
            self.log(
                f"{prefix} {self.n}/{self.total} samples, {rate:.2f} tok/s, tau {tau:.2f}, "
                f"elapsed {_hms(elapsed)}, ETA {_hms(eta)}"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


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
        runners.validate.ConfigError: invalid field (before anything loads).
    """
    import runners.backends  # noqa: F401  (register backends)
    import runners.datasets  # noqa: F401
    import runners.scorers  # noqa: F401
    from runners.backends.base import DecodingConfig
    from runners.datasets.base import prompt_record, prompt_token_ids
    from runners.logger import make_logger
    from runners.provenance import provenance
    from runners.registry import BACKENDS, DATASETS, SCORERS, build
    from runners.summary import summarize

    c = resolve_run_config(cfg)
    if c["method"].get(
        "measure"
    ):  # Table 4 timings, Fig. 3 similarity, the benchmark: records of measurements
        from runners.measure import run_measurement

        return run_measurement(c, log)
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
                    "decision_code": decision_code(),
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
            progress = _Progress(len(todo), tag, str(c.get("progress") or "auto"), log)
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
                "decision_code": decision_code()["fingerprint"],
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
