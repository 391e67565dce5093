"""Run a project acceptance rule (DropMatch, greedy match, rejection) inside vLLM v1's verify step.

Paper: DropMatch (arXiv 2603.03333) Sec. 3, Algorithm 1; vLLM v1 ``rejection_sampler.py`` vocabulary.

How it plugs in (vLLM 0.32.x only; :func:`check_vllm_version` refuses anything else). Everything runs
inside the worker process through vLLM's own extension point ``worker_extension_cls`` (this module's
:class:`DropMatchWorkerExtension`, installed by ``llm.collective_rpc("dropmatch_install", ...)``). No
vLLM class is modified; four attributes of the live worker objects are replaced per instance:

1. ``runner.model.compute_logits`` (target): wrapped to keep its input, the final hidden states after
   the last norm ``[num_logits, d]``, row-aligned with the logits the runner hands the sampler.
2. ``runner.drafter.model.compute_logits`` (draft): wrapped to keep a copy of each draft step's logits
   ``[batch, V]`` while ``drafter.propose`` runs (one call per draft position). For ``eagle3`` heads with
   a reduced draft vocabulary, vLLM's ``Eagle3LlamaForCausalLM.compute_logits`` already scatters them
   into the target vocabulary (-inf elsewhere), so ``draft_probs`` are in target-vocab space.
3. ``runner.drafter.take_last_draft_probs``: returns ``softmax(draft_logits / T')`` ``[batch, L, V]``
   (T' = T, or 1 when greedy, as in the HF backend), only when the rule needs ``draft_probs`` or a trace
   is recorded. vLLM itself stores it keyed by request id and passes the rows of the verified drafts to
   the sampler as ``draft_probs`` ``[num_tokens, V]`` (``GPUModelRunner._get_spec_decode_draft_probs``).
4. ``runner.rejection_sampler``: replaced by :class:`DropMatchSampler`, a ``RejectionSampler`` subclass
   whose ``forward(metadata, draft_probs, logits, sampling_metadata)`` makes the decision with the
   project's functions (:func:`criteria.dropout_heads.dropout_head_logits` and the registered rule) per
   request, exactly as the HF backend does per sample and round, and returns vLLM's output layout
   ``[B, max_spec_len + 1]`` int32 padded with ``PLACEHOLDER_TOKEN_ID``. vLLM derives everything else
   from that tensor (accepted counts, KV-cache slots, the drafter's next input, the scheduler's
   ``num_accepted_tokens_per_pos`` metrics), so those stay right without further hooks.

RNG: one CPU ``torch.Generator`` per request, seeded with ``SamplingParams.seed`` (the backend passes
``runners.backends.hf_loop.sample_seed(seed, sample_id)``) and used, per round, first by
``dropout_head_logits`` on ``N = n + 1`` positions (n <= L drafts this round), then by the rule; the HF backend consumes its
per-sample generator in the same order, so at T = 0 both backends decide identically given the same
hidden states. (At T > 0 the draft tokens themselves are sampled by vLLM's RNG, so runs differ.)

Limits: the dropout heads use the unquantised LM head weight ``lm_head.weight[:V]`` (vocab padding cut)
with no logit scale or soft cap. Under TP > 1 each rank holds a vocab shard ``[V_padded/tp, d]``: the
masks (drawn from a generator seeded identically on all ranks) are applied to the replicated hidden state,
the shard multiplied, and the shards all-gathered (as ``LogitsProcessor._gather_logits``), see
:func:`_heads_full`. Quantised heads (which would need ``quant_method.apply``) are refused with a clear
error rather than silently approximated. Logprobs, penalties and bad words are not supported in the
hooked verify step (refused).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

SUPPORTED_VLLM = "0.32"
SUPPORTED_METHODS = ("draft_model", "eagle3")


class UnsupportedVLLMError(RuntimeError):
    """The installed vLLM is not the version whose internals this hook was written against."""


def check_vllm_version(version: str | None = None) -> str:
    """Return the installed vLLM version; raise :class:`UnsupportedVLLMError` unless it is 0.32.x."""
    if version is None:
        import vllm

        version = vllm.__version__
    if version.split("+")[0].split(".")[:2] != SUPPORTED_VLLM.split("."):
        raise UnsupportedVLLMError(
            f"vLLM {version} is installed, but runners/backends/vllm_dropmatch_hook.py hooks the verify step of "
            f"vLLM {SUPPORTED_VLLM}.x only (GPUModelRunner.rejection_sampler / _sample, drafter.propose / "
            f"take_last_draft_probs, model.compute_logits). Install it with runners/backends/install_vllm.sh."
        )
    return version


check_vllm_version()

from vllm.v1.outputs import SamplerOutput  # noqa: E402
from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID, RejectionSampler  # noqa: E402

from criteria.base import VerifyInputs  # noqa: E402
from criteria.common import target_tokens  # noqa: E402
from criteria.registry import CRITERIA  # noqa: E402
import criteria.rules  # noqa: E402,F401  (registers every rule)


@dataclass
class RoundRecord:
    """One verification round of one request, as decided inside vLLM (for tests and traces).

    ``inputs`` (only when recording inputs): ``hidden`` ``[L+1, d]``, ``draft_token_ids`` ``[1, L]``,
    ``draft_probs`` ``[1, L, V]`` or None, ``temperature``, ``generator_state`` (before the round).
    """

    req_id: str
    num_draft_tokens: int
    num_accepted: int
    next_token_id: int
    accept_mask: list[bool]
    trace: dict[str, list] | None = None
    inputs: dict[str, Any] | None = None


@dataclass
class HookState:
    """Per-worker state of the installed hook.

    Attributes:
        criterion: the rule object (``CRITERIA``), e.g. ``DropMatchJS(K=5, p_drop=0.3)``.
        default_seed: generator seed for requests without ``SamplingParams.seed``.
        record_inputs / record_trace: keep each round's inputs (hidden states, drafts, generator state) / the
            rule's per-position trace in :class:`RoundRecord` (tests, Tables 2-3).
        generators: one CPU ``torch.Generator`` per live request id.
        rounds: rounds decided since the last ``dropmatch_take_rounds``.
        target_hidden: the target's final hidden states ``[num_logits, d]`` captured from ``compute_logits``
            in the current verify step.
        draft_logits: the draft's logits per proposal step, each ``[B, V]`` (captured only when needed).
        capturing_draft: True while the drafter proposes and the rule (or the trace) needs draft probabilities.
        criterion_s: seconds spent deciding rounds (heads + rule), summed over the hook's life.
    """

    criterion: Any
    default_seed: int = 0
    record_inputs: bool = False
    record_trace: bool = False
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    rounds: list[RoundRecord] = field(default_factory=list)
    target_hidden: torch.Tensor | None = None
    draft_logits: list[torch.Tensor] = field(default_factory=list)
    capturing_draft: bool = False
    criterion_s: float = 0.0


def _lm_head_weight(model: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """This rank's LM head weight ``[V_padded / tp, d]`` (and bias); refuses quantised heads and scaled logits.

    Under tensor parallelism (``lm_head.tp_size > 1``) it is the rank's vocabulary shard; :func:`_heads_full`
    gathers the heads' logits across the TP group as vLLM's ``LogitsProcessor`` gathers the target logits.

    Raises:
        NotImplementedError: no plain ``lm_head.weight``, a quantised head, a logit scale or soft cap.
    """
    lm_head = getattr(model, "lm_head", None)
    if lm_head is None or not hasattr(lm_head, "weight"):
        raise NotImplementedError(f"{type(model).__name__} has no plain lm_head.weight; DropMatch heads need it")
    qm = type(getattr(lm_head, "quant_method", None)).__name__
    if qm not in ("UnquantizedEmbeddingMethod", "NoneType"):
        raise NotImplementedError(f"DropMatch hook: quantised LM head ({qm}) is not supported")
    lp = getattr(model, "logits_processor", None)
    if lp is not None and (getattr(lp, "scale", 1.0) != 1.0 or getattr(lp, "soft_cap", None) is not None):
        raise NotImplementedError("DropMatch hook: logit scale / soft cap are not supported")
    return lm_head.weight, getattr(lm_head, "bias", None)


class DropMatchSampler(RejectionSampler):
    """``RejectionSampler`` whose decision is a project acceptance rule (``criteria.registry.CRITERIA``).

    Paper: DropMatch Algorithm 1 (DropMatch rules); Leviathan et al. 2023 Alg. 1 (``rejection``).

    Args:
        runner: vLLM's ``GPUModelRunner`` / ``CPUModelRunner`` (request table, input batch order).
        state: the :class:`HookState` shared with the capture wrappers.
        base: the sampler it replaces (its ``sampler`` and config are reused).
    """

    def __init__(self, runner: Any, state: HookState, base: RejectionSampler) -> None:
        torch.nn.Module.__init__(self)
        self.sampler = base.sampler
        self.runner = runner
        self.state = state

    def _generator(self, req_id: str) -> torch.Generator:
        gen = self.state.generators.get(req_id)
        if gen is None:
            seed = self.runner.requests[req_id].sampling_params.seed
            gen = torch.Generator().manual_seed(int(self.state.default_seed if seed is None else seed))
            self.state.generators[req_id] = gen
        return gen

    def forward(
        self,
        metadata: Any,
        draft_probs: torch.Tensor | None,  # [num_tokens, V] or None
        logits: torch.Tensor,  # [num_tokens + B, V]
        sampling_metadata: Any,
    ) -> SamplerOutput:
        """Decide each request's round with the rule (Algorithm 1 for ``dropmatch_js``, Eq. 4 for naive).

        Args:
            metadata: vLLM's ``SpecDecodeMetadata`` (draft token ids ``[num_tokens]`` int, per-request draft
                counts, target / bonus logits indices).
            draft_probs: the draft's probabilities ``[num_tokens, V]`` float (captured by the hook), or None.
            logits: the target's logits ``[num_tokens + B, V]`` float (B = requests in the batch).
            sampling_metadata: vLLM's ``SamplingMetadata`` (temperature per request; penalties must be off).

        Returns:
            ``SamplerOutput`` with ``sampled_token_ids`` ``[B, max_spec_len + 1]`` int32: accepted drafts, then the
            correction / bonus token, then ``PLACEHOLDER_TOKEN_ID`` (vLLM's layout).

        Raises:
            NotImplementedError: logprobs, penalties or bad words requested.
            RuntimeError: the captured hidden states do not match the logits, or the rule needs ``draft_probs``
                and none were captured.
        """
        st, crit = self.state, self.state.criterion
        if sampling_metadata.max_num_logprobs is not None:
            raise NotImplementedError("logprobs are not supported with the DropMatch verify hook")
        if not sampling_metadata.no_penalties or sampling_metadata.bad_words_token_ids:
            raise NotImplementedError("penalties / bad words are not supported with the DropMatch verify hook")
        hidden = st.target_hidden
        if hidden is None or hidden.shape[0] != logits.shape[0]:
            raise RuntimeError(
                f"captured target hidden states {None if hidden is None else tuple(hidden.shape)} do not match "
                f"the logits {tuple(logits.shape)}; the compute_logits capture is out of step"
            )
        t0 = time.perf_counter()
        K = int(getattr(crit, "num_heads", 0) or 0)
        need_q = bool(getattr(crit, "needs_draft_probs", False)) or st.record_trace
        V = logits.shape[-1]
        weight, bias = _lm_head_weight(self.runner.model) if K > 0 else (None, None)
        B = len(metadata.num_draft_tokens)
        out = torch.full((B, metadata.max_spec_len + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=logits.device)
        cu = metadata.cu_num_draft_tokens.tolist()
        target_idx = metadata.target_logits_indices.long()
        bonus_idx = metadata.bonus_logits_indices.long()
        req_ids = self.runner.input_batch.req_ids
        for i in range(B):
            n = int(metadata.num_draft_tokens[i])
            start = cu[i] - n
            rows = torch.cat([target_idx[start : cu[i]], bonus_idx[i : i + 1]])  # [n+1]
            req_id = req_ids[i]
            sp = self.runner.requests[req_id].sampling_params
            T = float(sp.temperature) if sp.temperature and sp.temperature > 1e-5 else 0.0
            gen = self._generator(req_id)
            gen_state = gen.get_state() if st.record_inputs else None
            if n == 0:  # no drafts this round (e.g. near max_model_len): the target's own token, no heads
                out[i, 0] = int(target_tokens(logits[rows[0]].float(), T, gen))
                continue
            h = hidden[rows]  # [n+1, d]
            head_logits = None
            if K > 0:
                heads = _heads_full(h, weight, bias, crit, gen, V, self.runner.model)  # [n+1, 1+K, V]
                target_logits, head_logits = heads[:, 0].float(), heads[:, 1:].float()
            else:
                target_logits = logits[rows].float()  # [n+1, V]
            drafts = metadata.draft_token_ids[start : cu[i]].long()[None]  # [1, n]
            q = None
            if need_q:
                if draft_probs is None:
                    raise RuntimeError("the rule needs draft_probs but vLLM passed none (draft capture failed)")
                q = draft_probs[start : cu[i]].float()[None]  # [1, n, V]
            res = crit(
                VerifyInputs(
                    draft_token_ids=drafts,
                    target_logits=target_logits[None],
                    draft_probs=q,
                    head_logits=None if head_logits is None else head_logits[None],
                    temperature=T,
                    generator=gen,
                ),
                trace=st.record_trace,
            )
            a, nxt = int(res.num_accepted[0]), int(res.next_token_ids[0])
            out[i, :a] = drafts[0, :a].to(torch.int32)
            out[i, a] = nxt
            st.rounds.append(
                RoundRecord(
                    req_id=req_id, num_draft_tokens=n, num_accepted=a, next_token_id=nxt,
                    accept_mask=res.accept_mask[0].tolist(),
                    trace=_trace_json(res.trace, min(a + 1, n)) if res.trace else None,
                    inputs=dict(hidden=h.clone(), draft_token_ids=drafts.clone(), draft_probs=q,
                                temperature=T, generator_state=gen_state) if st.record_inputs else None,
                )
            )
        st.criterion_s += time.perf_counter() - t0
        return SamplerOutput(sampled_token_ids=out, logprobs_tensors=None)


def _dropout_heads(h, weight, bias, crit, gen) -> torch.Tensor:
    from criteria.dropout_heads import dropout_head_logits

    return dropout_head_logits(h, weight, bias, num_heads=int(crit.num_heads), p_drop=float(crit.p_drop), generator=gen)


def _heads_full(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, crit: Any, gen: torch.Generator,
                V: int, model: Any) -> torch.Tensor:
    """Plain + K dropout heads over the whole vocabulary, ``[N, 1+K, V]`` (Eq. 1-3).

    TP size 1: ``weight[:V]`` (vocab padding cut). TP size > 1: every rank applies the same masks (its
    generator is seeded and consumed identically on all ranks, and the hidden states are replicated) to its
    vocab shard ``[V_padded / tp, d]``, then the shards' logits are all-gathered along the vocabulary and the
    padding cut, exactly as ``LogitsProcessor._get_logits`` does for the target logits.
    """
    tp = int(getattr(getattr(model, "lm_head", None), "tp_size", 1) or 1)
    if tp == 1:
        return _dropout_heads(h, weight[:V], None if bias is None else bias[:V], crit, gen)
    from vllm.distributed import tensor_model_parallel_all_gather

    shard = _dropout_heads(h, weight, bias, crit, gen)  # [N, 1+K, V_padded / tp]
    return tensor_model_parallel_all_gather(shard.contiguous(), dim=-1)[..., :V]


def _trace_json(trace: dict[str, torch.Tensor], upto: int) -> dict[str, list]:
    """Same layout as the HF backend's trace: per-position lists of the first ``upto`` positions."""
    return {k: v[0, :upto].tolist() for k, v in trace.items() if torch.is_tensor(v) and v.dim() >= 2}


def install(runner: Any, criterion_name: str, criterion_kwargs: dict, *, default_seed: int = 0,
            record_inputs: bool = False, record_trace: bool = False) -> HookState:
    """Install the hook on a live model runner (see the module docstring). Idempotent per runner.

    Args:
        runner: vLLM's GPU/CPU model runner of a worker (``worker.model_runner``).
        criterion_name: a ``CRITERIA`` key (``greedy_match``, ``rejection``, ``dropmatch_naive``, ``dropmatch_js``).
        criterion_kwargs: the rule's arguments, e.g. ``{"K": 5, "p_drop": 0.3}``.
        default_seed: generator seed for requests without ``SamplingParams.seed``.
        record_inputs / record_trace: see :class:`HookState`.

    Returns:
        The new :class:`HookState` (also at ``runner._dropmatch_state``).

    Raises:
        UnsupportedVLLMError: the installed vLLM is not 0.32.x (:func:`check_vllm_version`).
        NotImplementedError: no speculative config or a method outside ``SUPPORTED_METHODS``; a DropMatch rule on
            a target whose LM head is quantised, has no plain weight, or scales / soft-caps its logits.
        criteria.registry.UnknownNameError: an unknown ``criterion_name`` (the message lists the allowed ones).
    """
    check_vllm_version()
    spec = runner.speculative_config
    if spec is None or spec.method not in SUPPORTED_METHODS:
        raise NotImplementedError(
            f"DropMatch hook supports speculative methods {SUPPORTED_METHODS}; got "
            f"{None if spec is None else spec.method!r}"
        )
    criterion = CRITERIA.get(criterion_name)(**criterion_kwargs)
    state = HookState(criterion=criterion, default_seed=default_seed, record_inputs=record_inputs,
                      record_trace=record_trace)
    if int(getattr(criterion, "num_heads", 0) or 0) > 0:
        _lm_head_weight(runner.model)  # refuse unsupported heads now, not mid-generation
    if hasattr(runner, "_dropmatch_state"):  # wrappers already in place: swap the state (and sampler)
        if runner._dropmatch_state is None:
            runner._dropmatch_native_sampler = runner.rejection_sampler
            runner.rejection_sampler = DropMatchSampler(runner, state, runner.rejection_sampler)
        runner._dropmatch_state = state
        runner.rejection_sampler.state = state
        return state
    runner._dropmatch_state = state

    target_compute_logits = runner.model.compute_logits

    def capture_target(hidden_states, *args, **kwargs):
        if runner._dropmatch_state is not None:
            runner._dropmatch_state.target_hidden = hidden_states
        return target_compute_logits(hidden_states, *args, **kwargs)

    runner.model.compute_logits = capture_target

    drafter = runner.drafter
    draft_compute_logits = drafter.model.compute_logits

    def capture_draft(hidden_states, *args, **kwargs):
        logits = draft_compute_logits(hidden_states, *args, **kwargs)
        st = runner._dropmatch_state
        if st is not None and st.capturing_draft:
            st.draft_logits.append(logits.detach().clone())  # vLLM divides logits by T in place later
        return logits

    drafter.model.compute_logits = capture_draft
    propose = drafter.propose

    def propose_and_capture(*args, **kwargs):
        st = runner._dropmatch_state
        if st is None:
            return propose(*args, **kwargs)
        st.draft_logits = []
        st.capturing_draft = bool(getattr(st.criterion, "needs_draft_probs", False)) or st.record_trace
        try:
            return propose(*args, **kwargs)
        finally:
            st.capturing_draft = False

    drafter.propose = propose_and_capture

    def take_last_draft_probs():
        st = runner._dropmatch_state
        if st is None or not st.draft_logits:
            return None
        logits = torch.stack(st.draft_logits, dim=1).float()  # [batch, L, V]
        st.draft_logits = []
        temps = []
        for req_id in runner.input_batch.req_ids[: logits.shape[0]]:
            t = runner.requests[req_id].sampling_params.temperature or 0.0
            temps.append(t if t > 1e-5 else 1.0)
        temps = torch.tensor(temps, dtype=torch.float32, device=logits.device).view(-1, 1, 1)
        return torch.softmax(logits / temps, dim=-1).contiguous()  # [batch, L, V]

    drafter.take_last_draft_probs = take_last_draft_probs
    runner._dropmatch_native_sampler = runner.rejection_sampler
    runner.rejection_sampler = DropMatchSampler(runner, state, runner.rejection_sampler)
    return state


def uninstall(runner: Any) -> None:
    """Give the verify step back to vLLM's own ``RejectionSampler`` (capture wrappers stay, idle)."""
    if getattr(runner, "_dropmatch_state", None) is None:
        return
    runner.rejection_sampler = runner._dropmatch_native_sampler
    del runner._dropmatch_native_sampler
    state = runner._dropmatch_state
    state.record_trace = False
    state.criterion = _Idle()
    runner._dropmatch_state = None


class _Idle:
    num_heads = 0
    needs_draft_probs = False


class DropMatchWorkerExtension:
    """Methods mixed into vLLM's worker (``LLM(worker_extension_cls=...)``), called via ``collective_rpc``."""

    def dropmatch_install(self, criterion_name: str, criterion_kwargs: dict, default_seed: int = 0,
                          record_inputs: bool = False, record_trace: bool = False) -> str:
        """:func:`install` the rule on this worker; returns the rule's repr."""
        install(self.model_runner, criterion_name, criterion_kwargs, default_seed=default_seed,
                record_inputs=record_inputs, record_trace=record_trace)
        return repr(self.model_runner._dropmatch_state.criterion)

    def dropmatch_uninstall(self) -> None:
        """Put vLLM's own rejection sampler back (the wrappers stay, inactive)."""
        uninstall(self.model_runner)

    def dropmatch_take_rounds(self) -> list[RoundRecord]:
        """Return and clear the recorded rounds (and forget finished requests' generators)."""
        st = getattr(self.model_runner, "_dropmatch_state", None)
        if st is None:
            return []
        rounds, st.rounds = st.rounds, []
        live = set(self.model_runner.requests)
        for req_id in list(st.generators):
            if req_id not in live:
                del st.generators[req_id]
        return rounds

    def dropmatch_lm_head(self) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """The target LM head weight / bias used for the heads, and the vocabulary size V (tests)."""
        w, b = _lm_head_weight(self.model_runner.model)
        return w.detach().clone(), None if b is None else b.detach().clone(), self.model_runner.model_config.get_vocab_size()

    def dropmatch_criterion_s(self) -> float:
        """Seconds this worker has spent deciding rounds (heads + rule) since the hook was installed."""
        st = getattr(self.model_runner, "_dropmatch_state", None)
        return 0.0 if st is None else st.criterion_s
