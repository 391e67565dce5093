"""One verify round, in one place: target hidden states -> plain + dropout heads -> the rule's decision.

Paper: DropMatch (arXiv 2603.03333) Fig. 2 and Algorithm 1 (the K MC-dropout heads read the target's final
hidden states of the verify pass); Leviathan et al. 2023 Alg. 1 (round = L drafts + one verify pass).

Every backend (the transformers loop and the vLLM hook) calls :func:`verify_round`, so for the same hidden
states, drafts and seeds they make the same decisions. It owns the order of random draws:

  for each row b (sequence), with that row's generator ``generators[b]``:
    1. the dropout masks, one ``torch.rand((L+1, K, d))`` (only when ``heads.K >= 1`` and ``p_drop > 0``);
    2. then, at T > 0 only, the rule's own draws (head tokens, acceptance uniforms, the emitted token).

Rows never share a stream, so a sequence decides the same in a batch of B as alone (up to the batch-shape
numerics of the forward pass that produced ``hidden``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from criteria.base import AcceptResult, RoundMeter, VerifyInputs
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.round_heads import round_heads


def verify_round(
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    draft_token_ids: torch.Tensor,
    rule: Any,
    heads: HeadSpec,
    *,
    temperature: float,
    generators: Sequence[torch.Generator | None],
    draft_probs: torch.Tensor | None = None,
    draft_hidden: torch.Tensor | None = None,
    trace: bool = False,
    target_logits: torch.Tensor | None = None,
    max_positions: int | None = None,
    meter: RoundMeter | None = None,
) -> AcceptResult:
    """Decide one round of B sequences with ``rule`` (Algorithm 1, Eq. 4, or Leviathan et al. Alg. 1; L = 0: one
    autoregressive step).

    Args:
        hidden: ``[B, L+1, d]`` the target's final hidden states at ``[pending, d_1..d_L]`` (model dtype).
        lm_head: the target's LM head (weight ``[V_rows, d]``, bias, real vocabulary size V).
        draft_token_ids: ``[B, L]`` int64.
        rule: a registered criterion (``criteria.registry.CRITERIA``), built from its own settings.
        heads: the run's :class:`HeadSpec`; must have ``K >= 1`` when ``rule.needs_heads``.
        temperature: ``>= 0`` (0 = greedy).
        generators: B seeded generators, one per row, on ``hidden``'s device.
        draft_probs: ``[B, L, V]`` float or None (required when the rule needs them).
        draft_hidden: ``[B, L, d_draft]`` or None, passed to rules with ``needs_hidden``.
        trace: ask the rule for its per-position trace.
        target_logits: ``[B, L+1, V]`` float32 or None: the engine's own plain logits (llama.cpp): the LM head
            computes only the head rows (:func:`criteria.round_heads.head_logits`); no heads: no matmul at all.
        max_positions: None, or P in ``[1, L]``: decide the round cut to its first P drafts (heads computed there
            only; the masks still drawn for all L + 1 positions: those of the whole round; :mod:`criteria.audit`).
        meter: None, or the round's :class:`criteria.base.RoundMeter` (plain logits ready, escape rungs); it
            changes no value and no random draw.

    Returns:
        :class:`AcceptResult`: ``accept_mask`` ``[B, L]`` (``[B, P]``), ``num_accepted``, ``next_token_ids`` ``[B]``.

    Raises:
        ValueError: shapes that do not fit (``draft_probs`` narrower than the target's vocabulary V: both must be
            cut to the shared tokenizer's vocabulary), a generator count other than B, a rule that needs heads
            with a HeadSpec of ``K = 0`` (names ``dropmatch.K``), ``max_positions`` outside ``[1, L]``, or the
            rule's own input errors.
    """
    B, N, P = _check_round(
        hidden, target_logits, draft_token_ids, rule, heads, generators, max_positions, trace
    )
    draft_probs = _cut_draft_probs(draft_probs, lm_head, target_logits, P)
    check = trace and heads.check_top_n is not None and heads.active
    given = target_logits  # the engine's plain logits (None: computed from hidden here)
    states = [None if g is None else g.get_state() for g in generators] if check else None
    positions, inputs = _round_inputs(
        rule,
        hidden,
        lm_head,
        heads,
        generators,
        P,
        draft_probs,
        target_logits,
        draft_token_ids,
        draft_hidden,
        temperature,
        meter,
    )
    inputs = _with_greedy(inputs, heads.top_n, P)
    res = _decide(rule, inputs, generators, trace)
    if res.target_argmax is None:
        greedy = inputs.target_greedy
        res = dataclasses.replace(
            res, target_argmax=_target_argmax(inputs, heads.top_n, P) if greedy is None else greedy
        )
    if check:  # (the check refuses a cut round: hidden is the whole round's)
        res = _sparse_check(
            res, inputs, hidden, lm_head, rule, heads, generators, states, positions, given
        )
    return res


def _with_greedy(inputs: VerifyInputs, top_n: int | None, P: int) -> VerifyInputs:
    """``inputs`` with ``target_greedy`` ``[B, P]`` set on a greedy (T = 0) sparse round: read off the candidates
    the heads' tokens needed (:func:`_target_argmax`), so that the rule's next token need not pass over V again."""
    if inputs.head_candidates is None or inputs.temperature != 0:
        return inputs
    return dataclasses.replace(inputs, target_greedy=_target_argmax(inputs, top_n, P))


def _target_argmax(inputs: VerifyInputs, top_n: int | None, P: int) -> torch.Tensor:
    """The plain head's greedy token at the first P positions, ``[B, P]`` int64: ``argmax`` of
    ``inputs.target_logits`` (the first of tied maxima). With the lazy sparse variant's candidates
    (``head_candidates`` ``[B, P', N' + 2]`` from :func:`criteria.candidates.head_token_candidates`: the plain
    head's top-N', N' = min(N, V), then the draft token and the rest entry) it is read off the top-N', a gather of
    N' logits per position instead of a pass over V; off the whole row where all N' tie or the maximum is NaN."""
    logits = inputs.target_logits[:, :P]  # [B, P, V]
    cand = inputs.head_candidates
    if cand is None or top_n is None or cand.shape[1] < P:
        return logits.argmax(dim=-1)
    V = logits.shape[-1]
    n = min(top_n, V)
    top = cand[:, :P, :n]  # [B, P, n]
    values = logits.gather(-1, top)
    best = values.amax(dim=-1, keepdim=True)  # [B, P, 1]
    # argmax ranks NaN first; where all n tie, the maxima may reach beyond them
    if bool(best.isnan().any()) or (n < V and bool((values == best).all(dim=-1).any())):
        return logits.argmax(dim=-1)
    return torch.where(values == best, top, V).amin(dim=-1)


def _round_inputs(
    rule: Any,
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    heads: HeadSpec,
    generators: Sequence[torch.Generator | None],
    P: int,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor | None,
    draft_token_ids: torch.Tensor,
    draft_hidden: torch.Tensor | None,
    temperature: float,
    meter: RoundMeter | None = None,
) -> tuple[int, VerifyInputs]:
    """The rule's :class:`VerifyInputs` for a round's first P drafts, and the number of positions with heads:
    :func:`criteria.round_heads.round_heads` (``lazy``) at the positions ``rule`` reads (+ the bonus position unless
    ``rule.heads_at_drafts_only``). Heads ``[B, P', K, V or C]``, candidates ``[B, P', C]`` at those P'."""
    N = (hidden if hidden is not None else target_logits).shape[1]
    positions = P if getattr(rule, "heads_at_drafts_only", False) else min(N, P + 1)
    plain, head_l, cand, closures = round_heads(
        hidden,
        lm_head,
        heads,
        generators,
        positions=positions,
        draft_probs=draft_probs,
        target_logits=target_logits,
        draft_token_ids=draft_token_ids[:, :P],
        lazy=True,
        meter=meter,
    )
    needs_hidden = bool(getattr(rule, "needs_hidden", False))
    return positions, VerifyInputs(
        draft_token_ids=draft_token_ids[:, :P],
        target_logits=plain[:, : P + 1],
        draft_probs=draft_probs,
        head_logits=head_l,
        temperature=float(temperature),
        target_hidden=hidden[:, : P + 1] if needs_hidden and hidden is not None else None,
        draft_hidden=draft_hidden[:, :P] if needs_hidden and draft_hidden is not None else None,
        head_candidates=cand,
        **closures,
    )


def _check_round(
    hidden: torch.Tensor | None,
    target_logits: torch.Tensor | None,
    draft_token_ids: torch.Tensor,
    rule: Any,
    heads: HeadSpec,
    generators: Sequence[torch.Generator | None],
    max_positions: int | None,
    trace: bool,
) -> tuple[int, int, int]:
    """``(B, N = L + 1, P)`` of a round, P the drafts decided; raises the ValueErrors of :func:`verify_round`."""
    shaped = hidden if hidden is not None else target_logits
    if shaped is None or shaped.ndim != 3:
        raise ValueError(
            f"hidden must be [B, L+1, d]; got {None if shaped is None else tuple(shaped.shape)}"
        )
    B, N, _ = shaped.shape
    if target_logits is not None and (target_logits.ndim != 3 or target_logits.shape[:2] != (B, N)):
        raise ValueError(
            f"target_logits must be [B, L+1, V] = [{B}, {N}, V] like hidden; got {tuple(target_logits.shape)}"
        )
    if draft_token_ids.shape != (B, N - 1):
        raise ValueError(
            f"draft_token_ids must be [B, L] = [{B}, {N - 1}]; got {tuple(draft_token_ids.shape)}"
        )
    if len(generators) != B:
        raise ValueError(f"need one generator per row: B={B}, got {len(generators)}")
    if getattr(rule, "needs_heads", False) and not heads.active:
        raise ValueError(
            f"rule {rule.name!r} needs MC-dropout heads; dropmatch.K={heads.K} (allowed: >= 1)"
        )
    P = N - 1 if max_positions is None else max_positions
    if max_positions is not None and (
        isinstance(P, bool) or not isinstance(P, int) or not 1 <= P <= N - 1
    ):
        raise ValueError(
            f"max_positions={max_positions!r} is invalid; allowed: None or an integer in [1, L={N - 1}]"
        )
    if P < N - 1 and trace and heads.check_top_n is not None and heads.active:
        raise ValueError(
            f"max_positions={P} cuts the round, but dropmatch.sparse_check_top_n={heads.check_top_n} decides the "
            "whole round again; allowed: max_positions=None with the check"
        )
    return B, N, P


def _cut_draft_probs(
    draft_probs: torch.Tensor | None,
    lm_head: LMHead | None,
    target_logits: torch.Tensor | None,
    positions: int | None = None,
) -> torch.Tensor | None:
    """``draft_probs`` cut to the target's vocabulary V (the draft's padded rows dropped) and to its first
    ``positions`` drafts (the round cut by ``max_positions``; None: all).

    Raises:
        ValueError: the draft covers fewer rows than V.
    """
    # V: the real vocabulary (a shard's rows are not all of it under tensor parallelism)
    if target_logits is not None:
        V = target_logits.shape[-1]
    else:
        V = lm_head.vocab_size if lm_head.gather is not None else lm_head.rows()[0].shape[0]
    if draft_probs is not None and positions is not None:
        draft_probs = draft_probs[:, :positions]
    if draft_probs is None or V is None or draft_probs.shape[-1] == V:
        return draft_probs
    if draft_probs.shape[-1] < V:
        raise ValueError(
            f"draft_probs cover {draft_probs.shape[-1]} vocabulary rows but the target's LM head {V}: "
            "cut both to the shared tokenizer's vocabulary (LMHead.vocab_size, the draft's logits "
            "[..., :vocab_size])"
        )
    return draft_probs[..., :V]  # the draft's padded vocabulary rows


def _decide(
    rule: Any, inputs: VerifyInputs, generators: Sequence[torch.Generator | None], trace: bool
) -> AcceptResult:
    if inputs.temperature == 0:  # no random draws: one batched call
        return rule(inputs, trace=trace)
    B = inputs.draft_token_ids.shape[0]
    return _stack(
        [rule(_row(inputs, i, generators[i]), trace=trace) for i in range(B)]
    )  # each row its own stream


def _sparse_check(
    res: AcceptResult,
    inputs: VerifyInputs,
    hidden: torch.Tensor,
    lm_head: LMHead,
    rule: Any,
    heads: HeadSpec,
    generators: Sequence[torch.Generator | None],
    states: list,
    positions: int,
    given: torch.Tensor | None = None,
) -> AcceptResult:
    """The same round decided again with the sparse variant (``heads.check_top_n``) on the same dropout masks
    (each row's generator replayed from its state before the round, on a copy: the run's streams move on as
    without the check); both prefix-closed verdicts ``[B, L]`` go into the trace as ``exact_accept`` and
    ``sparse_accept``. The run's decision stays the exact one. ``given``: the engine's plain logits when it
    computed them (both decisions then read the same plain head)."""
    gens = [
        None if s is None else torch.Generator(device=g.device).set_state(s)
        for g, s in zip(generators, states)
    ]
    spec = HeadSpec(heads.K, heads.p_drop, top_n=heads.check_top_n)
    _, sparse, cand, closures = round_heads(
        hidden,
        lm_head,
        spec,
        gens,
        positions=positions,
        draft_probs=inputs.draft_probs,
        target_logits=given,
        draft_token_ids=inputs.draft_token_ids,
        lazy=True,
    )
    shadow = _decide(
        rule,
        dataclasses.replace(inputs, head_logits=sparse, head_candidates=cand, **closures),
        gens,
        False,
    )
    trace = dict(res.trace or {})
    trace.update(exact_accept=res.accept_mask, sparse_accept=shadow.accept_mask)
    return dataclasses.replace(res, trace=trace)


def _row(inputs: VerifyInputs, i: int, generator: torch.Generator | None) -> VerifyInputs:
    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[i : i + 1]

    return VerifyInputs(
        draft_token_ids=inputs.draft_token_ids[i : i + 1],
        target_logits=inputs.target_logits[i : i + 1],
        draft_probs=pick(inputs.draft_probs),
        head_logits=pick(inputs.head_logits),
        temperature=inputs.temperature,
        generator=generator,
        target_hidden=pick(inputs.target_hidden),
        draft_hidden=pick(inputs.draft_hidden),
        head_candidates=pick(inputs.head_candidates),
        exact_heads=None
        if inputs.exact_heads is None
        else lambda rows, positions, rung=None: inputs.exact_heads(rows + i, positions, rung),
        sparse_support=None
        if inputs.sparse_support is None
        else lambda rows, positions: inputs.sparse_support(rows + i, positions),
        target_greedy=pick(inputs.target_greedy),
    )


def _stack(rows: list[AcceptResult]) -> AcceptResult:
    trace = None
    if rows[0].trace is not None:
        trace = {k: torch.cat([r.trace[k] for r in rows]) for k in rows[0].trace}
    return AcceptResult(
        accept_mask=torch.cat([r.accept_mask for r in rows]),
        num_accepted=torch.cat([r.num_accepted for r in rows]),
        next_token_ids=torch.cat([r.next_token_ids for r in rows]),
        trace=trace,
    )


def trace_to_json(trace: dict[str, torch.Tensor], row: int, upto: int) -> dict[str, list]:
    """One row's trace as JSON lists of its first ``upto`` positions (the accepted prefix + the rejected one).

    Both backends store traces in this layout (``samples.jsonl`` ``trace``: a list of these per round).
    """
    return {
        k: v[row, :upto].tolist() for k, v in trace.items() if torch.is_tensor(v) and v.dim() >= 2
    }
