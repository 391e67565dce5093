"""The side-by-side benchmark (``./reproduce.sh bench``): one process, one pair, the same prompts, every arm.

Arms (``method.arms``): ``ar`` (our loop, L = 0), ``hf_ar`` (transformers ``generate``, greedy), ``sd`` (our
loop, ``method.criterion``: greedy exact match), ``hf_assisted`` (transformers assisted generation, the draft
as assistant, L candidates per round), ``sd_dm`` (our loop, ``method.dm_criterion`` = DropMatch with
``dropmatch.K`` / ``p_drop``); ``f32_ar`` / ``f32_sd`` / ``f32_sd_dm``: the same three through our loop on a
float32 copy of the pair loaded beside it (for a ``pair.dtype`` other than float32); ``lc_ar`` / ``lc_sd`` /
``lc_sd_dm``: the same three through the llama.cpp loop (``backend=llamacpp``: the pair's GGUF files at their own
precision, same prompts, same process). The names: :mod:`runners.records.bench_arm_names`. All greedy, to
``decoding.max_new_tokens`` or EOS, no stop strings, no prefix caching (every arm prefills the whole prompt; see :mod:`runners.measure.bench_arms` for what is timed).

Units: ``<sample_id>#<repeat>`` -- every arm on that prompt, back to back, in an order rotated per prompt and
repeat (machine noise spreads over the arms); for each B > 1 of ``method.batch_sizes``, ``batch<B>/<repeat>`` --
each of our arms (:data:`BATCHED_ARMS` in ``method.arms``) decodes the first B prompts together, through a
backend of the same engine built with ``batch_size`` = B on that engine's loaded pair (the float32 arms: the
float32 copy), timed as one call (the order of the
arms rotated per repeat; transformers' arms stay at batch 1: assisted generation decodes one sequence); then
``latency/<k>`` -- :class:`runners.measure.latency.VerifyTimer`
on the loaded target at this L, K, p_drop (verify(L+1)/decode, DM decision overhead share of the verify
pass). Models load once per process; each session starts with an untimed warm-up of every arm (on the first
prompt's last turn alone, ``method.warmup_tokens`` tokens).
The summary (``bench/*``) is computed from the lines by :mod:`runners.measure.bench_summary`.

``method.batch_sizes`` (default ``[1]``): distinct integers >= 1, including 1 (the prompt units are batch 1);
B > 1 needs ``dataset.limit`` >= B (refused otherwise, never silently fewer prompts). The default is dropped
from the resolved config, so a batch-1 run keeps the config and run id it had before the field existed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

import criteria.rules  # noqa: F401  (registration)
import runners.backends  # noqa: F401  (registration)
import runners.datasets  # noqa: F401
from criteria.dropmatch_base import DropMatchBase
from criteria.registry import CRITERIA
from runners.backends.output import end_of_sequence_ids
from runners.backends.select import backend_defaults
from runners.config.decode_spec import build_rule, head_spec
from runners.config.errors import ConfigError
from runners.config.isa import CAP_ENV, isa_cap
from runners.datasets.base import prompt_token_ids
from runners.measure.base import MEASUREMENTS, positive_int
from runners.measure.bench_arms import hf_generate, our_generate, our_generate_batch
from runners.measure.bench_batch_summary import summarize_batches
from runners.measure.bench_summary import summarize_bench
from runners.measure.latency import VerifyTimer, check_common
from runners.models.dtype import cpu_flags, resolve_dtype
from runners.models.identity import gguf_precision
from runners.models.loader import load_pair
from runners.records.bench_arm_names import (
    ARMS,
    BATCHED_ARMS,
    ENGINES,
    FP32_ARMS,
    GGUF_ARMS,
    SPEC_ARMS,
    engine_of,
    loop_arm,
)
from runners.registry import BACKENDS, DATASETS, build

BATCH_PREFIX = "batch"  # unit ids batch<B>/<repeat>


def batch_sizes(c: Mapping[str, Any]) -> list[int]:
    """``method.batch_sizes`` checked (absent: ``[1]``), ascending.

    Raises:
        ConfigError: not a list of distinct integers >= 1 that includes 1; a B above ``dataset.limit``.
    """
    v = c["method"].get("batch_sizes", [1])
    ok = (
        isinstance(v, (list, tuple))
        and all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in v)
        and 1 in v
        and len(set(v)) == len(v)
    )
    if not ok:
        raise ConfigError(
            f"method.batch_sizes={v!r} is invalid; allowed: a list of distinct integers >= 1 including 1 "
            "(batch 1 is always measured: the per-prompt units), e.g. [1, 8]"
        )
    limit = c["dataset"].get("limit")
    if limit is not None and max(v) > int(limit):
        raise ConfigError(
            f"method.batch_sizes={list(v)!r} needs dataset.limit >= {max(v)} (the batch decodes the first B "
            f"prompts together), got dataset.limit={limit}; allowed: batch sizes <= dataset.limit"
        )
    return sorted(v)


def _check_rules(c: Mapping[str, Any], arms: Sequence[str]) -> None:
    """The arms' rules before anything loads: ``method.criterion`` (the SD arms) a registered rule that reads no
    MC-dropout heads, ``method.dm_criterion`` (the SD+DM arms) a DropMatch rule (a
    :class:`criteria.dropmatch_base.DropMatchBase`: the table labels its arm "SD + DropMatch"), and
    ``dropmatch.K >= 1`` when an SD+DM arm runs, and no float32 arm (``f32_*``) where ``pair.dtype`` resolves to
    float32 (it would repeat ``ar`` / ``sd`` / ``sd_dm``).

    Raises:
        ConfigError: naming the field and the allowed values.
    """
    m = c["method"]
    for field, arm_names, heads in (
        ("criterion", tuple(f"{e}sd" for e in ENGINES), False),
        ("dm_criterion", tuple(f"{e}sd_dm" for e in ENGINES), True),
    ):
        if not any(a in arms for a in arm_names):
            continue
        allowed = [
            n
            for n in CRITERIA.names()
            if (
                issubclass(CRITERIA.get(n), DropMatchBase)
                if heads
                else not CRITERIA.get(n).needs_heads
            )
        ]
        if m.get(field) not in allowed:
            what = "is a DropMatch rule" if heads else "reads no MC-dropout heads"
            raise ConfigError(
                f"method.{field}={m.get(field)!r} is invalid for the arms {', '.join(arm_names)}; allowed: a "
                f"rule that {what}: {', '.join(allowed)}"
            )
    K = c["dropmatch"].get("K")
    ok = isinstance(K, int) and not isinstance(K, bool) and K >= 1
    if not ok and any(loop_arm(a) == "sd_dm" for a in arms):
        raise ConfigError(
            f"dropmatch.K={c['dropmatch'].get('K')!r} is invalid with the arms sd_dm / f32_sd_dm / lc_sd_dm (their "
            "rule reads the MC-dropout heads); allowed: an integer >= 1, or method.arms without them"
        )
    if any(a in FP32_ARMS for a in arms) and resolve_dtype(c["pair"]) == "float32":
        raise ConfigError(
            f"method.arms={list(arms)!r} holds float32 arms ({', '.join(FP32_ARMS)}) but pair.dtype="
            f"{c['pair'].get('dtype')} resolves to float32 on this machine, so they would repeat ar / sd / sd_dm; "
            "allowed: the f32_* arms with pair.dtype=bfloat16 (or auto where the CPU has fast bf16), or "
            "method.arms without them"
        )


@MEASUREMENTS.register("bench")
class BenchMeasurement:
    """The benchmark run for one pair and dtype (sweep ``pair.dtype`` for both)."""

    def __init__(self, c: Mapping[str, Any]) -> None:
        self.c = c
        self._samples: list | None = None

    @staticmethod
    def check(c: Mapping[str, Any]) -> None:
        """Refuse a bad field (ConfigError naming it); ``method.batch_sizes`` is dropped when it is ``[1]`` and
        sorted otherwise (see the module docstring)."""
        m = c["method"]
        check_common(c)
        positive_int(c, "timing_repeats")
        positive_int(c, "latency_repeats", minimum=0)
        positive_int(c, "warmup_tokens")
        sizes = batch_sizes(c)
        # the default adds no unit: dropped, the config (and run id) is a run's from before the field; other
        # sizes sorted: one config (and run id) per set of sizes, whatever their order
        if sizes == [1]:
            c["method"].pop("batch_sizes", None)
        else:
            c["method"]["batch_sizes"] = sizes
        given = m.get("arms")
        arms = list(given) if isinstance(given, (list, tuple)) else []
        bad = [a for a in arms if a not in ARMS]
        if not arms or bad or "ar" not in arms or len(set(arms)) != len(arms):
            raise ConfigError(
                f"method.arms={given!r} is invalid; allowed: a list of distinct names from {', '.join(ARMS)}, "
                "including ar (the reference every output is compared with), e.g. method.arms=[ar,sd,sd_dm]"
            )
        _check_rules(c, arms)
        if float(c["decoding"]["temperature"]) != 0.0:
            raise ConfigError(
                f"decoding.temperature={c['decoding']['temperature']} is invalid for method=bench; "
                "allowed: 0 (greedy: SD and assisted outputs must equal AR's)"
            )
        BenchMeasurement.check_backend(c)
        if c["backend"].get("prefix_caching"):
            raise ConfigError(
                f"backend.prefix_caching={c['backend'].get('prefix_caching')} is invalid for method=bench; "
                "allowed: false (transformers generate prefills every prompt in full; so must our arms)"
            )

    @staticmethod
    def check_backend(c: Mapping[str, Any]) -> None:
        """Our arms run the transformers loop (``backend=hf``); the other engines join as arms, not backends.

        Raises:
            ConfigError: another ``backend``, naming the arms that run that engine.
        """
        if c["backend"]["name"] != "hf":
            raise ConfigError(
                f"backend={c['backend']['name']} is invalid for method=bench; allowed: backend=hf (our arms run "
                "the transformers loop; llama.cpp runs beside them as the arms "
                f"{', '.join(GGUF_ARMS)}: method.arms=[ar,sd,sd_dm,lc_ar,lc_sd,lc_sd_dm]; float32 as "
                f"{', '.join(FP32_ARMS)}; vLLM is not a bench engine)"
            )

    def decision_rules(self) -> list[tuple[str, str]]:
        """``(criterion, backend)`` of each of our arms (transformers' own arms decide in transformers)."""
        m = self.c["method"]
        rule = {"ar": "autoregressive", "sd": m["criterion"], "sd_dm": m["dm_criterion"]}
        out = []
        for arm in m["arms"]:
            ours = loop_arm(arm)
            if ours in rule:
                out.append((rule[ours], "llamacpp" if arm in GGUF_ARMS else "hf"))
        return out

    def samples(self) -> list:
        if self._samples is None:
            self._samples = build(DATASETS, self.c["dataset"]).load()
        return self._samples

    def unit_ids(self) -> list[str]:
        reps = int(self.c["method"]["timing_repeats"])
        units = [f"{s.sample_id}#{r}" for r in range(reps) for s in self.samples()]
        for B in batch_sizes(self.c)[1:]:
            if B > len(self.samples()):
                raise ConfigError(
                    f"method.batch_sizes holds {B} but dataset {self.c['dataset']['name']} has "
                    f"{len(self.samples())} prompts; allowed: batch sizes <= the number of prompts"
                )
            units += [f"{BATCH_PREFIX}{B}/{r}" for r in range(reps)]
        return units + [f"latency/{k:03d}" for k in range(int(self.c["method"]["latency_repeats"]))]

    def measure(self, todo: Sequence[str], log: Callable[[str], None]) -> Iterator[dict]:
        c, m = self.c, self.c["method"]
        cap = int(c["decoding"]["max_new_tokens"])
        arms = list(m["arms"])
        runner = _Arms(c, log=log)
        by_id = {s.sample_id: s for s in self.samples()}
        index = {s.sample_id: i for i, s in enumerate(self.samples())}
        # untimed warm-up once per session (kernel selection, allocator), on the first prompt's last turn alone
        # (the full prompt's prefill would cost every arm a minute on a CPU)
        first = self.samples()[0]
        warm = replace(first, sample_id=f"{first.sample_id}/warmup", messages=first.messages[-1:])
        for arm in arms:
            runner.run(arm, warm, int(m["warmup_tokens"]))
        log(
            f"[bench] warm-up done; arms {', '.join(arms)}; L={runner.L}, {cap} new tokens, "
            f"dtype {runner.model['dtype']}"
        )
        timer, warm_batches = None, set()
        for uid in todo:
            if uid.startswith(BATCH_PREFIX) and "#" not in uid:  # (prompt units hold '#')
                B, rep = (int(x) for x in uid.removeprefix(BATCH_PREFIX).split("/"))
                # the batch-B engines (KV for B rows) are made and warmed untimed
                if B not in warm_batches:
                    runner.warm_batch(warm, B, int(m["warmup_tokens"]))
                    warm_batches.add(B)
                ours = [a for a in arms if a in BATCHED_ARMS]
                k = rep % len(ours)
                yield runner.batch_line(uid, self.samples()[:B], rep, ours[k:] + ours[:k], cap, log)
                continue
            if uid.startswith("latency/"):
                if timer is None:
                    timer = VerifyTimer(
                        runner.pair.target,
                        L=runner.L,
                        K=int(c["dropmatch"]["K"]),
                        p_drop=float(c["dropmatch"]["p_drop"]),
                        context=int(m["context"]),
                        seed=runner.seed,
                    )
                    timer.time_once()
                yield {
                    "sample_id": uid,
                    "kind": "latency",
                    "seconds": timer.time_once(),
                    "model": runner.model,
                    "loadavg_1min": os.getloadavg()[0],
                }
                continue
            sid, rep = uid.rsplit("#", 1)
            k = (index[sid] + int(rep)) % len(arms)
            yield runner.prompt_line(uid, by_id[sid], int(rep), arms[k:] + arms[:k], cap, log)

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        arms = list(self.c["method"]["arms"])
        return {
            **summarize_bench(
                lines, arms, L=int(self.c["L"]), context=int(self.c["method"]["context"])
            ),
            **summarize_batches(lines, arms),
        }


class _Arms:
    """The loaded pair and every arm's decoder for one benchmark session.

    ``run(arm, sample, tokens)`` decodes ``sample`` with one arm (:mod:`runners.measure.bench_arms`): ``hf_*``
    arms through transformers ``generate`` on the chat-template prompt ids, ``lc_*`` arms through the llama.cpp
    loop on the same pair's GGUF files (without prefix reuse, as the other arms), ``f32_*`` arms through our
    backend on a float32 copy of the pair, the others through our backend on the pair, each with the arm's rule
    (``ar``: L = 0). ``engines`` / ``pairs`` / ``configs`` are keyed by the engine prefix
    (:mod:`runners.records.bench_arm_names`).
    """

    def __init__(self, c: Mapping[str, Any], log: Callable[[str], None]) -> None:
        m = c["method"]
        self.L, self.seed = int(c["L"]), int(c["decoding"]["seed"])
        self.arms = list(m["arms"])
        # each copy of the pair loads its draft only where one of its arms drafts (llama.cpp reads its own files)
        drafts = {engine_of(a) for a in self.arms if a in SPEC_ARMS and a not in GGUF_ARMS}
        self.pair = load_pair(c["pair"], need_draft="" in drafts, log=log)
        self.configs = {"": dict(c["backend"])}
        self.engines = {"": build(BACKENDS, self.configs[""], pair=self.pair)}
        self.pairs = {"": self.pair}
        if any(a in FP32_ARMS for a in m["arms"]):
            # a second copy of the pair in float32, beside the first: the f32_* arms run the same loop on it
            self.pairs["f32_"] = load_pair(
                {**c["pair"], "dtype": "float32"}, need_draft="f32_" in drafts, log=log
            )
            self.configs["f32_"] = self.configs[""]
            self.engines["f32_"] = build(BACKENDS, self.configs["f32_"], pair=self.pairs["f32_"])
        self.gguf = None
        if any(a in GGUF_ARMS for a in m["arms"]):
            lc_cfg = {**backend_defaults("llamacpp"), "prefix_caching": False, "batch_size": 1}
            self.configs["lc_"] = lc_cfg
            self.gguf = build(BACKENDS, lc_cfg, pair=self.pair)
            self.engines["lc_"], self.pairs["lc_"] = self.gguf, self.pair
        self._batched: dict[tuple[str, int], Any] = {}
        dm = c["dropmatch"]
        specs = {
            "ar": {"method": {"criterion": "autoregressive"}, "dropmatch": dm},
            "sd": {"method": {"criterion": m["criterion"]}, "dropmatch": dm},
            "sd_dm": {
                "method": {"criterion": m["dm_criterion"], "uses_dropmatch": True},
                "dropmatch": dm,
            },
        }
        self.rules = {arm: (build_rule(cfg), head_spec(cfg)) for arm, cfg in specs.items()}
        tok = self.pair.tokenizer
        self.eos = sorted(
            end_of_sequence_ids(
                tok, getattr(self.pair.target.generation_config, "eos_token_id", None)
            )
        )
        self.pad = tok.pad_token_id if tok.pad_token_id is not None else self.eos[0]
        isa = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "asimd", "sve")
        cap = isa_cap()
        self.model = {
            "dtype": str(self.pair.target.dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(),
            # the physics a ratio was measured in (a cap is named: its host is not such a machine)
            "isa": [f for f in isa if f in cpu_flags()]
            + ([f"({CAP_ENV}={cap} stand-in)"] if cap != "native" else []),
        }
        if "f32_" in self.pairs:
            self.model["f32_dtype"] = str(self.pairs["f32_"].target.dtype).removeprefix("torch.")
        if self.gguf is not None:
            self.model["gguf"] = {
                "precision": gguf_precision(c["pair"]["target"]),
                "threads": self.gguf.n_threads,
            }

    def prompt_ids(self, sample: Any) -> list[int]:
        # the ids every backend sends (a pre-filled answer start is continued, the pair's template options)
        return prompt_token_ids(
            self.pair.tokenizer, sample.messages, getattr(self.pair, "chat_template_kwargs", None)
        )

    def run(self, arm: str, sample: Any, tokens: int) -> dict:
        if arm.startswith("hf_"):
            return hf_generate(
                self.pair.target,
                self.prompt_ids(sample),
                eos_ids=self.eos,
                pad_id=self.pad,
                max_new_tokens=tokens,
                draft=self.pair.draft if arm == "hf_assisted" else None,
                L=self.L,
            )
        ours = loop_arm(arm)
        return our_generate(
            self.engines[engine_of(arm)],
            sample,
            L=0 if ours == "ar" else self.L,
            rule=self.rules[ours],
            max_new_tokens=tokens,
            seed=self.seed,
        )

    def batch_backend(self, arm: str, B: int) -> Any:
        """The arm's engine built with ``batch_size`` = B on the loaded pair (once per engine and B).

        Building is cheap: the HF loop holds the loaded models; the llama.cpp loop shares its loaded GGUF weights
        (``runners.backends.llamacpp_context.GGUFModel.load`` caches them per file) and makes a context of B
        sequences per model on its first decode (KV cache: B x ``n_ctx`` cells per model, besides the batch-1
        contexts).
        """
        engine = engine_of(arm)
        if (engine, B) not in self._batched:
            self._batched[engine, B] = build(
                BACKENDS, {**self.configs[engine], "batch_size": B}, pair=self.pairs[engine]
            )
        return self._batched[engine, B]

    def run_batch(self, arm: str, samples: Sequence[Any], tokens: int) -> dict:
        """``samples`` decoded together by one of our arms (:func:`our_generate_batch`)."""
        ours = loop_arm(arm)
        return our_generate_batch(
            self.batch_backend(arm, len(samples)),
            samples,
            L=0 if ours == "ar" else self.L,
            rule=self.rules[ours],
            max_new_tokens=tokens,
            seed=self.seed,
        )

    def warm_batch(self, warm: Any, B: int, tokens: int) -> None:
        """Untimed: each batched arm on B copies of the warm-up prompt (its engine's batch-B state made)."""
        copies = [replace(warm, sample_id=f"{warm.sample_id}/{i}") for i in range(B)]
        for arm in self.arms:
            if arm in BATCHED_ARMS:
                self.run_batch(arm, copies, tokens)

    def batch_line(
        self,
        uid: str,
        samples: Sequence[Any],
        rep: int,
        order: list[str],
        cap: int,
        log: Callable[[str], None],
    ) -> dict:
        """Each arm of ``order`` on ``samples`` decoded together, one arm after the other: the unit's line."""
        results = {arm: self.run_batch(arm, samples, cap) for arm in order}
        log(
            f"[bench] {uid}: "
            + ", ".join(f"{a} {r['tokens'] / r['seconds']:.2f}" for a, r in results.items())
            + f" tok/s aggregate over {len(samples)} prompts decoded together"
        )
        return {
            "sample_id": uid,
            "kind": "batch",
            "batch_size": len(samples),
            "prompt_ids": [s.sample_id for s in samples],
            "repeat": rep,
            "order": order,
            "arms": results,
            "model": self.model,
            "loadavg_1min": os.getloadavg()[0],
        }

    def prompt_line(
        self,
        uid: str,
        sample: Any,
        rep: int,
        order: list[str],
        cap: int,
        log: Callable[[str], None],
    ) -> dict:
        """Every arm on ``sample`` back to back in ``order``: the unit's line."""
        results = {arm: self.run(arm, sample, cap) for arm in order}
        log(
            f"[bench] {uid}: "
            + ", ".join(f"{a} {r['tokens'] / r['seconds']:.2f}" for a, r in results.items())
            + " tok/s (prefill included)"
        )
        return {
            "sample_id": uid,
            "kind": "prompt",
            "prompt_id": sample.sample_id,
            "repeat": rep,
            "order": order,
            "prompt_tokens": len(self.prompt_ids(sample)),
            "arms": results,
            "model": self.model,
            "loadavg_1min": os.getloadavg()[0],
        }
