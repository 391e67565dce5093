"""The verify step that vLLM's runner calls, decided by a project rule: :class:`DropMatchSampler`.

Paper: DropMatch (arXiv 2603.03333) Sec. 3, Algorithm 1; Leviathan et al. 2023 Alg. 1; vLLM v1
``rejection_sampler.py`` vocabulary. Installed by :mod:`runners.backends.vllm_dropmatch_hook` (how it plugs in,
the RNG and the limits are described there). vLLM 0.32.x only: importing this module checks the version
before it touches vLLM's internals.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

SUPPORTED_VLLM = "0.32"


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

import criteria.rules  # noqa: E402,F401  (registers every rule)
from criteria.dropout_heads import HeadSpec, LMHead  # noqa: E402
from criteria.registry import CRITERIA  # noqa: E402
from criteria.verify import trace_to_json, verify_round  # noqa: E402
from runners.backends.round_meter import RoundClock  # noqa: E402
from runners.backends.seeding import make_generator  # noqa: E402


@dataclass
class RoundRecord:
    """One verification round of one request, as decided inside vLLM (for tests and traces).

    ``inputs`` (only when recording inputs): ``hidden`` ``[L+1, d]``, ``draft_token_ids`` ``[1, L]``,
    ``draft_probs`` ``[1, L, V]`` or None, ``temperature``, ``generator_state`` (before the round).
    ``mismatched``: one 0/1 flag per accepted draft (1: it differs from the target's greedy token), as the
    HF loop's; None where the round's decider does not expose the target's argmax (vLLM's own sampler at
    T > 0).
    ``verify_s`` / ``plain_s`` / ``rule_s``: the round meter's seconds of the verify step the round was in, each the
    whole batch's as the HF loop charges a row (:mod:`runners.backends.round_meter`): the target's forward (vLLM's
    ``_model_forward``), then, summed over the step's requests, the plain LM head's float32 logits and what follows
    them in :func:`criteria.verify.verify_round` (dropout heads, rule, escape); None when a part was not timed
    (vLLM's own sampler, or the exact rule with ``p_drop > 0``, which has no plain moment). ``escape``: this
    request's positions per rung of the escape ladder (rungs not reached left out), or None.
    """

    req_id: str
    num_draft_tokens: int
    num_accepted: int
    next_token_id: int
    accept_mask: list[bool]
    mismatched: list[int] | None = None
    trace: dict[str, list] | None = None
    inputs: dict[str, Any] | None = None
    verify_s: float | None = None
    plain_s: float | None = None
    rule_s: float | None = None
    escape: dict[str, int] | None = None


@dataclass
class HookState:
    """Per-worker state of the installed hook.

    Attributes:
        rule: the rule object (``CRITERIA``), e.g. ``DropMatchJS(majority='strict', include_target=False)``; None:
            vLLM's own ``RejectionSampler`` decides and the rounds are only logged.
        heads: the run's :class:`criteria.dropout_heads.HeadSpec` (K, p_drop).
        default_seed: generator seed for requests without ``SamplingParams.seed``.
        record_inputs / record_trace: keep each round's inputs (hidden states, drafts, generator state) / the
            rule's per-position trace in :class:`RoundRecord` (tests, Tables 2-3).
        generators: one ``torch.Generator`` per live request id, on the hidden states' device.
        rounds: rounds decided since the last ``dropmatch_take_rounds``.
        target_hidden: the target's final hidden states ``[num_logits, d]`` captured from ``compute_logits``
            in the current verify step.
        draft_logits: the draft's logits per proposal step, each ``[B, V]`` (captured only when needed).
        capturing_draft: True while the drafter proposes and the rule (or the trace) needs draft probabilities.
        criterion_s: seconds spent deciding rounds (heads + rule), summed over the hook's life.
        forward_s: the target's forward seconds in the current step (the ``_model_forward`` wrapper), or None.
    """

    rule: Any
    heads: HeadSpec = field(default_factory=HeadSpec)
    default_seed: int = 0
    record_inputs: bool = False
    record_trace: bool = False
    generators: dict[str, torch.Generator] = field(default_factory=dict)
    rounds: list[RoundRecord] = field(default_factory=list)
    target_hidden: torch.Tensor | None = None
    draft_logits: list[torch.Tensor] = field(default_factory=list)
    capturing_draft: bool = False
    criterion_s: float = 0.0
    forward_s: float | None = None

    @property
    def needs_draft_probs(self) -> bool:
        """Whether the draft's logits are captured (never for vLLM's own sampler, ``rule`` None)."""
        return self.rule is not None and (
            bool(getattr(self.rule, "needs_draft_probs", False)) or self.record_trace
        )


def _lm_head_weight(model: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """This rank's LM head weight ``[V_padded / tp, d]`` (and bias); refuses quantised heads and scaled logits.

    Raises:
        NotImplementedError: no plain ``lm_head.weight``, a quantised head, a logit scale or soft cap.
    """
    lm_head = getattr(model, "lm_head", None)
    if lm_head is None or not hasattr(lm_head, "weight"):
        raise NotImplementedError(
            f"{type(model).__name__} has no plain lm_head.weight; the hooked verify step "
            f"needs it (plain SD without it: backend.native_verify=true)"
        )
    qm = type(getattr(lm_head, "quant_method", None)).__name__
    if qm not in ("UnquantizedEmbeddingMethod", "NoneType"):
        raise NotImplementedError(
            f"DropMatch hook: quantised LM head ({qm}) is not supported "
            f"(plain SD: backend.native_verify=true)"
        )
    lp = getattr(model, "logits_processor", None)
    if lp is not None and (
        getattr(lp, "scale", 1.0) != 1.0 or getattr(lp, "soft_cap", None) is not None
    ):
        raise NotImplementedError("DropMatch hook: logit scale / soft cap are not supported")
    return lm_head.weight, getattr(lm_head, "bias", None)


def target_lm_head(model: Any, vocab_size: int) -> LMHead:
    """The target's LM head for :func:`criteria.verify.verify_round`, ``V = vocab_size`` (padding cut).

    TP size 1: the whole weight. TP size > 1: this rank's vocab shard and ``gather`` = vLLM's
    ``tensor_model_parallel_all_gather(x, dim=-1)``: every rank applies the same masks (its generator is
    seeded and consumed identically on all ranks, the hidden states are replicated) to its shard, then the
    shards' logits are gathered along the vocabulary, as ``LogitsProcessor._get_logits`` does for the target.
    """
    weight, bias = _lm_head_weight(model)
    tp = int(getattr(getattr(model, "lm_head", None), "tp_size", 1) or 1)
    if tp == 1:
        return LMHead(weight, bias, vocab_size=vocab_size)
    from vllm.distributed import tensor_model_parallel_all_gather

    return LMHead(
        weight,
        bias,
        vocab_size=vocab_size,
        gather=lambda x: tensor_model_parallel_all_gather(x, dim=-1),
    )


class DropMatchSampler(RejectionSampler):
    """``RejectionSampler`` whose decision is :func:`criteria.verify.verify_round` with a project rule.

    Paper: DropMatch Algorithm 1 (DropMatch rules); Leviathan et al. 2023 Alg. 1 (``rejection``).

    Args:
        runner: vLLM's ``GPUModelRunner`` / ``CPUModelRunner`` (request table, input batch order, model).
        state: the :class:`HookState` shared with the capture wrappers.
        base: the sampler it replaces (its ``sampler`` is reused).
    """

    def __init__(self, runner: Any, state: HookState, base: RejectionSampler) -> None:
        torch.nn.Module.__init__(self)
        self.sampler = base.sampler
        self.native = base
        self.runner = runner
        self.state = state

    def _generator(self, req_id: str, device: torch.device) -> torch.Generator:
        """The request's generator, made on first use on ``device`` (the hidden states')."""
        gen = self.state.generators.get(req_id)
        if gen is None:
            seed = self.runner.requests[req_id].sampling_params.seed
            gen = make_generator(self.state.default_seed if seed is None else seed, device)
            self.state.generators[req_id] = gen
        return gen

    def forward(
        self,
        metadata: Any,
        draft_probs: torch.Tensor | None,  # [num_tokens, V] or None
        logits: torch.Tensor,  # [num_tokens + B, V]
        sampling_metadata: Any,
    ) -> SamplerOutput:
        """Decide each request's round with :func:`criteria.verify.verify_round`.

        Args:
            metadata: vLLM's ``SpecDecodeMetadata`` (draft token ids ``[num_tokens]`` int, per-request draft
                counts, target / bonus logits indices).
            draft_probs: the draft's probabilities ``[num_tokens, V]`` float (captured by the hook), or None.
            logits: the target's logits ``[num_tokens + B, V]`` float (B = requests in the batch); only their
                shape is read (V): the rule's logits are recomputed from the captured hidden states.
            sampling_metadata: vLLM's ``SamplingMetadata``.

        Returns:
            ``SamplerOutput`` with ``sampled_token_ids`` ``[B, max_spec_len + 1]`` int32: accepted drafts, then the
            correction / bonus token, then ``PLACEHOLDER_TOKEN_ID`` (vLLM's layout).

        Raises:
            NotImplementedError: logprobs, penalties, bad words, ``top_p < 1`` or ``top_k`` requested.
            RuntimeError: the captured hidden states do not match the logits, or the rule needs ``draft_probs``
                and none were captured.
        """
        st = self.state
        if st.rule is None:  # vLLM's own sampler decides; the rounds are only logged
            result = self.native(metadata, draft_probs, logits, sampling_metadata)
            self._log_native(metadata, result.sampled_token_ids, sampling_metadata.all_greedy)
            return result
        _refuse_unsupported(sampling_metadata)
        hidden = st.target_hidden
        if hidden is None or hidden.shape[0] != logits.shape[0]:
            raise RuntimeError(
                f"captured target hidden states {None if hidden is None else tuple(hidden.shape)} do not match "
                f"the logits {tuple(logits.shape)}; the compute_logits capture is out of step"
            )
        t0 = time.perf_counter()
        head = target_lm_head(self.runner.model, logits.shape[-1])
        B = len(metadata.num_draft_tokens)
        out = torch.full(
            (B, metadata.max_spec_len + 1),
            PLACEHOLDER_TOKEN_ID,
            dtype=torch.int32,
            device=logits.device,
        )
        cu = metadata.cu_num_draft_tokens.tolist()
        target_idx = metadata.target_logits_indices.long()
        bonus_idx = metadata.bonus_logits_indices.long()
        step = []  # (the request's round meter, its RoundRecord or None)
        for i in range(B):
            n = int(metadata.num_draft_tokens[i])
            start = cu[i] - n
            rows = torch.cat([target_idx[start : cu[i]], bonus_idx[i : i + 1]])  # [n+1]
            drafts = metadata.draft_token_ids[start : cu[i]].long()[None]  # [1, n]
            q = None if draft_probs is None else draft_probs[start : cu[i]]  # [n, V]
            clock = RoundClock(1, hidden.device)
            a, nxt, record = self._decide_request(
                self.runner.input_batch.req_ids[i], hidden[rows], head, drafts, q, clock
            )
            clock.stop()
            step.append((clock, record))
            out[i, :a] = drafts[0, :a].to(torch.int32)
            out[i, a] = nxt
        charge_step(step, st.forward_s)
        st.criterion_s += time.perf_counter() - t0
        return SamplerOutput(sampled_token_ids=out, logprobs_tensors=None)

    def _decide_request(
        self,
        req_id: str,
        h: torch.Tensor,
        head: LMHead,
        drafts: torch.Tensor,
        draft_probs: torch.Tensor | None,
        meter: RoundClock | None = None,
    ) -> tuple[int, int, RoundRecord | None]:
        """One request's round: ``h`` ``[n+1, d]`` hidden states at its drafts and bonus position, ``drafts``
        ``[1, n]`` int64, ``draft_probs`` ``[n, V]`` or None; ``meter`` hears the round
        (:func:`criteria.verify.verify_round`). Returns ``(accepted, next token id, record)``: for a round with
        drafts its :class:`RoundRecord`, also appended to the state's rounds; None without drafts."""
        st = self.state
        n = drafts.shape[1]
        sp = self.runner.requests[req_id].sampling_params
        T = float(sp.temperature) if sp.temperature and sp.temperature > 1e-5 else 0.0
        gen = self._generator(req_id, h.device)
        gen_state = gen.get_state() if st.record_inputs else None
        q = None
        if n > 0 and st.needs_draft_probs:
            if draft_probs is None:
                raise RuntimeError(
                    "the rule needs draft_probs but vLLM passed none (draft capture failed)"
                )
            q = draft_probs.float()[None]  # [1, n, V]
        # no drafts this round (another request of the batch has some): the target's own token, no heads
        rule, heads = (
            (st.rule, st.heads) if n > 0 else (CRITERIA.get("autoregressive")(), HeadSpec())
        )
        res = verify_round(
            h[None],
            head,
            drafts,
            rule,
            heads,
            temperature=T,
            generators=[gen],
            draft_probs=q,
            trace=st.record_trace and n > 0,
            meter=meter,
        )
        a, nxt = int(res.num_accepted[0]), int(res.next_token_ids[0])
        if n == 0:
            return a, nxt, None
        record = RoundRecord(
            req_id=req_id,
            num_draft_tokens=n,
            num_accepted=a,
            next_token_id=nxt,
            accept_mask=res.accept_mask[0].tolist(),
            mismatched=(drafts[0, :a] != res.target_argmax[0, :a]).int().tolist(),
            trace=trace_to_json(res.trace, 0, min(a + 1, n)) if res.trace else None,
            inputs=dict(
                hidden=h.clone(),
                draft_token_ids=drafts.clone(),
                draft_probs=q,
                temperature=T,
                generator_state=gen_state,
            )
            if st.record_inputs
            else None,
        )
        st.rounds.append(record)
        return a, nxt, record

    def _log_native(self, metadata: Any, sampled: torch.Tensor, all_greedy: bool) -> None:
        """Record the rounds vLLM's own sampler decided (``sampled`` ``[B, max_spec_len + 1]``, placeholder-padded).

        ``all_greedy``: every request of the step decodes at T = 0, where greedy rejection sampling accepts
        a draft only if it is the target's argmax (no mismatch); otherwise mismatches are not known. Each round holds
        the step's target forward (``verify_s``); vLLM's own decision is not timed.
        """
        kept = (sampled != PLACEHOLDER_TOKEN_ID).sum(dim=1).tolist()  # accepted + 1 per request
        for i, req_id in enumerate(self.runner.input_batch.req_ids[: len(kept)]):
            n = int(metadata.num_draft_tokens[i])
            if n > 0:
                a = int(kept[i]) - 1
                self.state.rounds.append(
                    RoundRecord(
                        req_id=req_id,
                        num_draft_tokens=n,
                        num_accepted=a,
                        next_token_id=int(sampled[i, a]),
                        accept_mask=[True] * a + [False] * (n - a),
                        mismatched=[0] * a if all_greedy else None,
                        verify_s=self.state.forward_s,
                    )
                )


def charge_step(step: list[tuple[RoundClock, RoundRecord | None]], forward_s: float | None) -> None:
    """Time a verify step's rounds as the HF loop times a batch round's rows (:meth:`RoundClock.charge`): every
    round of the step gets the step's target forward ``forward_s`` and the plain and rule seconds summed over the
    step's requests (None for both when a request's decision had no plain moment), and its own escape positions.

    Args:
        step: per request of the step, in order, its stopped meter and its :class:`RoundRecord` (None: no drafts).
        forward_s: the step's target forward, seconds, or None (not timed).
    """
    plains = [clock.plain_s for clock, _ in step]
    rules = [clock.rule_s for clock, _ in step]
    timed = all(v is not None for v in plains + rules)
    for clock, record in step:
        if record is None:
            continue
        record.verify_s = forward_s
        record.plain_s, record.rule_s = (sum(plains), sum(rules)) if timed else (None, None)
        reached = {rung: int(hits[0]) for rung, hits in clock.rungs().items() if int(hits[0])}
        record.escape = reached or None


def _refuse_unsupported(sampling_metadata: Any) -> None:
    """Raise NotImplementedError for sampling options the project's rules do not implement."""
    if sampling_metadata.max_num_logprobs is not None:
        raise NotImplementedError("logprobs are not supported with the DropMatch verify hook")
    if not sampling_metadata.no_penalties or sampling_metadata.bad_words_token_ids:
        raise NotImplementedError(
            "penalties / bad words are not supported with the DropMatch verify hook"
        )
    if sampling_metadata.top_p is not None or sampling_metadata.top_k is not None:
        raise NotImplementedError(
            "top_p < 1 / top_k are not applied by the project's rules; allowed with the "
            "DropMatch verify hook: top_p = 1.0 (decoding.top_p=1.0), no top_k"
        )
