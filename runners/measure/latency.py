"""Table 4 measurement: the cost of one verify step of the target, split into its parts, as a run record.

Paper: DropMatch (arXiv 2603.03333) Sec. 4.1, Table 4 (Llama-3.1-70B-Instruct, batch 1, n_input = 5,
p_drop = 0.3: LM head 0.05% of the full forward; MC dropout + JS divergence 1.64% in total).

Timed with the functions the HF loop calls, on the target whose KV cache holds ``method.context`` random
tokens, batch 1, n_input = L + 1 (the pending token and L drafts), the pair's dtype (``pair.dtype=...``):
  - ``decode_step``: ``KVState.forward`` over 1 token + the plain LM head, cache cropped back (one AR step);
  - ``verify_pass``: the same over L + 1 tokens (one SD verify pass);
  - ``lm_head``: ``KVState.logits`` on the L + 1 final hidden states ``[L+1, d] -> [L+1, V]``;
  - ``mc_dropout_heads``: ``criteria.dropout_heads.dropout_head_logits`` with K heads (one matmul, plain row +
    K dropout rows ``[L+1, 1+K, V]``) and the loop's float32 copies of both parts;
  - ``js_divergence``: ``criteria.dropmatch_base.js_statistics`` over the L draft positions (Eq. 5-6);
  - ``dropmatch_criterion``: the whole ``dropmatch_js`` rule call (head tokens, JS, majority, Algorithm 1);
  - ``verify_round_sd`` / ``verify_round_dm``: :func:`criteria.verify.verify_round` on the verify pass's
    hidden states with ``greedy_match`` / ``dropmatch_js``, as the HF loop and the vLLM hook call it (heads only
    at the L drafted positions, JS only where Eq. 7 fails, head matmul in the model's dtype): their
    difference is the DropMatch decision overhead the loop actually pays;
  - ``verify_round_dm_sparse``: the same round with the sparse variant (``method.sparse_top_n`` candidates per
    position; its decision agreement with the exact rule is Table 3's footer, from traces, and every audited
    run's footer);
  - ``verify_round_dm_audited``: a sparse round that is also audited (``method.audit_share`` > 0):
    :func:`criteria.audit.audited_verify_round`, the sparse decision plus the exact rule's on the same masks.
    A run audits a share a of its rounds, so its decision costs ``(1 - a) * sparse + a * audited`` per round
    on average (``latency/dm_audited_round_share``).
Each repeat runs the components back to back (round-robin), so load from other processes hits them alike;
``method.warmup`` untimed repeats start every session. One record line per timed repeat (seconds per
component); the summary holds medians, quartiles and the per-repeat (paired) ratios:
``latency/verify_over_decode`` = verify_pass / decode_step, ``latency/dm_overhead_share`` =
(mc_dropout_heads - lm_head + js_divergence) / verify_pass (the paper's split: every head at every position) and
``latency/dm_round_share`` = (verify_round_dm - verify_round_sd) / verify_pass (as the loop runs it), medians
over repeats.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import criteria.rules  # noqa: F401
from criteria.audit import audited_verify_round
from criteria.base import VerifyInputs
from criteria.dropmatch_base import js_statistics
from criteria.dropout_heads import HeadSpec, LMHead, dropout_head_logits
from criteria.registry import CRITERIA
from criteria.verify import verify_round
from runners.backends.kv_state import KVState
from runners.config.errors import ConfigError
from runners.measure.base import MEASUREMENTS, positive_int
from runners.models.loader import load_pair

COMPONENTS = (
    "decode_step",
    "verify_pass",
    "lm_head",
    "mc_dropout_heads",
    "js_divergence",
    "dropmatch_criterion",
    "verify_round_sd",
    "verify_round_dm",
    "verify_round_dm_sparse",
    "verify_round_dm_audited",
)
DTYPES = ("float32", "bfloat16", "float16", "auto")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Architecture fields stored with the timings (analysis.cost_model.model_dims reads them for the analytic model).
DIM_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "tie_word_embeddings",
)


def model_dims(model: Any) -> dict:
    """The raw :data:`DIM_KEYS` of a transformers model's config (None where the config lacks one)."""
    return {k: getattr(model.config, k, None) for k in DIM_KEYS}


