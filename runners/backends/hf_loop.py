"""Reference backend: a batched draft-verify loop on transformers models, CPU or GPU.

Paper: Leviathan et al. 2023 Alg. 1 (round = draft L tokens + one target verify pass); DropMatch
(arXiv 2603.03333) Fig. 2: the K dropout heads read the target's final hidden states of the verify pass.

Up to ``batch_size`` (B) sequences decode together; each keeps its own accepted length. A sample joins with
its own prefill (prompt prefix reused across samples), which yields its first output token (as vLLM does);
then rounds follow, for all rows at once. One round, for each row's committed tokens ``ids`` (the last one,
``pending``, not yet in the target cache):
  1. draft: one draft forward per draft step for all rows (the first step also feeds what each row's draft
     cache lacks, left-padded); L tokens per row; for rules with ``needs_hidden`` (Auto-Judge) one more step
     reads ``d_L``, so the draft's hidden state after each draft token is known (``draft_hidden`` ``[B, L, d]``);
  2. verify: ONE target forward over ``[pending, d_1..d_L]`` of every row -> hidden ``[B, L+1, d]``;
  3. decide: ``criteria.verify.verify_round`` (plain + dropout heads, the rule, each row's own random stream);
     with the sparse variant and ``HeadSpec.audit_share`` > 0, a hashed share of each sample's rounds is also
     decided by the exact rule on the same masks (``runners.backends.decide.decide_round``; the decision stays);
  4. commit ``d_1..d_a, next`` per row; rejected slots leave both caches (``runners.backends.batch_kv``).
A finished row leaves the batch with its result, and the next sample takes its place. L = 0 is the
autoregressive baseline through the same loop (no draft model, one target step per round). Per-sample timing
(``wall_s`` = time in the batch, ``share_s`` = share of the batch's wall time): ``runners.backends.batch_rows``.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator

import torch

import criteria.rules  # noqa: F401  (registers the rules, e.g. the first token's ``autoregressive``)
from criteria.audit import AuditTally
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.registry import CRITERIA
from criteria.verify import trace_to_json, verify_round
from runners.backends.base import DecodingConfig, SampleResult, check_prompts_fit
from runners.backends.batch_kv import BatchKV
from runners.backends.batch_rows import BatchClock, Row, StopCheck
from runners.backends.cpu_attention import use_cpu_gqa
from runners.backends.decide import decide_round
from runners.backends.kv_state import KVState, PrefixCache
from runners.backends.output import (
    count_mismatched,
    cut_rounds,
    end_of_sequence_ids,
    finalize,
    round_counters,
)
from runners.backends.seeding import make_generator, sample_seed
from runners.datasets.base import Sample, prompt_token_ids
from runners.registry import BACKENDS

_PREFIX_CACHES: dict[int, PrefixCache] = {}


def context_limit(model: Any) -> int | None:
    """The positions a transformers model was trained for (``max_position_embeddings`` of its text config), None
    for a config without it."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    limit = getattr(text, "max_position_embeddings", None)
    return None if limit is None else int(limit)


