"""Reference backend: a draft-verify loop on transformers models, batch size 1, CPU or GPU.

Paper: Leviathan et al. 2023 Alg. 1 (round = draft L tokens + one target verify pass); DropMatch
(arXiv 2603.03333) Fig. 2: the K dropout heads read the target's final hidden states of the verify pass.

The prefill over the prompt yields the first output token (as vLLM does); then rounds follow.
One round, for committed tokens ``ids`` (the last one, ``pending``, not yet in the target cache):
  1. draft: the draft model feeds what its cache lacks and proposes L tokens one by one;
  2. verify: the target runs ONCE over ``[pending, d_1..d_L]`` -> hidden ``[L+1, d]``; its own head and,
     for DropMatch, the K dropout heads are one matmul (``criteria.dropout_heads``);
  3. the criterion returns the accepted count ``a`` and the next (correction or bonus) token;
  4. both caches roll back to ``len(ids) + a`` positions; ``ids += d_1..d_a, next``.
L = 0 is the autoregressive baseline through the same loop (no draft model, one target step per round).
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

import torch

from criteria.dropout_heads import HeadSpec, LMHead
from criteria.registry import CRITERIA
from criteria.verify import trace_to_json, verify_round
from runners.backends.base import DecodingConfig, SampleResult
from runners.backends.kv_state import KVState, PrefixCache
from runners.backends.output import cut_rounds, end_of_sequence_ids, finalize, is_finished, round_counters
from runners.backends.seeding import make_generator, sample_seed
from runners.datasets.base import Sample, prompt_token_ids
from runners.registry import BACKENDS

_PREFIX_CACHES: dict[int, PrefixCache] = {}


def pick_token(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> tuple[int, torch.Tensor]:
    """The draft's choice from ``logits`` ``[V]``: argmax when ``temperature == 0``, else a sample.

    Returns ``(token, probs)`` where ``probs`` ``[V]`` float32 is the distribution the token came from
    (softmax at ``max(temperature, 1)`` scale when greedy, used by the JS rule as ``p_hat``).
    """
    probs = torch.softmax(logits.float() / (temperature if temperature > 0 else 1.0), dim=-1)
    if temperature > 0:
        return int(torch.multinomial(probs, 1, generator=generator)), probs
    return int(torch.argmax(logits)), probs


@BACKENDS.register("hf")
class HFLoopBackend:
    """transformers draft-verify loop (the reference the vLLM backend is checked against).

    Args:
        pair: a :class:`runners.models.loader.LoadedPair`.
        prefix_caching: reuse the KV cache of the shared prompt prefix (few-shot block) across samples.
    """

    name = "hf"

    def __init__(self, pair: Any, prefix_caching: bool = True, **_: Any) -> None:
        self.pair = pair
        self.tokenizer = pair.tokenizer
        self.prefix_caching = prefix_caching
        # one prefix cache per model object, shared by every run of this process (a sweep's runs)
        self._prefix = {w: _PREFIX_CACHES.setdefault(id(m), PrefixCache())
                        for w, m in (("target", pair.target), ("draft", pair.draft)) if m is not None}
        self.eos_ids = end_of_sequence_ids(pair.tokenizer, getattr(getattr(pair.target, "generation_config", None),
                                                                   "eos_token_id", None))

    def encode(self, sample: Sample) -> list[int]:
        """Prompt token ids: the target's chat template with the generation prompt (a final assistant message
        is continued), as lm-eval's HFLM builds them (:func:`runners.datasets.base.prompt_token_ids`)."""
        return prompt_token_ids(self.tokenizer, sample.messages)

    def generate(self, samples: Iterable[Sample], decoding: DecodingConfig, rule: Any,
                 heads: HeadSpec) -> Iterator[SampleResult]:
        """Decode each sample to completion, yielding its result as soon as it is finished."""
        if decoding.top_p != 1.0:
            raise ValueError(f"decoding.top_p={decoding.top_p} unsupported by backend=hf; allowed: 1.0")
        for sample in samples:
            yield self.generate_one(sample, decoding, rule, heads)

    def _state(self, which: str) -> KVState:
        model = self.pair.target if which == "target" else self.pair.draft
        return KVState(model, self._prefix.get(which) if self.prefix_caching else None)

    @torch.inference_mode()
    def generate_one(self, sample: Sample, decoding: DecodingConfig, rule: Any, heads: HeadSpec) -> SampleResult:
        """Decode one sample to completion. See the module docstring for the round structure."""
        L = int(decoding.num_speculative_tokens)
        if L > 0 and self.pair.draft is None:
            raise ValueError("num_speculative_tokens > 0 needs a draft model (pair.draft)")
        T = float(decoding.temperature)
        prompt = self.encode(sample)
        ids = list(prompt)
        timing = {"draft": 0.0, "verify": 0.0, "criterion": 0.0}
        accepted_per_round: list[int] = []
        traces: list[dict] | None = [] if decoding.trace else None
        stops, cap = list(decoding.stop), int(decoding.max_new_tokens)

        # Prefill; the first output token comes from the prefill's last position (as in vLLM), so
        # rounds start after it and both backends use the per-sample generator at the same points.
        t0 = time.perf_counter()
        target = self._state("draft" if (L == 0 and decoding.ar_model == "draft") else "target")
        head = LMHead(target.lm_head_weight, target.lm_head_bias)
        gen = make_generator(sample_seed(decoding.seed, sample.sample_id, decoding.seed_stream),
                             target.lm_head_weight.device)
        last = target.prefill(prompt)  # [d]
        first_rule, first_heads = (rule, heads) if L == 0 else (CRITERIA.get("autoregressive")(), HeadSpec())
        no_drafts = torch.zeros((1, 0), dtype=torch.long, device=last.device)
        first = verify_round(last[None, None], head, no_drafts, first_rule, first_heads, temperature=T,
                             generators=[gen])
        ids.append(int(first.next_token_ids[0]))
        draft = None
        if L > 0:
            draft = self._state("draft")
            draft.prefill(prompt)
        prefill_s = time.perf_counter() - t0

        needs_q = bool(rule.needs_draft_probs) or bool(decoding.trace)
        needs_h = bool(getattr(rule, "needs_hidden", False))
        t_start = time.perf_counter()
        while not is_finished(ids[len(prompt):], self.tokenizer, self.eos_ids, stops, cap):
            # 1. draft: L tokens, one draft forward each
            t = time.perf_counter()
            drafts: list[int] = []
            qs: list[torch.Tensor] = []
            dh: list[torch.Tensor] = []
            for _ in range(L):
                h = draft.forward((ids + drafts)[draft.length:])
                tok, q = pick_token(draft.logits(h[-1:])[0], T, gen)
                drafts.append(tok)
                qs.append(q)
                if needs_h:
                    dh.append(h[-1])
            timing["draft"] += time.perf_counter() - t

            # 2. verify: one target pass over [pending, drafts]
            t = time.perf_counter()
            hidden = target.forward([ids[-1]] + drafts)  # [L+1, d]
            timing["verify"] += time.perf_counter() - t

            # 3. decide: heads + rule, in one place for every backend
            t = time.perf_counter()
            res = verify_round(
                hidden[None], head, torch.tensor([drafts], dtype=torch.long, device=hidden.device), rule, heads,
                temperature=T, generators=[gen],
                draft_probs=torch.stack(qs)[None] if (needs_q and L > 0) else None,
                draft_hidden=torch.stack(dh)[None] if dh else None, trace=decoding.trace,
            )
            a, nxt = int(res.num_accepted[0]), int(res.next_token_ids[0])
            accepted_per_round.append(a)
            if traces is not None and res.trace:
                traces.append(trace_to_json(res.trace, 0, min(a + 1, L)))
            timing["criterion"] += time.perf_counter() - t

            # 4. commit and roll back both caches to the accepted prefix
            base = len(ids)
            ids.extend(drafts[:a] + [nxt])
            target.rollback(base + a)
            if draft is not None:
                draft.rollback(min(draft.length, base + a))
        wall_s = time.perf_counter() - t_start

        out = finalize(ids[len(prompt):], self.tokenizer, self.eos_ids, stops, cap)
        kept = cut_rounds(accepted_per_round, out.emitted)
        if traces is not None:
            traces = traces[: len(kept)]
        return SampleResult(
            sample_id=sample.sample_id, output_text=out.text, output_token_ids=out.token_ids,
            counters=round_counters(kept, L), num_output_tokens=len(out.token_ids), wall_s=wall_s,
            prefill_s=prefill_s, draft_s=timing["draft"], verify_s=timing["verify"],
            criterion_s=timing["criterion"], accepted_per_round=kept, stop_reason=out.stop_reason,
            eos_removed=out.eos_removed, trace=traces,
        )