class VerifyTimer:
    """The components of one verify step of ``model`` at batch 1, ready to time.

    Args:
        model: the target, a transformers causal LM (``model.model`` gives final hidden states).
        L: draft length; the verify pass feeds L + 1 tokens.
        K, p_drop: MC-dropout heads and their dropout probability.
        context: tokens already in the KV cache (random ids from ``seed``).
        sparse_top_n: also time the round with the sparse variant at this top-N (None: not timed).
        audit_share: > 0 (with ``sparse_top_n``): also time a sparse round that is audited by the exact rule.

    Raises:
        ValueError: ``L < 1``.
    """

    def __init__(
        self,
        model: Any,
        *,
        L: int,
        K: int,
        p_drop: float,
        context: int,
        seed: int = 0,
        sparse_top_n: int | None = None,
        audit_share: float = 0.0,
    ) -> None:

        if L < 1:
            raise ValueError(f"L={L} is invalid; allowed: an integer >= 1")
        state = KVState(model)
        self.device = state.lm_head_weight.device
        x = _step_inputs(model, state, L=L, K=K, p_drop=p_drop, context=context, seed=seed)
        self.fns = _components(
            state, x, context=context, sparse_top_n=sparse_top_n, audit_share=audit_share
        )

    @torch.inference_mode()
    def time_once(self) -> dict[str, float]:
        """One round-robin repeat: seconds per component in :data:`COMPONENTS`."""
        out = {}
        for name, fn in self.fns.items():
            _sync(self.device)
            t0 = time.perf_counter()
            fn()
            _sync(self.device)
            out[name] = time.perf_counter() - t0
        return out


@dataclass
class _StepInputs:
    """One verify step's inputs, made once: the L + 1 new ids after ``context`` cached tokens, their hidden
    states ``[L+1, d]``, random draft probabilities ``[L, V]``, the dropout-head logits ``[L+1, 1+K, V]`` (row 0:
    no dropout) and the generator the heads draw from."""

    L: int
    K: int
    p_drop: float
    new_ids: list[int]
    hidden: torch.Tensor
    draft_probs: torch.Tensor
    heads: torch.Tensor
    gen: torch.Generator


def _step_inputs(
    model: Any, state: KVState, *, L: int, K: int, p_drop: float, context: int, seed: int
) -> _StepInputs:
    W, b = state.lm_head_weight, state.lm_head_bias
    device, V = W.device, W.shape[0]
    g = torch.Generator().manual_seed(seed)
    vocab = int(getattr(model.config, "vocab_size", V))
    with torch.inference_mode():
        state.forward(torch.randint(0, vocab, (context,), generator=g).tolist())
        new_ids = torch.randint(0, vocab, (L + 1,), generator=g).tolist()
        hidden = state.forward(new_ids)  # [L+1, d]
        state.rollback(context)
        plain = state.logits(hidden)  # [L+1, V] float32
        draft_probs = torch.softmax(
            plain[:L] + 0.5 * torch.randn(L, V, generator=g).to(device), dim=-1
        )  # [L, V]
        gen = torch.Generator(device=device).manual_seed(seed)
        heads = dropout_head_logits(
            hidden, W, b, num_heads=K, p_drop=p_drop, generator=gen
        ).float()  # [L+1, 1+K, V]
    return _StepInputs(L, K, p_drop, new_ids, hidden, draft_probs, heads, gen)


