"""The arms of the side-by-side benchmark: our HF loop (AR, SD, SD+DM) and transformers' own ``generate``
(AR, and assisted generation with the draft as assistant -- the anchor a user would pick instead).

Every arm decodes one prompt greedily to ``max_new_tokens`` or the first end-of-sequence token (no stop
strings), and returns the same fields, timed the same way: ``seconds`` = wall time of the whole call
(tokenised prompt in, token ids out; prefill included), ``decode_s`` / ``decode_tokens`` = the part after
the first committed chunk (ours: the rounds after the prefill's first token; transformers: after the
streamer's first put of new tokens, i.e. prefill + for assisted generation its first round), so rates can be
read with and without prefill. ``rounds`` = target forward passes after the prefill (ours) or all target
forward passes (transformers, counted by a forward pre-hook); ``accepted`` = committed tokens - rounds; ours
count rounds and accepted tokens only up to where the output ends (``SpecDecodeCounters``), transformers' over
everything it generated; ``verify_passes`` = target passes actually run after the prefill (ours) or in all.
Our loops also decode several prompts at once (:func:`our_generate_batch`: one wall-clock call, per-prompt outputs);
transformers' arms decode one prompt (assisted generation takes a batch of one).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import torch

from runners.backends.base import DecodingConfig


def our_generate(
    backend: Any, sample: Any, *, L: int, rule: tuple[Any, Any], max_new_tokens: int, seed: int
) -> dict:
    """One prompt through the project's backend (``runners.registry.BACKENDS``), the only call into it here.

    Args:
        backend: built as ``runners.run`` builds it (``build(BACKENDS, c["backend"], pair=pair)``).
        sample: a ``runners.datasets.base.Sample``.
        L: draft length (0 = autoregressive through the same loop).
        rule: ``(rule, heads)``: the built acceptance rule and its ``criteria.dropout_heads.HeadSpec``.

    Returns:
        The arm fields (see the module docstring); ``verify_s`` / ``draft_s`` / ``criterion_s`` split ``decode_s``;
        ``plain_s`` / ``rule_s``: the round meter's parts of the rounds (:mod:`runners.backends.round_meter`;
        None where the rule has no plain moment).
    """

    decoding = _greedy(L, max_new_tokens, seed)
    t0 = time.perf_counter()
    res = next(iter(backend.generate([sample], decoding, *rule)))
    seconds = time.perf_counter() - t0
    out = _output_fields(res, L)
    return {
        "output_token_ids": out["output_token_ids"],
        "tokens": out["tokens"],
        "seconds": seconds,
        "prefill_s": res.prefill_s,
        "decode_s": res.wall_s,
        "decode_tokens": max(out["tokens"] - 1, 0),
        "rounds": out["rounds"],
        "accepted": out["accepted"],
        "verify_passes": out["verify_passes"],
        "draft_s": res.draft_s,
        "verify_s": res.verify_s,
        "criterion_s": res.criterion_s,
        "plain_s": res.plain_s,
        "rule_s": res.rule_s,
        "audit_s": res.audit_s,
    }


def our_generate_batch(
    backend: Any,
    samples: Sequence[Any],
    *,
    L: int,
    rule: tuple[Any, Any],
    max_new_tokens: int,
    seed: int,
) -> dict:
    """Several prompts decoded together through the project's backend, timed as one wall-clock call.

    Args:
        backend: built with ``batch_size`` = ``len(samples)`` (every sample joins the batch; the loop prefills
            each alone as it joins, then decodes all rows together).
        samples: ``runners.datasets.base.Sample`` objects with distinct ``sample_id``.
        L, rule, max_new_tokens, seed: as :func:`our_generate`.

    Returns:
        ``tokens`` (output tokens of all samples), ``seconds`` (wall time of the whole call: every prefill and
        round, until the last sample finished), ``prefill_s`` (the samples' prefills summed: the loop prefills
        one sample at a time, outside the rounds), ``decode_s`` (``seconds`` less the prefills and the exactness
        audit: the rounds, as :func:`our_generate`'s ``decode_s`` at batch 1), ``decode_tokens`` (``tokens`` less
        each sample's first token, which its prefill emits), ``outputs``: per sample in the order of ``samples``
        ``{prompt_id, output_token_ids, tokens, rounds, accepted, verify_passes, prefill_s}`` (rounds and
        accepted counted as :func:`our_generate` counts them).

    Raises:
        ValueError: the backend returned other sample ids than it was given.
    """
    decoding = _greedy(L, max_new_tokens, seed)
    t0 = time.perf_counter()
    results = list(backend.generate(list(samples), decoding, *rule))
    seconds = time.perf_counter() - t0
    by_id = {r.sample_id: r for r in results}
    wanted = [s.sample_id for s in samples]
    if sorted(by_id) != sorted(wanted) or len(results) != len(wanted):
        raise ValueError(f"the backend returned samples {sorted(by_id)}, not {sorted(wanted)}")
    outputs = [
        {"prompt_id": sid, **_output_fields(by_id[sid], L), "prefill_s": by_id[sid].prefill_s}
        for sid in wanted
    ]
    prefill = sum(o["prefill_s"] for o in outputs)
    # every sample joins before the first round (the batch holds them all), so the row that finishes last saw
    # every round, and its audit_s (the batch's audit time over its rounds) is the call's
    audit = max((r.audit_s for r in results), default=0.0)
    tokens = sum(o["tokens"] for o in outputs)
    return {
        "tokens": tokens,
        "seconds": seconds,
        "prefill_s": prefill,
        "decode_s": max(seconds - prefill - audit, 0.0),
        "decode_tokens": tokens - sum(1 for o in outputs if o["tokens"]),
        "outputs": outputs,
    }


def _greedy(L: int, max_new_tokens: int, seed: int) -> DecodingConfig:
    """The benchmark's decoding settings: greedy, no stop strings."""
    return DecodingConfig(
        num_speculative_tokens=L, temperature=0.0, max_new_tokens=max_new_tokens, stop=[], seed=seed
    )


def _output_fields(res: Any, L: int) -> dict:
    """Output ids, their count, rounds (L = 0: one per token after the first), accepted tokens, verify passes."""
    ids = [int(i) for i in res.output_token_ids]
    return {
        "output_token_ids": ids,
        "tokens": len(ids),
        "rounds": res.counters.num_drafts if L > 0 else max(len(ids) - 1, 0),
        "accepted": res.counters.num_accepted_tokens if L > 0 else 0,
        "verify_passes": len(res.accepted_per_round),
    }


class _ChunkClock:
    """A transformers streamer that notes when the first chunk of new tokens arrives (the first put is the prompt)."""

    def __init__(self) -> None:
        self.puts = 0
        self.first_at: float | None = None
        self.first_tokens = 0

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first_at = time.perf_counter()
            self.first_tokens = int(value.numel())

    def end(self) -> None:
        pass


class _CallCounter:
    """Counts forward calls of a module while active (a forward pre-hook)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module, self.calls, self.handle = module, 0, None

    def __enter__(self) -> _CallCounter:
        self.handle = self.module.register_forward_pre_hook(self._hook)
        return self

    def _hook(self, *_: Any) -> None:
        self.calls += 1

    def __exit__(self, *_: Any) -> None:
        self.handle.remove()


@torch.inference_mode()
def hf_generate(
    target: Any,
    prompt_ids: Sequence[int],
    *,
    eos_ids: Sequence[int],
    pad_id: int,
    max_new_tokens: int,
    draft: Any = None,
    L: int = 0,
) -> dict:
    """transformers ``generate`` on one prompt: greedy AR, or assisted generation with ``draft`` proposing L tokens.

    The assistant's settings are read from ``draft.generation_config`` by transformers
    (``AssistedCandidateGenerator``), not from ``generate`` keyword arguments, so they are set there for the
    call and restored after: ``num_assistant_tokens = L``, schedule ``constant``, ``assistant_confidence_threshold
    = 0`` (no early stop of the draft on low confidence: exactly L candidates per round, as our loop).

    Returns:
        The arm fields; ``draft_forwards`` counts the assistant's forward calls (L per full round).
    """
    from transformers import GenerationConfig

    gen_cfg = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        eos_token_id=list(eos_ids),
        pad_token_id=pad_id,
    )
    x = torch.tensor([list(prompt_ids)], dtype=torch.long, device=target.device)
    clock = _ChunkClock()
    kwargs: dict[str, Any] = {
        "generation_config": gen_cfg,
        "attention_mask": torch.ones_like(x),
        "streamer": clock,
    }
    saved = None
    if draft is not None:
        saved = copy.deepcopy(draft.generation_config)
        draft.generation_config.num_assistant_tokens = int(L)
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = draft
    try:
        with (
            _CallCounter(target) as t_calls,
            _CallCounter(draft if draft is not None else target) as d_calls,
        ):
            t0 = time.perf_counter()
            out = target.generate(x, **kwargs)
            end = time.perf_counter()
    finally:
        if saved is not None:
            draft.generation_config = saved
    new = [int(i) for i in out[0, x.shape[1] :].tolist()]
    cut = next((i for i, tok in enumerate(new) if tok in set(eos_ids)), None)
    ids = new if cut is None else new[:cut]
    first_at = clock.first_at if clock.first_at is not None else end
    first = min(clock.first_tokens, len(ids))
    rounds = t_calls.calls
    return {
        "output_token_ids": ids,
        "tokens": len(ids),
        "seconds": end - t0,
        "prefill_s": None,
        "decode_s": end - first_at,
        "decode_tokens": len(ids) - first,
        "rounds": rounds,
        "accepted": max(len(new) - rounds, 0) if draft is not None else 0,
        "verify_passes": rounds,
        "draft_forwards": d_calls.calls if draft is not None else 0,
    }
