"""The side-by-side benchmark (``./reproduce.sh bench``): one process, one pair, the same prompts, every arm.

Arms (``method.arms``): ``ar`` (our loop, L = 0), ``hf_ar`` (transformers ``generate``, greedy), ``sd`` (our
loop, ``method.criterion``: greedy exact match), ``hf_assisted`` (transformers assisted generation, the draft
as assistant, L candidates per round), ``sd_dm`` (our loop, ``method.dm_criterion`` = DropMatch with
``dropmatch.K`` / ``p_drop``); ``lc_ar`` / ``lc_sd`` / ``lc_sd_dm``: the same three through the llama.cpp loop
(``backend=llamacpp``: the pair's GGUF files at their own precision, same prompts, same process). All greedy, to ``decoding.max_new_tokens`` or EOS, no stop strings, no prefix
caching (every arm prefills the whole prompt; see :mod:`runners.measure.bench_arms` for what is timed).

Units: ``<sample_id>#<repeat>`` -- every arm on that prompt, back to back, in an order rotated per prompt and
repeat (machine noise spreads over the arms), then ``latency/<k>`` -- :class:`runners.measure.latency.VerifyTimer`
on the loaded target at this L, K, p_drop (verify(L+1)/decode, DM decision overhead share of the verify
pass). Models load once per process; each session starts with an untimed warm-up of every arm (on the first
prompt's last turn alone, ``method.warmup_tokens`` tokens).
The summary (``bench/*``) is computed from the lines by :mod:`runners.measure.bench_summary`.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from runners.measure.base import MEASUREMENTS, positive_int
from runners.measure.bench_summary import SPEC_ARMS
from runners.measure.latency import VerifyTimer, check_common
from runners.validate import ConfigError

ARMS = ("ar", "hf_ar", "sd", "hf_assisted", "sd_dm", "lc_ar", "lc_sd", "lc_sd_dm")
GGUF_ARMS = ("lc_ar", "lc_sd", "lc_sd_dm")  # the llama.cpp loop: lc_<our arm>


@MEASUREMENTS.register("bench")
class BenchMeasurement:
    """The benchmark run for one pair and dtype (sweep ``pair.dtype`` for both)."""

    def __init__(self, c: Mapping[str, Any]) -> None:
        self.c = c
        self._samples: list | None = None

    @staticmethod
    def check(c: Mapping[str, Any]) -> None:
        m = c["method"]
        check_common(c)
        positive_int(c, "timing_repeats")
        positive_int(c, "latency_repeats", minimum=0)
        positive_int(c, "warmup_tokens")
        arms = list(m.get("arms") or [])
        bad = [a for a in arms if a not in ARMS]
        if bad or "ar" not in arms or len(set(arms)) != len(arms):
            raise ConfigError(
                f"method.arms={arms!r} is invalid; allowed: distinct names from {', '.join(ARMS)}, "
                "including ar (the reference every output is compared with)"
            )
        if float(c["decoding"]["temperature"]) != 0.0:
            raise ConfigError(
                f"decoding.temperature={c['decoding']['temperature']} is invalid for method=bench; "
                "allowed: 0 (greedy: SD and assisted outputs must equal AR's)"
            )
        if c["backend"]["name"] != "hf" or c["backend"].get("prefix_caching"):
            raise ConfigError(
                f"backend={c['backend']['name']} prefix_caching={c['backend'].get('prefix_caching')} "
                "is invalid for method=bench; allowed: backend=hf backend.prefix_caching=false "
                "(transformers generate prefills every prompt in full; so must our arms)"
            )

    def samples(self) -> list:
        if self._samples is None:
            import runners.datasets  # noqa: F401
            from runners.registry import DATASETS, build

            self._samples = build(DATASETS, self.c["dataset"]).load()
        return self._samples

    def unit_ids(self) -> list[str]:
        reps = int(self.c["method"]["timing_repeats"])
        units = [f"{s.sample_id}#{r}" for r in range(reps) for s in self.samples()]
        return units + [f"latency/{k:03d}" for k in range(int(self.c["method"]["latency_repeats"]))]

    def measure(self, todo: Sequence[str], log: Callable[[str], None]) -> Iterator[dict]:
        import runners.backends  # noqa: F401  (registration)
        from runners.backends.output import end_of_sequence_ids
        from runners.measure.bench_arms import hf_generate, our_generate
        from runners.models.loader import load_pair
        from runners.registry import BACKENDS, build
        from runners.run import build_rule, head_spec

        c, m = self.c, self.c["method"]
        L, seed, cap = int(c["L"]), int(c["decoding"]["seed"]), int(c["decoding"]["max_new_tokens"])
        arms = list(m["arms"])
        pair = load_pair(c["pair"], need_draft=any(a in SPEC_ARMS for a in arms), log=log)
        backend = build(BACKENDS, c["backend"], pair=pair)
        # the llama.cpp loop on the same pair config (its GGUF files), without prefix reuse like the other arms
        gguf = None
        if any(a in GGUF_ARMS for a in arms):
            from runners.backends.select import backend_defaults

            lc_cfg = {**backend_defaults("llamacpp"), "prefix_caching": False, "batch_size": 1}
            gguf = build(BACKENDS, lc_cfg, pair=pair)
        ar_cfg = {"method": {"criterion": "autoregressive"}, "dropmatch": c["dropmatch"]}
        sd_cfg = {"method": {"criterion": m["criterion"]}, "dropmatch": c["dropmatch"]}
        dm_cfg = {
            "method": {"criterion": m["dm_criterion"], "uses_dropmatch": True},
            "dropmatch": c["dropmatch"],
        }
        rules = {
            "ar": (build_rule(ar_cfg), head_spec(ar_cfg)),
            "sd": (build_rule(sd_cfg), head_spec(sd_cfg)),
            "sd_dm": (build_rule(dm_cfg), head_spec(dm_cfg)),
        }
        eos = sorted(
            end_of_sequence_ids(
                pair.tokenizer, getattr(pair.target.generation_config, "eos_token_id", None)
            )
        )
        pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else eos[0]

        def prompt_ids(sample: Any) -> list[int]:
            ids = pair.tokenizer.apply_chat_template(
                sample.messages, add_generation_prompt=True, tokenize=True
            )
            return [int(i) for i in (ids["input_ids"] if hasattr(ids, "keys") else ids)]

        def run_arm(arm: str, sample: Any, tokens: int) -> dict:
            if arm.startswith("hf_"):
                return hf_generate(
                    pair.target,
                    prompt_ids(sample),
                    eos_ids=eos,
                    pad_id=pad,
                    max_new_tokens=tokens,
                    draft=pair.draft if arm == "hf_assisted" else None,
                    L=L,
                )
            ours = arm.removeprefix("lc_")
            return our_generate(
                gguf if arm in GGUF_ARMS else backend,
                sample,
                L=0 if ours == "ar" else L,
                rule=rules[ours],
                max_new_tokens=tokens,
                seed=seed,
            )

        model = {
            "dtype": str(pair.target.dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(),
        }
        from runners.models.dtype import cpu_flags

        isa = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "asimd", "sve")
        model["isa"] = [f for f in isa if f in cpu_flags()]  # the physics a ratio was measured in
        if gguf is not None:
            from runners.models.identity import gguf_precision

            model["gguf"] = {
                "precision": gguf_precision(c["pair"]["target"]),
                "threads": gguf.n_threads,
            }
        by_id = {s.sample_id: s for s in self.samples()}
        index = {s.sample_id: i for i, s in enumerate(self.samples())}
        # untimed warm-up once per session (kernel selection, allocator), on the first prompt's last turn alone
        # (the full prompt's prefill would cost every arm a minute on a CPU)
        first = self.samples()[0]
        warm = replace(first, sample_id=f"{first.sample_id}/warmup", messages=first.messages[-1:])
        for arm in arms:
            run_arm(arm, warm, int(m["warmup_tokens"]))
        log(
            f"[bench] warm-up done; arms {', '.join(arms)}; L={L}, {cap} new tokens, dtype {model['dtype']}"
        )
        timer = None
        for uid in todo:
            if uid.startswith("latency/"):
                if timer is None:
                    timer = VerifyTimer(
                        pair.target,
                        L=L,
                        K=int(c["dropmatch"]["K"]),
                        p_drop=float(c["dropmatch"]["p_drop"]),
                        context=int(m["context"]),
                        seed=seed,
                    )
                    timer.time_once()
                yield {
                    "sample_id": uid,
                    "kind": "latency",
                    "seconds": timer.time_once(),
                    "model": model,
                    "loadavg_1min": os.getloadavg()[0],
                }
                continue
            sid, rep = uid.rsplit("#", 1)
            sample = by_id[sid]
            k = (index[sid] + int(rep)) % len(arms)
            order = arms[k:] + arms[:k]
            results = {arm: run_arm(arm, sample, cap) for arm in order}
            log(
                f"[bench] {uid}: "
                + ", ".join(f"{a} {r['tokens'] / r['seconds']:.2f}" for a, r in results.items())
                + " tok/s (prefill included)"
            )
            yield {
                "sample_id": uid,
                "kind": "prompt",
                "prompt_id": sid,
                "repeat": int(rep),
                "order": order,
                "prompt_tokens": len(prompt_ids(sample)),
                "arms": results,
                "model": model,
                "loadavg_1min": os.getloadavg()[0],
            }

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        from runners.measure.bench_summary import summarize_bench

        return summarize_bench(
            lines,
            list(self.c["method"]["arms"]),
            L=int(self.c["L"]),
            context=int(self.c["method"]["context"]),
        )
