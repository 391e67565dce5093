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
import functools
from typing import Any, Callable, Sequence

import torch

from criteria.base import AcceptResult, RoundMeter, VerifyInputs
from criteria.dropout_heads import (
    HeadSpec,
    LMHead,
    candidate_tokens,
    dropped_hidden,
    head_token_candidates,
    heads_on_candidates,
    mask_uniforms,
    rest_logsumexp,
    top_ids,
    with_draft_top,
)
from criteria.sampled_tail import tail_sample


def head_logits(
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    heads: HeadSpec,
    generators: Sequence[torch.Generator | None],
    *,
    positions: int | None = None,
    draft_probs: torch.Tensor | None = None,
    target_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Plain and dropout-head logits of B rows (Eq. 1-3), the plain rows and the head rows in one matmul.

    RNG: the masks of all N positions are drawn (one ``torch.rand((N, K, d))`` per row, as
    :func:`criteria.dropout_heads.dropout_masks`) whatever ``positions`` is, so the stream does not depend on it.

    Args:
        hidden: ``[B, N, d]`` final hidden states (LM-head input), the model's dtype.
        lm_head: the target's LM head (a vocabulary shard with ``gather`` under tensor parallelism; the sparse
            variant needs the whole head).
        heads: K, p_drop and the sparse variant's top-N; ``K = 0``: plain head only.
        generators: B generators on ``hidden``'s device (used only when ``K >= 1`` and ``p_drop > 0``).
        positions: P, the leading positions whose dropout heads are computed (default: all N).
        draft_probs: ``[B, L, V]`` (the sparse variant's candidates use the draft's top-N).
        target_logits: ``[B, N, V]`` or None: the plain head's logits as an engine computed them itself
            (llama.cpp, in the GGUF's own precision). They are returned as the plain logits and the matmul has
            only the dropout-head rows (same masks, same head rows); without heads nothing is multiplied, and
            ``hidden`` / ``lm_head`` may be None.

    Returns:
        ``target_logits`` ``[B, N, V]`` float32; ``head_logits`` ``[B, P, K, V]`` in the matmul's dtype (exact) or
        ``[B, P, K, C + 1]`` float32 at the C candidate tokens plus one entry for the rest of the vocabulary
        (sparse), None when K = 0; ``candidates`` ``[B, P, C + 1]`` int64 token ids of the sparse heads' last dim
        (``-1`` for the rest entry), else None.
    """
    return _heads(
        hidden,
        lm_head,
        heads,
        generators,
        positions=positions,
        draft_probs=draft_probs,
        target_logits=target_logits,
    )[:3]


def _heads(
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    heads: HeadSpec,
    generators: Sequence[torch.Generator | None],
    *,
    positions: int | None = None,
    draft_probs: torch.Tensor | None = None,
    target_logits: torch.Tensor | None = None,
    draft_token_ids: torch.Tensor | None = None,
    lazy: bool = False,
    meter: RoundMeter | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, dict[str, Callable | None]]:
    """:func:`head_logits`, plus the sparse variant's closures as :class:`VerifyInputs` fields (both None unless
    ``heads.top_n``): ``sparse_support`` (with ``lazy``) and ``exact_heads`` (with ``heads.escape``). ``meter``
    (:class:`criteria.base.RoundMeter`) hears when the plain float32 logits are ready, except on the exact rule's
    path with ``p_drop > 0`` (one matmul for the plain and the head rows), and each escape rung the round's closure
    serves.

    With ``lazy`` the sparse heads are those of the heads' tokens only (:func:`_token_heads`, the drafts
    ``draft_token_ids`` ``[B, L]`` among the candidates) and Eq. (6)'s support is left to ``sparse_support``, which
    a rule calls at the positions it needs; without, the heads carry that support at every position
    (:func:`_sparse_heads`)."""
    none = {"sparse_support": None, "exact_heads": None}
    given = target_logits is not None
    if given and not heads.active:
        ready = target_logits.float()
        _plain_ready(meter)
        return ready, None, None, none
    if hidden is None or lm_head is None:
        raise ValueError(
            "head_logits needs hidden and lm_head unless target_logits is given without heads"
        )
    B, N, d = hidden.shape
    P = N if positions is None else positions
    W, b = lm_head.rows()
    flat = hidden.reshape(B * N, d)
    if not heads.active or heads.p_drop == 0:
        return *_plain_heads(flat, lm_head, heads, target_logits, (B, N, P), meter), None, none
    if heads.top_n is None:
        dropped = _dropped(hidden, generators, heads.K, heads.p_drop, P)  # [B*P, K, d], Eq. (1)-(2)
        # plain rows first (unless given), then the head rows: [B*N + B*P*K, V], Eq. (3), one matmul
        rows = torch.cat([flat[: 0 if given else B * N], dropped.reshape(B * P * heads.K, d)])
        logits = lm_head.full(torch.nn.functional.linear(rows, W, b))
        V = logits.shape[-1]
        plain = target_logits.float() if given else logits[: B * N].float().view(B, N, V)
        return plain, logits[logits.shape[0] - B * P * heads.K :].view(B, P, heads.K, V), None, none
    if lm_head.gather is not None:
        raise ValueError(
            "dropmatch.sparse_top_n needs the whole LM head; under tensor parallelism use the exact rule "
            "(dropmatch.sparse_top_n=null)"
        )
    target = (
        target_logits.float()
        if given
        else torch.nn.functional.linear(flat, W, b).float().view(B, N, -1)
    )  # [B, N, V]
    _plain_ready(meter)
    # the masks after the plain logits (no other draw between them: the same streams), so the meter counts them
    # in the rule's decision
    dropped = _dropped(hidden, generators, heads.K, heads.p_drop, P)  # [B*P, K, d], Eq. (1)-(2)
    return target, *_sparse_round_heads(
        target[:, :P],
        dropped.view(B, P, heads.K, d),
        W,
        b,
        heads,
        draft_probs,
        draft_token_ids,
        lazy,
        meter,
    )


def _plain_heads(
    flat: torch.Tensor,
    lm_head: LMHead,
    heads: HeadSpec,
    target_logits: torch.Tensor | None,
    shape: tuple[int, int, int],
    meter: RoundMeter | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`_heads` without dropout (no heads, or ``p_drop = 0``): the plain logits ``[B, N, V]`` float32 from
    ``flat`` ``[B*N, d]`` (or ``target_logits``), and with heads K copies of them ``[B, P, K, V]`` in the matmul's
    dtype; ``shape`` is ``(B, N, P)``."""
    B, N, P = shape
    W, b = lm_head.rows()
    plain = (
        target_logits.float()
        if target_logits is not None
        else lm_head.full(torch.nn.functional.linear(flat, W, b)).view(B, N, -1)
    )
    ready = plain.float()
    _plain_ready(meter)
    # p = 0: every head is the plain head; copies, so the rows are bitwise identical
    copies = (
        plain[:, :P, None].expand(B, P, heads.K, plain.shape[-1]).contiguous()
        if heads.active
        else None
    )
    return ready, copies


