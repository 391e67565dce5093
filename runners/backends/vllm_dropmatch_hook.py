"""Run a project acceptance rule (DropMatch, greedy match, rejection) inside vLLM v1's verify step.

Paper: DropMatch (arXiv 2603.03333) Sec. 3, Algorithm 1; vLLM v1 ``rejection_sampler.py`` vocabulary.

How it plugs in (vLLM 0.32.x only; :func:`check_vllm_version` refuses anything else). Everything runs
inside the worker process through vLLM's own extension point ``worker_extension_cls`` (this module's
:class:`DropMatchWorkerExtension`, installed by ``llm.collective_rpc("dropmatch_install", ...)``). No
vLLM class is modified; five attributes of the live worker objects are replaced per instance:

1. ``runner.model.compute_logits`` (target): wrapped to keep its input, the final hidden states after
   the last norm ``[num_logits, d]``, row-aligned with the logits the runner hands the sampler.
2. ``runner.drafter.model.compute_logits`` (draft): wrapped to keep a copy of each draft step's logits
   ``[batch, V]`` while ``drafter.propose`` runs (one call per draft position). For ``eagle3`` heads with
   a reduced draft vocabulary, vLLM's ``Eagle3LlamaForCausalLM.compute_logits`` already scatters them
   into the target vocabulary (-inf elsewhere), so ``draft_probs`` are in target-vocab space.
3. ``runner.drafter.take_last_draft_probs``: returns ``softmax(draft_logits / T')`` ``[batch, L, V]``
   (T' = T, or 1 when greedy, as in the HF backend), only when the rule needs ``draft_probs`` or a trace
   is recorded; with no rule (hook idle, or vLLM's own sampler) vLLM's own method answers. vLLM itself stores it keyed by request id and passes the rows of the verified drafts to
   the sampler as ``draft_probs`` ``[num_tokens, V]`` (``GPUModelRunner._get_spec_decode_draft_probs``).
4. ``runner.rejection_sampler``: replaced by :class:`DropMatchSampler`, a ``RejectionSampler`` subclass
   whose ``forward(metadata, draft_probs, logits, sampling_metadata)`` decides each request's round with
   :func:`criteria.verify.verify_round` (heads + rule + order of random draws: the one function the HF
   backend calls too) and returns vLLM's output layout ``[B, max_spec_len + 1]`` int32 padded with
   ``PLACEHOLDER_TOKEN_ID``. vLLM derives everything else from that tensor (accepted counts, KV-cache
   slots, the drafter's next input, the scheduler's per-step metrics), so those follow without more hooks.
   Installed with no rule (``backend.native_verify``), it lets vLLM's own sampler decide and only logs the
   rounds (:class:`RoundRecord`), which the backend's per-request counters are made from.
5. ``runner._model_forward`` (the target's forward of a step, vLLM's documented override point): timed, so
   that each round records its verify pass beside the round meter's seconds of the decision
   (:func:`runners.backends.vllm_verify_step.charge_step`), as the HF backend's rounds do.

RNG: one ``torch.Generator`` per request on the hidden states' device
(:func:`runners.backends.seeding.make_generator`), seeded with ``SamplingParams.seed`` (the backend passes
``runners.backends.seeding.sample_seed(seed, sample_id, stream)``), consumed by ``verify_round`` in its
documented order; the HF backend consumes its per-sample generator the same way, so at T = 0 both backends
decide identically given the same hidden states. (At T > 0 the draft tokens and the first token are sampled
by vLLM's own RNG, so runs differ from the HF backend's.)

Limits: the heads use the unquantised LM head ``lm_head.weight`` (vocab padding cut) with no logit scale or
soft cap; every hooked rule (also greedy match / rejection) recomputes the target logits from it, as the HF
backend does. Under TP > 1 each rank holds a vocab shard ``[V_padded/tp, d]``: the masks (drawn from a
generator seeded identically on all ranks) are applied to the replicated hidden state, the shard multiplied,
and the shards all-gathered (``LMHead.gather``, as ``LogitsProcessor._gather_logits``). Refused with a clear
error rather than approximated: quantised heads (use ``backend.native_verify=true`` for plain SD), logprobs,
penalties, bad words, ``top_p < 1`` / ``top_k`` (the rules implement neither), rules that need the draft's
hidden states (not captured here).

Modules: this one installs (:func:`install`, the capture wrappers, :class:`DropMatchWorkerExtension`);
:mod:`runners.backends.vllm_verify_step` holds the verify step itself (:class:`DropMatchSampler`).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.backends.round_meter import RoundClock
from runners.backends.vllm_verify_step import (  # checks the vLLM version before anything of vLLM is imported
    SUPPORTED_VLLM,
    DropMatchSampler,
    HookState,
    RoundRecord,
    UnsupportedVLLMError,
    _lm_head_weight,
    check_vllm_version,
)

__all__ = [
    "SUPPORTED_VLLM",
    "SUPPORTED_METHODS",
    "UnsupportedVLLMError",
    "check_vllm_version",
    "RoundRecord",
    "HookState",
    "DropMatchSampler",
    "install",
    "uninstall",
    "rule_settings",
    "DropMatchWorkerExtension",
]

SUPPORTED_METHODS = ("draft_model", "eagle3")
# Rules that decide an L = 0 step: no verify step to hook.
NOT_HOOKABLE = {
    "autoregressive": "it decodes without drafts (L = 0); run it on a target-only engine",
    "dropout_path": "it decodes without drafts (L = 0) through one dropout head",
}


def rule_settings(rule: Any) -> dict[str, Any]:
    """The keyword arguments that rebuild ``rule`` (its ``__init__`` parameters read back from the object).

    Raises:
        ValueError: an ``__init__`` parameter is not stored under its own name (the rule could not be rebuilt).
    """
    params = [
        p
        for p in inspect.signature(type(rule).__init__).parameters.values()
        if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    missing = [p.name for p in params if not hasattr(rule, p.name)]
    if missing:
        raise ValueError(
            f"rule {getattr(rule, 'name', rule)!r} does not keep its settings {missing} as attributes; "
            f"the vLLM hook cannot rebuild it in the worker"
        )
    return {p.name: getattr(rule, p.name) for p in params}


def install(
    runner: Any,
    rule_name: str | None,
    rule_kwargs: dict,
    heads: dict | None = None,
    *,
    default_seed: int = 0,
    record_inputs: bool = False,
    record_trace: bool = False,
) -> HookState:
    """Install the hook on a live model runner (see the module docstring). Idempotent per runner.

    Args:
        runner: vLLM's GPU/CPU model runner of a worker (``worker.model_runner``).
        rule_name: a ``CRITERIA`` key (``greedy_match``, ``rejection``, ``dropmatch_naive``, ``dropmatch_js``, one of
            the field's rules ``runners.backends.modes.LOSSY_RULES``), or None: vLLM's own ``RejectionSampler``
            decides and the hook only logs the rounds (per-request counts for requests that vLLM's per-request
            metrics miss: those ended by a stop string).
        rule_kwargs: the rule's own settings (:func:`rule_settings`), e.g. ``{"majority": "strict"}``.
        heads: ``HeadSpec`` fields (:func:`runners.backends.vllm_engine.worker_heads`), e.g. ``{"K": 5, "p_drop":
            0.3, "top_n": 64, "escape": True}``; None or ``{}`` = no heads (K = 0).
        default_seed: generator seed for requests without ``SamplingParams.seed``.
        record_inputs / record_trace: see :class:`HookState`.

    Returns:
        The new :class:`HookState` (also at ``runner._dropmatch_state``).

    Raises:
        UnsupportedVLLMError: the installed vLLM is not 0.32.x (:func:`check_vllm_version`).
        NotImplementedError: no speculative config or a method outside ``SUPPORTED_METHODS``; a rule the hook
            cannot run (L = 0 rules, rules needing the draft's hidden states); a target whose LM head is
            quantised, has no plain weight, or scales / soft-caps its logits.
        ValueError: a rule that needs heads with ``K = 0``, or heads out of range (``dropmatch.K`` / ``p_drop``).
        criteria.registry.UnknownNameError: an unknown ``rule_name`` (the message lists the allowed ones).
    """
    check_vllm_version()
    rule, head_spec = _checked_rule(runner, rule_name, rule_kwargs, heads)
    state = HookState(
        rule=rule,
        heads=head_spec,
        default_seed=default_seed,
        record_inputs=record_inputs,
        record_trace=record_trace,
    )
    _attach(runner, state)
    return state


def _checked_rule(
    runner: Any, rule_name: str | None, rule_kwargs: dict, heads: dict | None
) -> tuple[Any, HeadSpec]:
    """The rule and heads :func:`install` puts in the verify step, refused (as :func:`install` documents) before
    anything on ``runner`` changes."""
    spec = runner.speculative_config
    if spec is None or spec.method not in SUPPORTED_METHODS:
        raise NotImplementedError(
            f"DropMatch hook supports speculative methods {SUPPORTED_METHODS}; got "
            f"{None if spec is None else spec.method!r}"
        )
    if rule_name in NOT_HOOKABLE:
        raise NotImplementedError(
            f"rule {rule_name!r} cannot run in vLLM's verify step: {NOT_HOOKABLE[rule_name]}"
        )
    rule = None if rule_name is None else CRITERIA.get(rule_name)(**rule_kwargs)
    head_spec = HeadSpec(**(heads or {}))
    if rule is None and head_spec.active:
        raise ValueError(
            "vLLM's own sampler (no rule) has no MC-dropout heads; allowed: dropmatch.K=0"
        )
    if getattr(rule, "needs_hidden", False):
        raise NotImplementedError(
            f"rule {rule_name!r} needs the draft's hidden states, which the vLLM hook does "
            f"not capture (use backend=hf)"
        )
    if getattr(rule, "needs_heads", False) and not head_spec.active:
        raise ValueError(
            f"rule {rule_name!r} needs MC-dropout heads; dropmatch.K={head_spec.K} (allowed: >= 1)"
        )
    if rule is not None:
        _lm_head_weight(runner.model)  # refuse unsupported heads now, not mid-generation
    return rule, head_spec


def _attach(runner: Any, state: HookState) -> None:
    """Make ``state`` the runner's: wrap its captures and sampler the first time, swap the state after."""
    if hasattr(
        runner, "_dropmatch_state"
    ):  # wrappers already in place: swap the state (and sampler)
        if runner._dropmatch_state is None:
            runner._dropmatch_native_sampler = runner.rejection_sampler
            runner.rejection_sampler = DropMatchSampler(runner, state, runner.rejection_sampler)
        runner._dropmatch_state = state
        runner.rejection_sampler.state = state
        return
    runner._dropmatch_state = state
    _wrap_captures(runner)
    runner._dropmatch_native_sampler = runner.rejection_sampler
    runner.rejection_sampler = DropMatchSampler(runner, state, runner.rejection_sampler)


def _wrap_captures(runner: Any) -> None:
    """Wrappers 1-3 and 5 of the module docstring; each reads ``runner._dropmatch_state`` (None: idle)."""
    target_compute_logits = runner.model.compute_logits

    def capture_target(hidden_states, *args, **kwargs):
        if runner._dropmatch_state is not None:
            runner._dropmatch_state.target_hidden = hidden_states
        return target_compute_logits(hidden_states, *args, **kwargs)

    runner.model.compute_logits = capture_target

    model_forward = runner._model_forward

    def timed_forward(*args, **kwargs):
        st = runner._dropmatch_state
        if st is None:
            return model_forward(*args, **kwargs)
        clock = RoundClock(0, runner.device)  # synchronises a CUDA device at both marks
        out = model_forward(*args, **kwargs)
        clock.stop()
        st.forward_s = clock.end - clock.start
        return out

    runner._model_forward = timed_forward

    drafter = runner.drafter
    draft_compute_logits = drafter.model.compute_logits

    def capture_draft(hidden_states, *args, **kwargs):
        logits = draft_compute_logits(hidden_states, *args, **kwargs)
        st = runner._dropmatch_state
        if st is not None and st.capturing_draft:
            st.draft_logits.append(
                logits.detach().clone()
            )  # vLLM divides logits by T in place later
        return logits

    drafter.model.compute_logits = capture_draft
    propose = drafter.propose

    def propose_and_capture(*args, **kwargs):
        st = runner._dropmatch_state
        if st is None:
            return propose(*args, **kwargs)
        st.draft_logits = []
        st.capturing_draft = st.needs_draft_probs
        try:
            return propose(*args, **kwargs)
        finally:
            st.capturing_draft = False

    drafter.propose = propose_and_capture
    native_draft_probs = drafter.take_last_draft_probs

    def take_last_draft_probs():
        st = runner._dropmatch_state
        if st is None or st.rule is None:  # vLLM's own sampler: vLLM's own draft probabilities
            return native_draft_probs()
        if not st.draft_logits:
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


def uninstall(runner: Any) -> None:
    """Give the verify step back to vLLM's own ``RejectionSampler`` (capture wrappers stay, idle)."""
    if getattr(runner, "_dropmatch_state", None) is None:
        return
    runner.rejection_sampler = runner._dropmatch_native_sampler
    del runner._dropmatch_native_sampler
    state = runner._dropmatch_state
    state.record_trace = False
    state.rule = None
    runner._dropmatch_state = None


class DropMatchWorkerExtension:
    """Methods mixed into vLLM's worker (``LLM(worker_extension_cls=...)``), called via ``collective_rpc``."""

    def dropmatch_install(
        self,
        rule_name: str | None,
        rule_kwargs: dict,
        heads: dict | None = None,
        default_seed: int = 0,
        record_inputs: bool = False,
        record_trace: bool = False,
    ) -> str:
        """:func:`install` the rule (None: vLLM's own, logged) on this worker; returns the rule's repr."""
        install(
            self.model_runner,
            rule_name,
            rule_kwargs,
            heads,
            default_seed=default_seed,
            record_inputs=record_inputs,
            record_trace=record_trace,
        )
        return repr(self.model_runner._dropmatch_state.rule)

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
        return (
            w.detach().clone(),
            None if b is None else b.detach().clone(),
            self.model_runner.model_config.get_vocab_size(),
        )

    def dropmatch_criterion_s(self) -> float:
        """Seconds this worker has spent deciding rounds (heads + rule) since the hook was installed."""
        st = getattr(self.model_runner, "_dropmatch_state", None)
        return 0.0 if st is None else st.criterion_s