def _components(
    state: KVState, x: _StepInputs, *, context: int, sparse_top_n: int | None, audit_share: float
) -> dict[str, Callable[[], None]]:
    """``{component: a function doing it once}`` for :data:`COMPONENTS` (+ the sparse round, and the audited sparse
    round, when asked)."""
    W, b, L, K, p_drop, gen = state.lm_head_weight, state.lm_head_bias, x.L, x.K, x.p_drop, x.gen
    head_logits = x.heads[None, :, 1:]  # [1, L+1, K, V]
    rule = CRITERIA.get("dropmatch_js")()
    inputs = VerifyInputs(
        draft_token_ids=x.draft_probs.argmax(dim=-1)[None],
        target_logits=x.heads[None, :, 0],
        draft_probs=x.draft_probs[None],
        head_logits=head_logits,
        temperature=0.0,
        generator=gen,
    )

    def step(ids: list[int]) -> Callable[[], None]:
        def fn() -> None:
            state.logits(state.forward(ids))
            state.rollback(context)

        return fn

    drafts = x.draft_probs.argmax(dim=-1)[None]  # [1, L]
    lm_head = LMHead(W, b)  # as the HF loop builds it
    greedy, spec = CRITERIA.get("greedy_match")(), HeadSpec(K, p_drop)

    def round_with(r: Any, heads: Any) -> Callable[[], None]:
        return lambda: verify_round(
            x.hidden[None],
            lm_head,
            drafts,
            r,
            heads,
            temperature=0.0,
            generators=[gen],
            draft_probs=x.draft_probs[None],
        )

    def mc_heads() -> None:
        out = dropout_head_logits(
            x.hidden, W, b, num_heads=K, p_drop=p_drop, generator=gen
        )  # [L+1, 1+K, V]
        out[:, 0].float(), out[:, 1:].float()

    fns: dict[str, Callable[[], None]] = {
        "decode_step": step(x.new_ids[:1]),
        "verify_pass": step(x.new_ids),
        "lm_head": lambda: state.logits(x.hidden),
        "mc_dropout_heads": mc_heads,
        "js_divergence": lambda: js_statistics(head_logits[:, :L], x.draft_probs[None], 0.0),
        "dropmatch_criterion": lambda: rule(inputs),
        "verify_round_sd": round_with(greedy, HeadSpec()),
        "verify_round_dm": round_with(rule, spec),
    }
    if sparse_top_n is not None:
        fns["verify_round_dm_sparse"] = round_with(
            rule, HeadSpec(K, p_drop, top_n=int(sparse_top_n))
        )
    if sparse_top_n is not None and audit_share > 0:
        audited = HeadSpec(K, p_drop, top_n=int(sparse_top_n), audit_share=float(audit_share))
        fns["verify_round_dm_audited"] = lambda: audited_verify_round(
            x.hidden[None],
            lm_head,
            drafts,
            rule,
            audited,
            temperature=0.0,
            generators=[gen],
            audit_rows=[0],
            draft_probs=x.draft_probs[None],
        )
    return fns


def paired_ratios(seconds: Mapping[str, float], audit_share: float = 0.0) -> dict[str, float]:
    """Per-repeat ratios: verify / decode, DM decision overhead (K extra rows + JS) and whole-rule share of verify;
    with ``audit_share`` a > 0, the sparse decision audited on a share a of the rounds, amortised:
    ``((1 - a) * verify_round_dm_sparse + a * verify_round_dm_audited - verify_round_sd) / verify_pass``."""
    verify = seconds["verify_pass"]
    extra = seconds["mc_dropout_heads"] - seconds["lm_head"]
    out = {
        "verify_over_decode": verify / seconds["decode_step"],
        "dm_overhead_share": (extra + seconds["js_divergence"]) / verify,
        "dm_rule_share": (extra + seconds["dropmatch_criterion"]) / verify,
    }
    if "verify_round_dm" in seconds:  # records from before the in-loop components lack them
        out["dm_round_share"] = (seconds["verify_round_dm"] - seconds["verify_round_sd"]) / verify
    if "verify_round_dm_sparse" in seconds:
        out["dm_sparse_round_share"] = (
            seconds["verify_round_dm_sparse"] - seconds["verify_round_sd"]
        ) / verify
    if "verify_round_dm_audited" in seconds and audit_share > 0:
        a = float(audit_share)
        amortised = (1 - a) * seconds["verify_round_dm_sparse"] + a * seconds[
            "verify_round_dm_audited"
        ]
        out["dm_audited_round_share"] = (amortised - seconds["verify_round_sd"]) / verify
    return out


def summarize_timings(
    lines: Sequence[Mapping[str, Any]], key: str = "seconds", audit_share: float = 0.0
) -> dict:
    """``latency/<component>/{median,q25,q75}_ms`` and the medians of :func:`paired_ratios` over ``lines``."""
    if not lines:
        return {}
    out: dict[str, Any] = {}
    for comp in COMPONENTS:
        if comp not in lines[0][key]:
            continue
        xs = [1e3 * ln[key][comp] for ln in lines]
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
        out.update(
            {
                f"latency/{comp}/median_ms": statistics.median(xs),
                f"latency/{comp}/q25_ms": q[0],
                f"latency/{comp}/q75_ms": q[2],
            }
        )
    ratios = [paired_ratios(ln[key], audit_share) for ln in lines]
    for r in ratios[0]:
        out[f"latency/{r}"] = statistics.median(x[r] for x in ratios)
    med = {c: out[f"latency/{c}/median_ms"] for c in COMPONENTS if f"latency/{c}/median_ms" in out}
    out["latency/dm_overhead_ms"] = med["mc_dropout_heads"] - med["lm_head"] + med["js_divergence"]
    loads = [ln["loadavg_1min"] for ln in lines if ln.get("loadavg_1min") is not None]
    if loads:  # other processes on the machine while timing (> cores: contended)
        out["latency/loadavg_1min_max"] = max(loads)
    return out