def _plain_ready(meter: RoundMeter | None) -> None:
    if meter is not None:
        meter.plain()


def _sparse_round_heads(
    target: torch.Tensor,
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    heads: HeadSpec,
    draft_probs: torch.Tensor | None,
    draft_token_ids: torch.Tensor | None,
    lazy: bool,
    meter: RoundMeter | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, Callable | None]]:
    """The sparse variant's heads, candidates and closures for :func:`_heads` (``heads.top_n`` set), from the plain
    logits ``target`` ``[B, P, V]`` float32 and the head inputs ``dropped`` ``[B, P, K, d]`` (Eq. 1-2); the escape's
    closure reports its rungs to ``meter``."""
    if not lazy:
        closures = {
            "sparse_support": None,
            "exact_heads": _exact_heads_at(
                dropped, W, b, target, draft_probs, heads.top_n, meter=meter
            )
            if heads.escape
            else None,
        }
        return *_sparse_heads(target, dropped, W, b, draft_probs, heads.top_n), closures
    sparse, cand = _token_heads(target, dropped, W, b, draft_token_ids, heads.top_n)
    target_top = cand[..., :-2]  # [B, P, N] the plain head's top-N, which the heads' tokens needed
    closures = {
        "sparse_support": functools.partial(
            _support_at, dropped, W, b, target, draft_probs, target_top, heads.top_n
        ),
        "exact_heads": _exact_heads_at(
            dropped, W, b, target, draft_probs, heads.top_n, target_top, meter, sparse[..., :-2]
        )
        if heads.escape
        else None,
    }
    return sparse, cand, closures


