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

import hashlib
import time
from typing import Any, Iterable, Iterator

import torch

from criteria.base import VerifyInputs
from runners.backends.base import DecodingConfig, SampleResult
from runners.backends.kv_state import KVState, PrefixCache
from runners.counters import SpecDecodeCounters
from runners.datasets.base import Sample
from runners.registry import BACKENDS

_PREFIX_CACHES: dict[int, PrefixCache] = {}
END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>")


def sample_seed(seed: int, sample_id: str) -> int:
    """Per-sample RNG seed, stable across processes and resumption (independent of sample order)."""
    return (int(hashlib.sha256(sample_id.encode()).hexdigest()[:12], 16) + 1_000_003 * seed) % (2**63)


def pick_token(logits: torch.Tensor, temperature: float, generator: torch.Generator) -> tuple[int, torch.Tensor | None]:
    """Choose a token from ``logits`` ``[V]``: argmax when ``temperature == 0``, else a sample.

    Returns ``(token, probs)`` where ``probs`` ``[V]`` is the distribution the token came from
    (softmax at ``max(temperature, 1)`` scale when greedy, used by the JS rule).
    """
    probs = torch.softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
    if temperature > 0:
        return int(torch.multinomial(probs, 1, generator=generator)), probs
    return int(torch.argmax(logits)), probs