def draft_choice(
    logits: torch.Tensor,
    temperature: float,
    generators: list[torch.Generator],
    need_probs: bool,
    vocab_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The draft's tokens for B rows from ``logits`` ``[B, V_rows]`` float32: argmax (T = 0) or one sample per row.

    ``vocab_size`` V (the pair's shared tokenizer vocabulary, ``<= V_rows``): the LM head's rows beyond it are
    padding and are cut first, so the draft never proposes an id the tokenizer (or the target) lacks and its
    probabilities line up with the target's ``[..., V]``. None: all rows.

    RNG (T > 0): one ``torch.multinomial`` per row, from that row's generator.

    Returns:
        ``(tokens [B] int64, probs)``; ``probs`` ``[B, V]`` float32 is the distribution each token came from
        (softmax at scale ``max(T, 1)``: the JS rule's ``p_hat``), or None when not needed at T = 0.
    """
    if vocab_size is not None:
        logits = logits[..., :vocab_size]
    if temperature == 0:
        return logits.argmax(dim=-1), (torch.softmax(logits, dim=-1) if need_probs else None)
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.cat(
        [torch.multinomial(probs[i], 1, generator=g) for i, g in enumerate(generators)]
    ), probs


def commit_round(rows: list[Row], res: Any, drafts: torch.Tensor, L: int) -> None:
    """Each row takes its round: the accepted drafts and the next token, the accepted count, which accepted
    drafts differ from the target's greedy token, and its trace.

    Args:
        rows: the batch's rows, in the order of ``res``.
        res: the round's :class:`criteria.base.AcceptResult` (``target_argmax`` filled by the rule or ``verify_round``).
        drafts: ``[B, L]`` int64, the drafted tokens.
        L: draft length.
    """
    acc, nxt, dl = res.num_accepted.tolist(), res.next_token_ids.tolist(), drafts.tolist()
    off = (res.accept_mask & (drafts != res.target_argmax)).int().tolist()
    for i, r in enumerate(rows):
        a = int(acc[i])
        r.accepted.append(a)
        r.mismatched.append(off[i][:a])
        if r.traces is not None and res.trace:
            r.traces.append(trace_to_json(res.trace, i, min(a + 1, L)))
        r.commit(dl[i][:a] + [int(nxt[i])])


@BACKENDS.register("hf")
class HFLoopBackend:
    """transformers draft-verify loop (the reference the vLLM backend is checked against).

    Args:
        pair: a :class:`runners.models.loader.LoadedPair`; its ``vocab_size`` (else ``len(pair.tokenizer)``) is
            the vocabulary both LM heads are cut to (draft and target may pad their heads differently).
        prefix_caching: reuse the KV cache of the shared prompt prefix (few-shot block) across samples.
        batch_size: B, sequences decoded together (>= 1).

    Raises:
        ValueError: ``batch_size`` < 1 (names ``backend.batch_size``).
    """

    name = "hf"

    def __init__(
        self, pair: Any, prefix_caching: bool = True, batch_size: int = 1, **_: Any
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"backend.batch_size={batch_size!r} is invalid; allowed: an integer >= 1"
            )
        self.pair = pair
        for model in (
            pair.target,
            getattr(pair, "draft", None),
        ):  # the loop's CPU attention, however the pair was loaded
            use_cpu_gqa(model)
        self.tokenizer = pair.tokenizer
        self.chat_template_kwargs = dict(
            getattr(pair, "chat_template_kwargs", None) or {}
        )  # pair's template options
        self.prefix_caching = prefix_caching
        self.batch_size = batch_size
        self.vocab_size = int(getattr(pair, "vocab_size", None) or len(pair.tokenizer))
        self.eos_ids = end_of_sequence_ids(
            pair.tokenizer,
            getattr(getattr(pair.target, "generation_config", None), "eos_token_id", None),
        )

    def context_limits(self, decoding: DecodingConfig) -> dict[str, tuple[int, bool]]:
        """The contexts a run's prompts must fit (:func:`runners.backends.base.check_prompts_fit`): the
        ``max_position_embeddings`` of each model that decodes, by name (none settable)."""
        L = int(decoding.num_speculative_tokens)
        models = {"draft": self.pair.draft} if L == 0 and decoding.ar_model == "draft" else {}
        if not models:
            models = {"target": self.pair.target, "draft": self.pair.draft if L > 0 else None}
        limits = {
            f"the {role}'s max_position_embeddings": context_limit(m)
            for role, m in models.items()
            if m is not None
        }
        return {what: (limit, False) for what, limit in limits.items() if limit is not None}

    def encode(self, sample: Sample) -> list[int]:
        """Prompt token ids: the target's chat template with the generation prompt (a final assistant message
        is continued), as lm-eval's HFLM builds them (:func:`runners.datasets.base.prompt_token_ids`), with the
        pair's ``chat_template_kwargs``."""
        return prompt_token_ids(self.tokenizer, sample.messages, self.chat_template_kwargs)

    def generate_one(
        self, sample: Sample, decoding: DecodingConfig, rule: Any, heads: HeadSpec
    ) -> SampleResult:
        """Decode one sample alone (batch of one)."""
        return next(iter(self.generate([sample], decoding, rule, heads, batch_size=1)))

    @torch.inference_mode()
    def generate(
        self,
        samples: Iterable[Sample],
        decoding: DecodingConfig,
        rule: Any,
        heads: HeadSpec,
        batch_size: int | None = None,
    ) -> Iterator[SampleResult]:
        """Decode ``samples`` B at a time, yielding each result as soon as its sample is finished.

        Raises:
            ValueError: ``decoding.top_p`` other than 1.0; L > 0 without a draft model; a prompt that does not fit
                a model's context with ``decoding.max_new_tokens`` (:func:`runners.backends.base.check_prompts_fit`).
        """
        if decoding.top_p != 1.0:
            raise ValueError(
                f"decoding.top_p={decoding.top_p} unsupported by backend=hf; allowed: 1.0"
            )
        L = int(decoding.num_speculative_tokens)
        if L > 0 and self.pair.draft is None:
            raise ValueError("num_speculative_tokens > 0 needs a draft model (pair.draft)")
        samples = list(samples)
        check_prompts_fit(self, samples, decoding)
        B = int(batch_size or self.batch_size)
        tmodel = self.pair.draft if (L == 0 and decoding.ar_model == "draft") else self.pair.target
        target = BatchKV(tmodel)
        draft = BatchKV(self.pair.draft) if L > 0 else None
        # both heads cut to the shared tokenizer's vocabulary: padded rows carry no mass on either side
        head = LMHead(target.lm_head_weight, target.lm_head_bias, vocab_size=self.vocab_size)
        rows: list[Row] = []
        clock = BatchClock()
        queue = iter(samples)
        while True:
            while (
                len(rows) < B
            ):  # fill: each sample joins after its own prefill (others wait meanwhile)
                sample = next(queue, None)
                if sample is None:
                    break
                row = self._join(sample, decoding, rule, heads, target, draft, tmodel, head)
                clock.tick(rows)
                row.t_join = clock.t
                rows.append(row)
                if row.done:
                    res = self._leave(rows, [row], target, draft, decoding)
                    t = time.perf_counter()
                    yield res
                    clock.skip(rows, time.perf_counter() - t)
            if not rows:
                return
            parts = self._round(rows, decoding, rule, heads, target, draft, head)
            # the exactness audit measures the decision, it is not part of decoding: its time is left out of
            # every clock (wall_s, share_s, hence tok/s) and kept apart in audit_s
            clock.skip(rows, parts["audit"])
            clock.tick(rows, parts)
            finished = [r for r in rows if r.done]
            if finished:
                # every finished row's result at the same instant: the caller's time on one result (skipped
                # below: it moves every row's clock) must not come off another's wall_s
                now = time.perf_counter()
                results = [self._result(r, decoding, now) for r in finished]
                for res in results:
                    t = time.perf_counter()
                    yield res
                    clock.skip(
                        rows, time.perf_counter() - t
                    )  # the caller's time (scoring, records) is not ours
                self._drop(rows, finished, target, draft)
            elif max(target.holes(), draft.holes() if draft else 0.0) > 0.25:
                target.compact()
                if draft is not None:
                    draft.compact()

    def _join(
        self,
        sample: Sample,
        decoding: DecodingConfig,
        rule: Any,
        heads: HeadSpec,
        target: BatchKV,
        draft: BatchKV | None,
        tmodel: Any,
        head: LMHead,
    ) -> Row:
        """Prefill one sample alone (prefix cache), emit its first token and add it to the batch."""
        t0 = time.perf_counter()
        L, T = int(decoding.num_speculative_tokens), float(decoding.temperature)
        prompt = self.encode(sample)
        gen = make_generator(
            sample_seed(decoding.seed, sample.sample_id, decoding.seed_stream), target.device
        )
        st = KVState(tmodel, self._prefix_for(tmodel))
        last = st.prefill(prompt)  # [d]
        # the first output token comes from the prefill's last position (as in vLLM)
        first_rule, first_heads = (
            (rule, heads) if L == 0 else (CRITERIA.get("autoregressive")(), HeadSpec())
        )
        no_drafts = torch.zeros((1, 0), dtype=torch.long, device=target.device)
        first = verify_round(
            last[None, None],
            head,
            no_drafts,
            first_rule,
            first_heads,
            temperature=T,
            generators=[gen],
        )
        target.add(st.cache)
        if draft is not None:
            ds = KVState(draft.model, self._prefix_for(draft.model))
            ds.prefill(prompt)
            draft.add(ds.cache)
        row = Row(
            sample=sample,
            ids=list(prompt),
            prompt_len=len(prompt),
            gen=gen,
            stop=StopCheck(self.tokenizer, self.eos_ids, decoding.stop, decoding.max_new_tokens),
            prefill_s=0.0,
            traces=[] if decoding.trace else None,
            audit=AuditTally() if heads.audit_share > 0 and L > 0 else None,
        )
        row.commit([int(first.next_token_ids[0])])
        row.prefill_s = time.perf_counter() - t0
        return row

    def _prefix_for(self, model: Any) -> PrefixCache | None:
        """The prefix cache of ``model``: one per model object, shared by every run of this process."""
        if not self.prefix_caching:
            return None
        return _PREFIX_CACHES.setdefault(id(model), PrefixCache())

    def _round(
        self,
        rows: list[Row],
        decoding: DecodingConfig,
        rule: Any,
        heads: HeadSpec,
        target: BatchKV,
        draft: BatchKV | None,
        head: LMHead,
    ) -> dict[str, float]:
        """One draft-verify round of every row; returns its draft / verify / criterion seconds."""
        L, T, dev = int(decoding.num_speculative_tokens), float(decoding.temperature), target.device
        gens = [r.gen for r in rows]
        needs_q = bool(rule.needs_draft_probs) or bool(decoding.trace)
        needs_h = bool(getattr(rule, "needs_hidden", False))
        t0 = time.perf_counter()
        drafts = torch.empty((len(rows), L), dtype=torch.long, device=dev)
        qs, dh = [], []
        if L > 0:
            # step 1 feeds what each row's draft cache lacks (1 or 2 tokens), left-padded to a common width
            have = draft.lengths()
            lack = [r.ids[n:] for r, n in zip(rows, have)]
            width = max(len(x) for x in lack)
            feed = torch.tensor(
                [[0] * (width - len(x)) + x for x in lack], dtype=torch.long, device=dev
            )
            ok = torch.tensor(
                [[False] * (width - len(x)) + [True] * len(x) for x in lack], device=dev
            )
            h = draft.forward(feed, None if bool(ok.all()) else ok)[:, -1]  # [B, d]
            for k in range(L):
                if k > 0:
                    h = draft.forward(drafts[:, k - 1 : k])[:, -1]  # after reading d_k
                    if needs_h:
                        dh.append(h)
                drafts[:, k], q = draft_choice(draft.logits(h), T, gens, needs_q, self.vocab_size)
                if q is not None:
                    qs.append(q)
            if needs_h:  # Auto-Judge's "DD" feature at d_L: one more draft step reads it (the authors' L+1 draft calls)
                dh.append(draft.forward(drafts[:, L - 1 : L])[:, -1])
        t1 = time.perf_counter()
        pending = torch.tensor([[r.ids[-1]] for r in rows], dtype=torch.long, device=dev)
        hidden = target.forward(torch.cat([pending, drafts], dim=1))  # [B, L+1, d]
        t2 = time.perf_counter()
        res, _, audit_s = decide_round(
            rows,
            hidden,
            head,
            drafts,
            rule,
            heads,
            seed=decoding.seed,
            trace=decoding.trace,
            temperature=T,
            draft_probs=torch.stack(qs, dim=1) if (needs_q and L > 0) else None,
            draft_hidden=torch.stack(dh, dim=1) if dh else None,
        )
        commit_round(rows, res, drafts, L)
        num = res.num_accepted.to(dev)
        target.keep_last(L + 1, num + 1)  # pending + accepted drafts
        if draft is not None and needs_h:  # d_1..d_L were fed (steps 2..L and the extra step)
            draft.keep_last(L, num)
        elif draft is not None and L > 1:  # d_1..d_{L-1} were fed in steps 2..L
            draft.keep_last(L - 1, num.clamp(max=L - 1))
        t3 = time.perf_counter()
        return {
            "draft": t1 - t0,
            "verify": t2 - t1,
            "criterion": t3 - t2 - audit_s,
            "audit": audit_s,
        }

    def _drop(
        self, rows: list[Row], gone: list[Row], target: BatchKV, draft: BatchKV | None
    ) -> None:
        keep = [i for i, r in enumerate(rows) if r not in gone]
        target.compact(keep)
        if draft is not None:
            draft.compact(keep)
        rows[:] = [rows[i] for i in keep]

    def _leave(
        self,
        rows: list[Row],
        gone: list[Row],
        target: BatchKV,
        draft: BatchKV | None,
        decoding: DecodingConfig,
    ) -> SampleResult:
        """A row finished at its prefill (first token EOS or a one-token cap)."""
        now = time.perf_counter()
        self._drop(rows, gone, target, draft)
        return self._result(gone[0], decoding, now)

    def _result(self, row: Row, decoding: DecodingConfig, now: float) -> SampleResult:
        L = int(decoding.num_speculative_tokens)
        out = finalize(
            row.out, self.tokenizer, self.eos_ids, list(decoding.stop), int(decoding.max_new_tokens)
        )
        kept = cut_rounds(row.accepted, out.emitted)
        traces = row.traces[: len(kept)] if row.traces is not None else None
        return SampleResult(
            sample_id=row.sample.sample_id,
            output_text=out.text,
            output_token_ids=out.token_ids,
            counters=round_counters(kept, L, mismatched=count_mismatched(row.mismatched, kept)),
            num_output_tokens=len(out.token_ids),
            wall_s=now - row.t_join,
            prefill_s=row.prefill_s,
            draft_s=row.timing["draft"],
            verify_s=row.timing["verify"],
            criterion_s=row.timing["criterion"],
            audit_s=row.timing["audit"],
            accepted_per_round=kept,
            stop_reason=out.stop_reason,
            eos_removed=out.eos_removed,
            trace=traces,
            share_s=row.share_s,
            audit=row.audit.record(len(kept)) if row.audit is not None else None,
            plain_s=row.timing.get("plain"),
            rule_s=row.timing.get("rule"),
            escape=dict(row.escape) or None,
        )