def _dropped(
    hidden: torch.Tensor, generators: Sequence[torch.Generator | None], K: int, p: float, P: int
) -> torch.Tensor:
    """The K heads' inputs at the first P positions, ``[B*P, K, d]`` (Eq. 1-2); each row's masks drawn for all N
    positions from its own generator (one ``torch.rand((N, K, d))``), so the stream does not depend on P."""
    B, N, d = hidden.shape
    # every row's uniforms in one buffer, compared at once (the masks of dropout_masks, row by row)
    u = torch.empty((B, N, K, d), dtype=torch.float32, device=hidden.device)
    for row, g in enumerate(generators):
        mask_uniforms(N, K, d, g, hidden.device, out=u[row])
    keep = u[:, :P] < (1.0 - p)  # [B, P, K, d]
    return dropped_hidden(hidden[:, :P].reshape(B * P, d), keep.reshape(B * P, K, d), p)


def _exact_heads_at(
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    target: torch.Tensor,
    draft_probs: torch.Tensor | None,
    top_n: int,
    target_top: torch.Tensor | None = None,
    meter: RoundMeter | None = None,
    top_heads: torch.Tensor | None = None,
) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]:
    """``VerifyInputs.exact_heads`` of a sparse round. It is built from the round's own head inputs ``dropped``
    ``[B, P, K, d]`` (the same masks), the plain logits ``target`` ``[B, P, V]`` float32, ``draft_probs``
    ``[B, L, V]``, the candidates' ``top_n`` and, when the round found it already, the plain head's top-N
    ``target_top`` ``[B, P, N]`` (else found here), and the heads there ``top_heads`` ``[B, P, K, N]`` float32 (the
    heads' tokens computed them; else computed here). Each call is reported to ``meter``
    (:meth:`RoundMeter.escape`, named by :func:`rung_name`).

    ``at(rows [m], positions [m], rung=None)`` returns the K heads at those positions.
    - With ``rung`` None: over the whole vocabulary, ``([m, K, V]`` in the matmul's dtype, None, None)``
      (Eq. 3).
    - With ``rung = (E, S)``: on the plain head's and the draft's top-max(E, N) tokens
      (:func:`criteria.dropout_heads.with_draft_top`; at E <= N the sparse variant's candidates) plus S tail tokens
      (:func:`criteria.sampled_tail.tail_sample`). It returns ``([m, K, C + S]`` float32, ``[m, C + S]`` int64 ids,
      ``[m, C + S]`` float32 weights)``: ``-inf`` at a masked duplicate; weight 1 at a candidate and the importance
      weight at a sampled token."""

    def at(
        rows: torch.Tensor, positions: torch.Tensor, rung: tuple[int, int] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        if meter is not None:
            meter.escape(rung_name(rung, top_n), rows)
        x = dropped[rows, positions]  # [m, K, d]
        m, K, d = x.shape
        if rung is None:
            return torch.nn.functional.linear(x.reshape(m * K, d), W, b).view(m, K, -1), None, None
        n, samples = rung_top(rung, top_n), rung[1]
        plain = target[rows, positions]  # [m, V]
        q = None if draft_probs is None else draft_probs[rows, positions]  # [m, V]
        if n == top_n and target_top is not None:
            top = target_top[rows, positions]
        else:
            top = top_ids(plain, n)
        ids, dup = with_draft_top(top, q, n)  # [m, C]
        tail, w = tail_sample(plain, q, ids, samples, dup)  # [m, S] each
        ids = torch.cat([ids, tail], dim=-1)  # [m, C + S]
        dup = torch.cat([dup, torch.zeros_like(tail, dtype=torch.bool)], dim=-1)
        # the heads at the plain head's top-N: the round's token heads computed them
        if n == top_n and top_heads is not None:
            k = top.shape[-1]  # min(N, V): the top the round found
            rest = heads_on_candidates(x, W, b, ids[:, k:], dup[:, k:]).float()
            heads = torch.cat([top_heads[rows, positions], rest], dim=-1)  # [m, K, C + S]
        else:
            heads = heads_on_candidates(x, W, b, ids, dup).float()  # [m, K, C + S]
        exact = w.new_ones(m, ids.shape[-1] - samples)  # the candidates' terms count once
        return heads, ids, torch.cat([exact, w], dim=-1)

    return at


def rung_top(rung: tuple[int, int], top_n: int) -> int:
    """How many of the plain head's (and of the draft's) top tokens a sampled rung ``(E, S)`` of the escape's
    ladder computes exactly: max(E, N), N the run's ``dropmatch.sparse_top_n``."""
    return max(rung[0], top_n)


def rung_name(rung: tuple[int, int] | None, top_n: int) -> str:
    """A rung of the escape's ladder as the records name it (``escape`` in ``samples.jsonl``): ``"exact"`` (the
    exact heads), ``"S"`` (the sparse variant's top-N candidates plus S sampled tail tokens) or ``"E+S"`` (a larger
    exact top-E plus S samples, :func:`rung_top`)."""
    if rung is None:
        return "exact"
    top = rung_top(rung, top_n)
    return str(rung[1]) if top == top_n else f"{top}+{rung[1]}"


def _support_at(
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    target: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_top: torch.Tensor,
    top_n: int,
    rows: torch.Tensor,
    positions: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``VerifyInputs.sparse_support`` of a round (bound to all but ``rows`` / ``positions``): Eq. (6)'s support of
    the sparse variant at those positions, as :func:`_sparse_heads` builds it, from the plain head's top-N the
    heads' tokens already needed (``target_top`` ``[B, P, N]``).

    Returns ``([m, K, C + 1] float32, [m, C + 1] int64)``: the heads at the plain head's and the draft's top-N and
    the rest entry (id ``-1``; logit the plain head's log-sum-exp outside the candidates)."""
    q = None if draft_probs is None else draft_probs[rows, positions]  # [m, V]
    ids, dup = with_draft_top(target_top[rows, positions], q, top_n)  # [m, C]
    heads = heads_on_candidates(dropped[rows, positions], W, b, ids, dup).float()  # [m, K, C]
    return _with_rest(heads, ids, rest_logsumexp(target[rows, positions], ids))  # rest: [m]


def _sparse_heads(
    target: torch.Tensor,
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    draft_probs: torch.Tensor | None,
    top_n: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sparse variant's heads: ``[B, P, K, C + 1]`` float32 logits at the C candidates plus the rest entry, and
    the candidate ids ``[B, P, C + 1]`` (``-1`` for the rest). ``target`` ``[B, P, V]`` float32 plain logits,
    ``dropped`` ``[B, P, K, d]`` head inputs (Eq. 1-2)."""
    B, P, K, d = dropped.shape
    ids, dup = candidate_tokens(target, draft_probs, top_n)  # [B, P, C]
    C = ids.shape[-1]
    sparse = heads_on_candidates(
        dropped.reshape(B * P, K, d), W, b, ids.reshape(B * P, C), dup.reshape(B * P, C)
    )  # [B*P, K, C]
    # the rest of the vocabulary as one more entry: its logit is the plain head's log-sum-exp outside the
    # candidates (the heads' expectation there, Eq. 2 preserves it), its id -1 (never a head token)
    return _with_rest(
        sparse.float().view(B, P, K, C), ids, rest_logsumexp(target, ids)
    )  # rest: [B, P]


def _with_rest(
    heads: torch.Tensor, ids: torch.Tensor, rest: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Heads at candidates ``[..., K, C]`` float32 and their ids ``[..., C]`` with the rest entry appended: logit
    ``rest`` ``[...]`` for every head (``-inf`` when None), id ``-1``."""
    if rest is None:
        rest = heads.new_full(heads.shape[:-2], float("-inf"))
    rest = rest[..., None, None].expand(*heads.shape[:-1], 1)
    return torch.cat([heads, rest], dim=-1), torch.cat(
        [ids, ids.new_full((*ids.shape[:-1], 1), -1)], dim=-1
    )


def _token_heads(
    target: torch.Tensor,
    dropped: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor | None,
    draft_token_ids: torch.Tensor | None,
    top_n: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sparse heads the heads' tokens need: ``[B, P, K, N + 2]`` float32 logits at the plain head's top-N and
    the draft token (:func:`criteria.dropout_heads.head_token_candidates`) plus a ``-inf`` entry in the rest
    entry's place (id ``-1``), and their ids ``[B, P, N + 2]``. ``target`` ``[B, P, V]`` float32 plain logits,
    ``dropped`` ``[B, P, K, d]`` head inputs (Eq. 1-2)."""
    B, P, K, d = dropped.shape
    ids, dup = head_token_candidates(target, draft_token_ids, top_n)  # [B, P, C]
    C = ids.shape[-1]
    logits = heads_on_candidates(
        dropped.reshape(B * P, K, d), W, b, ids.reshape(B * P, C), dup.reshape(B * P, C)
    )  # [B*P, K, C]
    # no rest entry: Eq. (6) reads VerifyInputs.sparse_support; the shape stays that of the full support
    return _with_rest(logits.float().view(B, P, K, C), ids, None)


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
    """Decide one round of B sequences with ``rule``.

    Paper: Algorithm 1 (DropMatch rules), Eq. (4) (naive), Leviathan et al. Alg. 1 (``rejection``);
    ``L = 0`` is an autoregressive step (the rule emits the next token; ``dropout_path`` decodes one
    MC-dropout path).

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
        target_logits: ``[B, L+1, V]`` float32 or None: the target's plain logits when the engine computed them
            itself (llama.cpp); the LM head then computes only the dropout-head rows (:func:`head_logits`), and
            without heads ``hidden`` and ``lm_head`` may be None (no matmul at all).
        max_positions: None, or P in ``[1, L]``: decide the round cut to its first P drafts (heads computed there
            only; the masks still drawn for all L + 1 positions: those of the whole round; :mod:`criteria.audit`).
        meter: None, or the backend's :class:`criteria.base.RoundMeter` for this round (when the plain logits are
            ready; the escape's rungs). It changes no value and no random draw.

    Returns:
        :class:`AcceptResult` with ``accept_mask`` ``[B, L]`` (``[B, P]`` with ``max_positions``),
        ``num_accepted`` ``[B]``, ``next_token_ids`` ``[B]``.

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
    greedy = None
    if inputs.head_candidates is not None and inputs.temperature == 0:
        # off the candidates the heads' tokens needed: the rule's next token reads it too
        greedy = _target_argmax(inputs, heads.top_n, P)  # [B, P]
        inputs = dataclasses.replace(inputs, target_greedy=greedy)
    res = _decide(rule, inputs, generators, trace)
    if res.target_argmax is None:
        res = dataclasses.replace(
            res, target_argmax=_target_argmax(inputs, heads.top_n, P) if greedy is None else greedy
        )
    if check:  # (the check refuses a cut round: hidden is the whole round's)
        res = _sparse_check(
            res, inputs, hidden, lm_head, rule, heads, generators, states, positions, given
        )
    return res


def _target_argmax(inputs: VerifyInputs, top_n: int | None, P: int) -> torch.Tensor:
    """The plain head's greedy token at the first P positions, ``[B, P]`` int64: ``argmax`` of
    ``inputs.target_logits`` (the first of tied maxima). With the lazy sparse variant's candidates
    (``head_candidates`` ``[B, P', N' + 2]`` from :func:`criteria.dropout_heads.head_token_candidates`: the plain
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
    :func:`_heads` (``lazy``) at the positions ``rule`` reads (+ the bonus position unless
    ``rule.heads_at_drafts_only``). Heads ``[B, P', K, V or C]``, candidates ``[B, P', C]`` at those P'."""
    N = (hidden if hidden is not None else target_logits).shape[1]
    positions = P if getattr(rule, "heads_at_drafts_only", False) else min(N, P + 1)
    plain, head_l, cand, closures = _heads(
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
    _, sparse, cand, closures = _heads(
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
