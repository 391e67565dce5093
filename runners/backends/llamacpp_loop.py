"""The batched draft-verify loop on llama.cpp: the pair's GGUF files run at their own precision, CPU.

Paper: Leviathan et al. 2023 Alg. 1 (round = draft L tokens + one target verify pass); DropMatch (arXiv
2603.03333) Fig. 2: the K dropout heads read the target's final hidden states of the verify pass.

The same rounds as the reference loop (``runners.backends.hf_loop``), on two llama.cpp contexts (target, draft),
each with one KV sequence per row (``runners.backends.llamacpp_seqs``). One round for the B rows:
  1. draft: L ``llama_decode`` calls, each for all rows (the first feeds what each row's draft sequence lacks,
     1 or 2 tokens); the draft's logits give d_1..d_L (and their probabilities for rules that need them);
  2. verify: ONE ``llama_decode`` of ``[pending, d_1..d_L]`` of every row -> the target's logits ``[B, L+1, V]``
     and final normed hidden states ``[B, L+1, d]``;
  3. decide: ``criteria.verify.verify_round`` with the engine's logits as the plain head (no LM-head matmul;
     with MC-dropout heads, only the K head rows, on the GGUF's output weight dequantised: ``llamacpp_head``);
     with the sparse variant and ``HeadSpec.audit_share`` > 0, the hashed share of rounds is also decided by the
     exact rule on the same masks (``runners.backends.decide.decide_round``), as in the HF loop;
  4. commit ``d_1..d_a, next`` per row (``hf_loop.commit_round``: accepted counts, accepted drafts off the
     target's argmax, traces); rejected positions leave both sequences (``llama_memory_seq_rm``).
Both engines' output rows beyond the shared tokenizer's vocabulary V are cut before anything reads them, so padded
ids carry no probability, as in the HF loop (the embedded pair's GGUF tokenizer lists its padding as tokens:
V = 151,936 = its head rows, nothing cut).
Every decision is made by our code; llama.cpp only computes forwards. Tokenisation is the pair's transformers
tokenizer (the GGUF's vocabulary is the same), so prompts are the token ids the HF loop feeds.
Per-sample timing, rows and stop checks: ``runners.backends.batch_rows`` (as the HF loop).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

import criteria.rules  # noqa: F401  (registers the rules, e.g. the first token's ``autoregressive``)
from criteria.audit import AuditTally
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.registry import CRITERIA
from criteria.verify import verify_round
from runners.backends.base import DecodingConfig, SampleResult, check_prompts_fit
from runners.backends.batch_rows import BatchClock, Row, StopCheck
from runners.backends.decide import decide_round
from runners.backends.hf_loop import commit_round, draft_choice
from runners.backends.llamacpp_context import Feed, GGUFModel, SeqContext, threads
from runners.backends.llamacpp_head import gguf_lm_head
from runners.backends.llamacpp_seqs import SeqPool
from runners.backends.output import (
    count_mismatched,
    cut_rounds,
    end_of_sequence_ids,
    generation_eos,
    finalize,
    round_counters,
)
from runners.backends.seeding import make_generator, sample_seed
from runners.datasets.base import Sample, prompt_token_ids
from runners.models.sources import gguf_file
from runners.registry import BACKENDS

logger = logging.getLogger(__name__)

_ENGINES: dict[tuple, tuple[SeqContext, SeqPool]] = {}


@dataclass
class SeqRow(Row):
    """A :class:`Row` with its sequence ids in the target and draft contexts."""

    tseq: int = -1
    dseq: int = -1


def _positive_int(name: str, value: Any, allow_none: bool = False) -> None:
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"backend.{name}={value!r} is invalid; allowed: an integer >= 1"
            + (" or null" if allow_none else "")
        )


@BACKENDS.register("llamacpp")
class LlamaCppBackend:
    """Draft-verify loop on llama.cpp (``llama-cpp-python``), the GGUF weights at their own precision.

    Args:
        pair: a :class:`runners.models.loader.LoadedPair` loaded without transformers weights (its tokenizer,
            ``vocab_size`` and ``config``; the GGUF of each model comes from :func:`runners.models.sources.gguf_file`).
        batch_size: B, sequences decoded together (>= 1).
        n_ctx: KV cells per sequence: prompt + output + L tokens of a row must fit.
        n_batch: most tokens per ``llama_decode`` call (a longer feed is split; prompts are prefilled in calls of
            :data:`runners.backends.llamacpp_seqs.PREFILL_CHUNK` tokens).
        n_threads: CPU threads, null = ``DROPMATCH_THREADS`` or every core.
        prefix_caching: reuse the KV entries of a kept prompt's shared prefix (``kept_prompts`` of them).
        kept_prompts: prompts kept per context for prefix reuse.
        flash_attn: llama.cpp's flash attention: ``auto``, ``on`` or ``off``.
        kv_unified: one KV buffer shared by all sequences instead of one stream per sequence
            (:class:`runners.backends.llamacpp_context.SeqContext`: the default keeps each sequence's cells in
            position order, so an SD decode attends as the AR decode does).
        repack: llama.cpp's CPU weight repacking (:class:`runners.backends.llamacpp_context.GGUFModel`: off keeps
            a token's logits independent of how many tokens its batch holds, so greedy SD == AR).

    Raises:
        ValueError: a field out of range (names ``backend.<field>`` and the allowed values).
    """

    name = "llamacpp"

    def __init__(
        self,
        pair: Any,
        batch_size: int = 1,
        n_ctx: int = 2048,
        n_batch: int = 512,
        n_threads: int | None = None,
        prefix_caching: bool = True,
        kept_prompts: int = 2,
        flash_attn: str = "auto",
        kv_unified: bool = False,
        repack: bool = False,
        **_: Any,
    ) -> None:
        _positive_int("batch_size", batch_size)
        _positive_int("n_ctx", n_ctx)
        _positive_int("n_batch", n_batch)
        _positive_int("n_threads", n_threads, allow_none=True)
        if flash_attn not in ("auto", "on", "off"):
            raise ValueError(
                f"backend.flash_attn={flash_attn!r} is invalid; allowed: auto, on, off"
            )
        self.pair, self.tokenizer = pair, pair.tokenizer
        self.chat_template_kwargs = dict(getattr(pair, "chat_template_kwargs", None) or {})
        self.batch_size, self.n_ctx, self.n_batch = batch_size, n_ctx, n_batch
        self.n_threads, self.flash_attn = threads(n_threads), flash_attn
        self.unified, self.repack = bool(kv_unified), bool(repack)
        self.kept = int(kept_prompts) if prefix_caching else 0
        self.eos_ids = end_of_sequence_ids(pair.tokenizer, generation_eos(pair.target_dir))
        self.vocab_size = int(getattr(pair, "vocab_size", None) or len(pair.tokenizer))

    def context_limits(self, decoding: DecodingConfig) -> dict[str, tuple[int, bool]]:
        """The context a run's prompts must fit (:func:`runners.backends.base.check_prompts_fit`): each
        sequence's KV cells, ``backend.n_ctx`` (settable)."""
        return {"backend.n_ctx": (self.n_ctx, True)}

    def encode(self, sample: Sample) -> list[int]:
        """Prompt token ids, exactly as the HF loop builds them (:func:`runners.datasets.base.prompt_token_ids`)."""
        return prompt_token_ids(self.tokenizer, sample.messages, self.chat_template_kwargs)

    def gguf(self, role: str):
        """The GGUF file of ``role`` (``target`` / ``draft``) of the pair."""
        return gguf_file(self.pair.config[role])

    def engine(self, role: str, rows: int) -> tuple[SeqContext, SeqPool]:
        """The context and sequence pool of ``role``'s GGUF for ``rows`` rows, made once per process.

        The target's context also extracts the final normed hidden states (the dropout heads' input); the draft's
        does not.
        """
        path = self.gguf(role)
        hidden = role == "target"
        key = (
            str(path),
            role,
            rows,
            self.kept,
            self.n_ctx,
            self.n_batch,
            self.n_threads,
            self.flash_attn,
            self.unified,
            self.repack,
        )
        if key not in _ENGINES:
            model = GGUFModel.load(path, self.repack)
            declared = (self.pair.config[role].get("pinned") or {}).get("file_type")
            if (
                declared and declared != model.file_type
            ):  # the run's model_identity names the declared type
                raise ValueError(
                    f"pair.{role}.pinned.file_type={declared!r} but {path} is {model.file_type}; "
                    f"allowed: {model.file_type}"
                )
            ctx = SeqContext(
                model,
                n_seq=rows + self.kept,
                n_ctx=self.n_ctx,
                n_batch=self.n_batch,
                n_threads=self.n_threads,
                hidden=hidden,
                flash_attn=self.flash_attn,
                unified=self.unified,
            )
            _ENGINES[key] = (ctx, SeqPool(ctx, rows, self.kept))
            logger.info(
                "[llamacpp] %s: %s (%s), %d rows, n_ctx %d, %d threads",
                role, model.desc, model.file_type, rows, self.n_ctx, self.n_threads,
            )  # fmt: skip
        ctx, pool = _ENGINES[key]
        pool.reset_rows()
        return ctx, pool

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
            ValueError: ``decoding.top_p`` other than 1.0; a rule that reads hidden states (Auto-Judge); a prompt
                that does not fit ``backend.n_ctx`` with ``decoding.max_new_tokens``
                (:func:`runners.backends.base.check_prompts_fit`).
        """
        if decoding.top_p != 1.0:
            raise ValueError(
                f"decoding.top_p={decoding.top_p} unsupported by backend=llamacpp; allowed: 1.0"
            )
        if getattr(rule, "needs_hidden", False):
            raise ValueError(f"method {rule.name!r} reads draft hidden states; use backend=hf")
        samples = list(samples)
        check_prompts_fit(self, samples, decoding)
        L = int(decoding.num_speculative_tokens)
        B = int(batch_size or self.batch_size)
        main = "draft" if (L == 0 and decoding.ar_model == "draft") else "target"
        tctx, tpool = self.engine(main, B)
        dctx, dpool = self.engine("draft", B) if L > 0 else (None, None)
        head = gguf_lm_head(self.gguf(main), self.vocab_size) if heads.active else None
        rows: list[SeqRow] = []
        clock = BatchClock()
        queue = iter(samples)
        while True:
            while len(rows) < B:  # fill: each sample joins after its own prefill
                sample = next(queue, None)
                if sample is None:
                    break
                row = self._join(sample, decoding, rule, heads, tpool, dpool, head)
                clock.tick(rows)
                row.t_join = clock.t
                rows.append(row)
                if row.done:
                    now = time.perf_counter()
                    self._drop(rows, [row], tpool, dpool)
                    res = self._result(row, decoding, now)
                    t = time.perf_counter()
                    yield res
                    clock.skip(rows, time.perf_counter() - t)
            if not rows:
                return
            parts = self._round(rows, decoding, rule, heads, tctx, dctx, head)
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
                    clock.skip(rows, time.perf_counter() - t)  # the caller's time is not ours
                self._drop(rows, finished, tpool, dpool)

    def _join(
        self,
        sample: Sample,
        decoding: DecodingConfig,
        rule: Any,
        heads: HeadSpec,
        tpool: SeqPool,
        dpool: SeqPool | None,
        head: LMHead | None,
    ) -> SeqRow:
        """Prefill one sample alone (kept prefix reused), emit its first token and add it to the batch."""
        t0 = time.perf_counter()
        L, T = int(decoding.num_speculative_tokens), float(decoding.temperature)
        prompt = self.encode(sample)
        gen = make_generator(sample_seed(decoding.seed, sample.sample_id, decoding.seed_stream))
        tseq = tpool.acquire()
        logits, hidden = tpool.prefill(tseq, prompt)  # [V], [d]
        # the first output token comes from the prefill's last position (as in vLLM and the HF loop)
        first_rule, first_heads = (
            (rule, heads) if L == 0 else (CRITERIA.get("autoregressive")(), HeadSpec())
        )
        first = verify_round(
            torch.from_numpy(hidden)[None, None],
            head,
            torch.zeros((1, 0), dtype=torch.long),
            first_rule,
            first_heads,
            temperature=T,
            generators=[gen],
            target_logits=torch.from_numpy(logits)[None, None, : self.vocab_size],
        )
        dseq = -1
        if dpool is not None:
            dseq = dpool.acquire()
            dpool.prefill(dseq, prompt)
        row = SeqRow(
            sample=sample,
            ids=list(prompt),
            prompt_len=len(prompt),
            gen=gen,
            stop=StopCheck(self.tokenizer, self.eos_ids, decoding.stop, decoding.max_new_tokens),
            prefill_s=0.0,
            traces=[] if decoding.trace else None,
            audit=AuditTally() if heads.audit_share > 0 and L > 0 else None,
            tseq=tseq,
            dseq=dseq,
        )
        row.commit([int(first.next_token_ids[0])])
        row.prefill_s = time.perf_counter() - t0
        return row

    def _round(
        self,
        rows: list[SeqRow],
        decoding: DecodingConfig,
        rule: Any,
        heads: HeadSpec,
        tctx: SeqContext,
        dctx: SeqContext | None,
        head: LMHead | None,
    ) -> dict[str, float]:
        """One draft-verify round of every row; returns its draft / verify / criterion seconds."""
        L, T, B = int(decoding.num_speculative_tokens), float(decoding.temperature), len(rows)
        needs_q = bool(rule.needs_draft_probs) or bool(decoding.trace)
        n = [
            len(r.ids) for r in rows
        ]  # committed ids; the last one (pending) is not yet in the target
        t0 = time.perf_counter()
        drafts, qs = self._draft(rows, L, T, needs_q, dctx)
        t1 = time.perf_counter()
        feed = []
        for i, r in enumerate(rows):
            toks = [r.ids[-1], *drafts[i].tolist()]
            feed += [Feed(r.tseq, n[i] - 1 + j, int(t), True) for j, t in enumerate(toks)]
        logits, hidden = tctx.decode(feed)  # [B*(L+1), V_rows], [B*(L+1), d]
        t2 = time.perf_counter()
        res, _, audit_s = decide_round(
            rows,
            torch.from_numpy(hidden).view(B, L + 1, -1),
            head,
            drafts,
            rule,
            heads,
            seed=decoding.seed,
            trace=decoding.trace,
            temperature=T,
            draft_probs=torch.stack(qs, dim=1) if (needs_q and L > 0) else None,
            target_logits=torch.from_numpy(logits).view(B, L + 1, -1)[..., : self.vocab_size],
        )
        commit_round(rows, res, drafts, L)
        for i, r in enumerate(rows):
            a = r.accepted[-1]
            tctx.truncate(r.tseq, n[i] + a)  # pending + accepted drafts
            if dctx is not None:  # d_1..d_{L-1} were fed; keep the accepted ones
                dctx.truncate(r.dseq, n[i] + min(a, L - 1))
        t3 = time.perf_counter()
        return {
            "draft": t1 - t0,
            "verify": t2 - t1,
            "criterion": t3 - t2 - audit_s,
            "audit": audit_s,
        }

    def _draft(
        self, rows: list[SeqRow], L: int, T: float, needs_q: bool, dctx: SeqContext | None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The draft's L tokens of every row (``[B, L]`` int64) and, when needed, their distributions (L of
        ``[B, V]``), from L ``llama_decode`` calls for all rows."""
        drafts = torch.empty((len(rows), L), dtype=torch.long)
        qs: list[torch.Tensor] = []
        if L == 0:
            return drafts, qs
        gens, n = [r.gen for r in rows], [len(r.ids) for r in rows]
        # step 1 feeds what each row's draft sequence lacks (1 or 2 tokens), output at its last one
        feed = []
        for r in rows:
            have = dctx.lengths[r.dseq]
            feed += [
                Feed(r.dseq, p, r.ids[p], p == len(r.ids) - 1) for p in range(have, len(r.ids))
            ]
        logits, _ = dctx.decode(feed)  # [B, V_rows]
        for k in range(L):
            if k > 0:  # read d_k at position n - 1 + k
                logits, _ = dctx.decode(
                    [Feed(r.dseq, n[i] - 1 + k, int(drafts[i, k - 1]), True) for i, r in enumerate(rows)]
                )  # fmt: skip
            drafts[:, k], q = draft_choice(
                torch.from_numpy(logits), T, gens, needs_q, self.vocab_size
            )
            if q is not None:
                qs.append(q)
        return drafts, qs

    def _drop(
        self, rows: list[SeqRow], gone: list[SeqRow], tpool: SeqPool, dpool: SeqPool | None
    ) -> None:
        for r in gone:
            tpool.release(r.tseq)
            if dpool is not None:
                dpool.release(r.dseq)
        rows[:] = [r for r in rows if r not in gone]

    def _result(self, row: SeqRow, decoding: DecodingConfig, now: float) -> SampleResult:
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