def check_common(c: Mapping[str, Any]) -> None:
    """Fields every timing measurement reads: pair.dtype, method.context."""
    dtype = str(c["pair"].get("dtype"))
    if dtype not in DTYPES:
        raise ConfigError(f"pair.dtype={dtype!r} is invalid; allowed: {', '.join(DTYPES)}")
    positive_int(c, "context")


@MEASUREMENTS.register("latency")
class LatencyMeasurement:
    """Table 4's timing run: ``method.timing_repeats`` lines ``{"sample_id": "repeat/0003", "seconds": {...}}``.

    Config: ``L`` (n_input = L + 1), ``dropmatch.K`` / ``p_drop``, ``pair`` (+ ``pair.dtype``),
    ``method.context`` / ``warmup`` / ``timing_repeats``.
    """

    def __init__(self, c: Mapping[str, Any]) -> None:
        self.c = c
        m = c["method"]
        self.audit_share = (
            float(m.get("audit_share") or 0.0) if m.get("sparse_top_n") is not None else 0.0
        )

    @staticmethod
    def check(c: Mapping[str, Any]) -> None:
        check_common(c)
        positive_int(c, "warmup", minimum=0)
        positive_int(c, "timing_repeats")
        if c["method"].get("sparse_top_n") is not None:
            positive_int(c, "sparse_top_n")
        a = c["method"].get("audit_share")
        if a is not None and (
            isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= float(a) <= 1
        ):
            raise ConfigError(
                f"method.audit_share={a!r} is invalid; allowed: a number in [0, 1] or null (the share of "
                "rounds the timed sparse decision also decides exactly; needs method.sparse_top_n)"
            )

    def unit_ids(self) -> list[str]:
        return [f"repeat/{i:04d}" for i in range(int(self.c["method"]["timing_repeats"]))]

    def measure(self, todo: Sequence[str], log: Callable[[str], None]) -> Iterator[dict]:

        c, m = self.c, self.c["method"]
        pair = load_pair(c["pair"], need_draft=False, log=log)
        timer = VerifyTimer(
            pair.target,
            L=int(c["L"]),
            K=int(c["dropmatch"]["K"]),
            p_drop=float(c["dropmatch"]["p_drop"]),
            context=int(m["context"]),
            seed=int(c["decoding"]["seed"]),
            sparse_top_n=m.get("sparse_top_n"),
            audit_share=float(m.get("audit_share") or 0.0),
        )
        for _ in range(int(m["warmup"])):
            timer.time_once()
        model = {
            "dtype": str(pair.target.dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(),
            "bytes_per_param": pair.target.get_output_embeddings().weight.element_size(),
            "dims": model_dims(pair.target),
            "device": str(timer.device),
        }
        log(f"[latency] warm-up done ({m['warmup']} repeats); timing {len(todo)} repeats")
        for uid in todo:
            yield {
                "sample_id": uid,
                "seconds": timer.time_once(),
                "model": model,
                "loadavg_1min": os.getloadavg()[0],
            }

    def summarize(self, lines: Sequence[Mapping[str, Any]]) -> dict:
        c = self.c
        out = {
            "latency/L": int(c["L"]),
            "latency/n_input": int(c["L"]) + 1,
            "latency/K": int(c["dropmatch"]["K"]),
            "latency/p_drop": float(c["dropmatch"]["p_drop"]),
            "latency/context": int(c["method"]["context"]),
            **summarize_timings(lines, audit_share=self.audit_share),
        }
        if self.audit_share > 0:
            out["latency/audit_share"] = self.audit_share
        if lines:
            model = lines[-1]["model"]
            out.update(
                {
                    "model/dtype": model["dtype"],
                    "model/bytes_per_param": model["bytes_per_param"],
                    "model/dims": model["dims"],
                    "model/threads": sorted({ln["model"]["threads"] for ln in lines}),
                }
            )
        return out