def eos_token_ids(tokenizer: Any, model: Any) -> set[int]:
    """End-of-sequence ids: the tokenizer's, the generation config's and known end-of-turn tokens."""
    ids: set[int] = set()
    for value in (tokenizer.eos_token_id, getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
    return ids


def _to_json(trace: dict[str, torch.Tensor], upto: int) -> dict[str, list]:
    return {k: v[0, :upto].tolist() for k, v in trace.items() if torch.is_tensor(v) and v.dim() >= 2}


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
        self.eos_ids = eos_token_ids(pair.tokenizer, pair.target)

    def encode(self, sample: Sample) -> list[int]:
        """Prompt token ids: the target's chat template with the generation prompt."""
        ids = self.tokenizer.apply_chat_template(sample.messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def generate(self, samples: Iterable[Sample], decoding: DecodingConfig, criterion: Any) -> Iterator[SampleResult]:
        if decoding.top_p != 1.0:
            raise ValueError(f"decoding.top_p={decoding.top_p} unsupported by backend=hf; allowed: 1.0")
        for sample in samples:
            yield self.generate_one(sample, decoding, criterion)

    def _state(self, which: str) -> KVState:
        model = self.pair.target if which == "target" else self.pair.draft
        return KVState(model, self._prefix.get(which) if self.prefix_caching else None)

    @torch.inference_mode()
    def generate_one(self, sample: Sample, decoding: DecodingConfig, criterion: Any) -> SampleResult:
        """Decode one sample to completion. See the module docstring for the round structure."""
        L = int(decoding.num_speculative_tokens)
        if L > 0 and self.pair.draft is None:
            raise ValueError("num_speculative_tokens > 0 needs a draft model (pair.draft)")
        T = float(decoding.temperature)
        gen = torch.Generator().manual_seed(sample_seed(decoding.seed, sample.sample_id))
        path_gen = None
        if L == 0 and decoding.ar_dropout_p is not None:
            from criteria.dropout_heads import dropout_head_logits

            path_gen = torch.Generator().manual_seed(sample_seed(decoding.seed * 7919 + decoding.ar_path, sample.sample_id))
        prompt = self.encode(sample)
        ids = list(prompt)
        counters = SpecDecodeCounters(num_speculative_tokens=L)
        timing = {"draft": 0.0, "verify": 0.0, "criterion": 0.0}
        accepted_per_round: list[int] = []
        traces: list[dict] | None = [] if decoding.trace else None

        # Prefill; the first output token comes from the prefill's last position (as in vLLM), so
        # rounds start after it and both backends use the per-sample generator at the same points.
        t0 = time.perf_counter()
        target = self._state("draft" if (L == 0 and decoding.ar_model == "draft") else "target")
        last = target.prefill(prompt)[None]  # [1, d]
        if path_gen is not None:
            first_logits = dropout_head_logits(last, target.lm_head_weight, target.lm_head_bias, num_heads=1,
                                               p_drop=float(decoding.ar_dropout_p), generator=path_gen)[0, 1]
        else:
            first_logits = target.logits(last)[0]
        ids.append(pick_token(first_logits.float(), T, gen)[0])
        draft = None
        if L > 0:
            draft = self._state("draft")
            draft.prefill(prompt)
        prefill_s = time.perf_counter() - t0

        K = int(getattr(criterion, "num_heads", 0) or 0)
        p_drop = float(getattr(criterion, "p_drop", 0.0) or 0.0)
        needs_q = bool(getattr(criterion, "needs_draft_probs", False))
        needs_h = bool(getattr(criterion, "needs_hidden", False))
        if K > 0:
            from criteria.dropout_heads import dropout_head_logits

        stop_reason = "length"
        t_start = time.perf_counter()
        if ids[-1] in self.eos_ids:
            ids.pop()
            stop_reason = "eos"
        while stop_reason == "length" and len(ids) - len(prompt) < decoding.max_new_tokens:
            # 1. draft
            t = time.perf_counter()
            drafts: list[int] = []
            qs: list[torch.Tensor] = []
            draft_h: list[torch.Tensor] = []  # the draft's hidden AT each draft token (Auto-Judge "DD" feature)
            if L > 0:
                for j in range(L):
                    h = draft.forward((ids + drafts)[draft.length:])
                    if needs_h and j > 0:
                        draft_h.append(h[-1])  # after feeding d_j
                    tok, q = pick_token(draft.logits(h[-1:])[0], T, gen)
                    drafts.append(tok)
                    qs.append(q)
                if needs_h:  # one more draft step reads d_L (as Auto-Judge's L+1 draft calls); rollback keeps it if accepted
                    draft_h.append(draft.forward([drafts[-1]])[-1])
            timing["draft"] += time.perf_counter() - t

            # 2. verify: one target pass over [pending, drafts]
            t = time.perf_counter()
            hidden = target.forward([ids[-1]] + drafts)  # [L+1, d]
            head_logits = None
            if K > 0:
                heads = dropout_head_logits(hidden, target.lm_head_weight, target.lm_head_bias,
                                            num_heads=K, p_drop=p_drop, generator=gen)  # [L+1, 1+K, V]
                target_logits, head_logits = heads[:, 0].float(), heads[:, 1:].float()
            elif path_gen is None:  # (a single dropout path computes its own head below)
                target_logits = target.logits(hidden)  # [L+1, V]
            timing["verify"] += time.perf_counter() - t

            # 3. decide
            t = time.perf_counter()
            if L > 0:
                vocab = target_logits.shape[-1]
                draft_probs = torch.stack([q[:vocab] for q in qs])[None] if needs_q else None
                res = criterion(VerifyInputs(
                    draft_token_ids=torch.tensor([drafts], dtype=torch.long),
                    target_logits=target_logits[None],
                    draft_probs=draft_probs,
                    head_logits=head_logits[None] if head_logits is not None else None,
                    temperature=T, generator=gen,
                    target_hidden=hidden[None].float() if needs_h else None,
                    draft_hidden=torch.stack(draft_h)[None].float() if needs_h else None,
                ), trace=decoding.trace)
                a, nxt = int(res.num_accepted[0]), int(res.next_token_ids[0])
                counters.observe_draft(L, a)
                if traces is not None and res.trace:
                    traces.append(_to_json(res.trace, min(a + 1, L)))
            elif path_gen is not None:  # single MC-dropout path: fresh mask every step
                path = dropout_head_logits(hidden[-1:], target.lm_head_weight, target.lm_head_bias, num_heads=1,
                                           p_drop=float(decoding.ar_dropout_p), generator=path_gen)  # [1, 2, V]
                a, nxt = 0, pick_token(path[0, 1].float(), T, gen)[0]
            else:
                a, nxt = 0, pick_token(target_logits[0], T, gen)[0]
            accepted_per_round.append(a)
            timing["criterion"] += time.perf_counter() - t

            # 4. commit and roll back both caches to the accepted prefix
            base = len(ids)
            ids.extend(drafts[:a] + [nxt])
            target.rollback(base + a)
            if draft is not None:
                draft.rollback(min(draft.length, base + a))
            new = ids[len(prompt):]
            hit = next((i for i, tok in enumerate(new) if tok in self.eos_ids), None)
            if hit is not None:
                del ids[len(prompt) + hit:]
                stop_reason = "eos"
                break
            if decoding.stop:
                text = self.tokenizer.decode(new, skip_special_tokens=True)
                if any(s in text for s in decoding.stop):
                    stop_reason = "stop"
                    break
        wall_s = time.perf_counter() - t_start

        out_ids = ids[len(prompt):][: decoding.max_new_tokens]
        text = self.tokenizer.decode(out_ids, skip_special_tokens=True)
        for s in decoding.stop:
            cut = text.find(s)
            if cut >= 0:
                text = text[:cut]
        return SampleResult(
            sample_id=sample.sample_id, output_text=text, output_token_ids=out_ids, counters=counters,
            num_output_tokens=len(out_ids), wall_s=wall_s, prefill_s=prefill_s, draft_s=timing["draft"],
            verify_s=timing["verify"], criterion_s=timing["criterion"], accepted_per_round=accepted_per_round,
            trace=traces,
        )
