"""DropMatch JS-divergence criterion with the majority-vote fallback (the paper's main rule).

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (5)-(7), Algorithm 1.
"""

from __future__ import annotations

import torch

from criteria.base import VerifyInputs
from criteria.dropmatch_base import (
    DropMatchBase,
    coarsen,
    js_inputs,
    js_statistics,
    majority_vote,
)
from criteria.registry import CRITERIA
from criteria.sampled_tail import sampled_js_statistics


@CRITERIA.register("dropmatch_js")
class DropMatchJS(DropMatchBase):
    """Accept draft t iff ``JS(p_hat_t || p_bar_t) <= max_i JS(p_t^(i) || p_bar_t)`` or the heads'
    majority token equals the draft; stop at the first rejection.

    Paper: Eq. (5) centroid, Eq. (6) JS test, Eq. (7) majority test, Algorithm 1.

    ``p_hat_t`` is ``draft_probs``; head probabilities ``p^(i) = softmax(l^(i) / T)`` and the centroid
    ``softmax(mean_i l^(i) / T)`` use T = 1 when greedy (T = 0). The majority (Eq. 7) is strict (more than
    K/2 heads) by default or a plurality with ``majority="plurality"`` (:func:`criteria.dropmatch_base.majority_vote`).
    Head tokens, next token, RNG use and settings: see :class:`criteria.dropmatch_base.DropMatchBase`.
    With ``p_drop = 0`` every head equals the centroid (max JS = 0 up to rounding), so a draft
    distribution different from the target's fails Eq. (6) and the rule equals ``greedy_match`` at
    T = 0 (Eq. (7) then means "draft = target argmax").

    Args: ``majority``, ``include_target``: see :class:`criteria.dropmatch_base.DropMatchBase`.

    Attributes:
        name: ``"dropmatch_js"``.
        needs_heads: True.
        needs_draft_probs: True.
    """

    name = "dropmatch_js"
    needs_draft_probs = True

    def accept_test(
        self, inputs: VerifyInputs, head_token_ids: torch.Tensor, every_position: bool = True
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Eq. (6) OR Eq. (7) at each draft position: ``[B, L]`` bool, and ``(js_draft, js_heads_max)``.

        With ``every_position=False`` the JS test (Eq. 6, the expensive part: K + 1 distributions over V) runs
        only where it can change the round: at positions the majority (Eq. 7) does not already accept, up to
        each row's first rejection, one position at a time over the rows still accepting. The values it computes
        there are those of the full computation (same per-row operations), so the decisions are the same; the
        test is then exact up to the first rejection only, and no JS values are returned. The sparse variant
        (``head_candidates``) tests every position at once (its JS is over C + 1 entries), unless the round left
        its support to ``sparse_support``: then, without ``every_position``, only the positions that decide
        (:meth:`_reached_js`). With the escape (``exact_heads``) Eq. (6) is decided by :func:`sampled_decision`
        instead of the lumped rest entry: at the positions that decide in a run, and at every position the
        majority does not accept in a traced round.
        """
        L = inputs.draft_token_ids.shape[1]
        majority, valid = majority_vote(head_token_ids, self.majority)  # [B, L], [B, L]
        by_majority = valid & (majority == inputs.draft_token_ids)  # [B, L]
        if inputs.sparse_support is not None and not every_position:
            return self._reached_js(inputs, by_majority), None
        heads, draft_probs = js_inputs(
            inputs, L
        )  # [B, L, K, V], [B, L, V] (or C: the sparse variant)
        if every_position or inputs.head_candidates is not None:
            # the sparse variant's JS is over C + 1 entries: one call for all positions costs less than the
            # per-position calls below (each a dozen small kernels), with the same values
            js_draft, js_heads_max = js_statistics(heads, draft_probs, inputs.temperature)
            if inputs.exact_heads is not None:
                rows, positions = (~by_majority).nonzero(as_tuple=True)  # [m] each: Eq. (6) decides
                js_draft, js_heads_max = js_draft.clone(), js_heads_max.clone()
                if rows.numel():
                    (
                        js_draft[rows, positions],
                        js_heads_max[rows, positions],
                    ) = sampled_decision(inputs, rows, positions)
            return (js_draft <= js_heads_max) | by_majority, (js_draft, js_heads_max)
        ok = by_majority.clone()
        alive = torch.ones(
            ok.shape[0], dtype=torch.bool, device=ok.device
        )  # [B] rows with no rejection yet
        for t in range(L):
            need = (
                (alive & ~by_majority[:, t]).nonzero().squeeze(-1)
            )  # rows whose position t needs Eq. (6)
            if need.numel():
                js_draft, js_heads_max = js_statistics(
                    heads[need, t : t + 1], draft_probs[need, t : t + 1], inputs.temperature
                )
                ok[need, t] = js_draft[:, 0] <= js_heads_max[:, 0]
            alive = alive & ok[:, t]
            if not bool(alive.any()):
                break
        return ok, None

    @staticmethod
    def _reached_js(inputs: VerifyInputs, by_majority: torch.Tensor) -> torch.Tensor:
        """The sparse variant's Eq. (6) where it decides the round: ``[B, L]`` bool, exact up to each row's first
        rejection (``by_majority`` after it).

        The support (``inputs.sparse_support``: the draft's top-N, the heads at the candidates, the rest entry;
        each a pass over the vocabulary) is built only at those positions, in waves: each row's first position
        the majority (Eq. 7) does not accept, then, for the rows Eq. (6) accepted there, their next one. Each
        position gets the values the whole support would give it (the same per-row operations). With the escape
        (``inputs.exact_heads``) a wave's positions are decided by :func:`sampled_decision` instead, so its
        sample, and the exact heads it may take, cost only where a position decides the round.
        """
        T = inputs.temperature
        ok = by_majority.clone()  # [B, L]
        L = ok.shape[1]
        span = torch.arange(L, device=ok.device)
        start = torch.zeros(
            ok.shape[0], dtype=torch.long, device=ok.device
        )  # [B] next position to test
        while True:
            pending = ~by_majority & (span >= start[:, None])  # [B, L]
            rows = pending.any(dim=-1).nonzero().squeeze(-1)  # [m]
            if rows.numel() == 0:
                return ok
            positions = pending[rows].byte().argmax(dim=-1)  # [m] each row's first pending position
            if inputs.exact_heads is not None:
                js_draft, js_heads_max = sampled_decision(inputs, rows, positions)  # [m] each
            else:
                heads, cand = inputs.sparse_support(rows, positions)  # [m, K, C + 1], [m, C + 1]
                q = coarsen(
                    inputs.draft_probs[rows[:, None], positions[:, None], cand[:, :-1]], heads
                )
                js_draft, js_heads_max = (
                    v[:, 0] for v in js_statistics(heads.unsqueeze(1), q.unsqueeze(1), T)
                )
            accepted = js_draft <= js_heads_max  # [m]
            ok[rows, positions] = accepted
            start[rows] = torch.where(accepted, positions + 1, L)  # a rejection ends the row


# The escape's ladder. A sampled rung (E, S) decides Eq. (6) on the plain head's and the draft's top-E tokens, exact
# (E below the run's dropmatch.sparse_top_n counts as sparse_top_n), plus S tail tokens sampled beyond them; the last
# rung, None, is the exact heads over the whole vocabulary. A rung leaves a position to the next where the two sides are
# within TAIL_Z standard errors plus TAIL_FLOOR nats of each other. The sample's own standard error understates the
# error where the weights are heavy-tailed (a head's tail mass where the proposal puts little), hence 5 rather than 3:
# on 1,313 IFEval positions of 10 items (the embedded pair, batch 10, one mask seed; scripts/realpair_escape.py) the
# escape differed from the exact rule at 2 positions with 3 or 4 standard errors and at none with 5. The spread comes
# from the heads' side (the dropout noise on tail tokens), and a larger exact top shrinks it far more than more samples
# do: on 583 IFEval positions the majority did not accept, 512 exact + 512 sampled tokens left 42 unsure, 64 + 4,096
# left 62, with a third of the rows gathered. Over 1,621 such positions of IFEval, GSM8K and HumanEval at two mask
# seeds this ladder sent 25 to the exact heads where (64, 4,096, 32,768) sent 39, with the same agreement with the
# exact rule (README "The escape's ladder, stratified"). The first rung samples 256 tokens, not 64: with 64 a dropout
# head whose tail mass sat on common tokens the plain head ranks 87-445 (one head 1,600 times the plain head's
# probability there) was decided at 7 standard errors against the exact rule, once on llama.cpp (ifeval/train/1051
# round 12) and once on 7,578 transformers positions; 256 samples see that mass as unsure and climb, both times, at
# 1% more of the decision's time (README "The escape's first rung").
TAIL_LADDER: tuple[tuple[int, int] | None, ...] = ((64, 256), (512, 512), (2048, 2048), None)
TAIL_Z = 5.0
TAIL_FLOOR = 1e-5


def sampled_decision(
    inputs: VerifyInputs, rows: torch.Tensor, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (6) of a sparse round with the escape, at positions ``(rows [m], positions [m])``: the two sides from a
    sampled tail (:func:`redecide`), climbing ``TAIL_LADDER`` wherever they are within ``TAIL_Z`` standard errors
    plus ``TAIL_FLOOR`` of each other; the last rung, the exact heads, always decides.

    Returns:
        ``(js_draft [m], js_heads_max [m])`` float32 nats: the values of the rung that decided each position.
    """
    js_draft = torch.zeros(rows.shape, dtype=torch.float32, device=rows.device)
    js_heads_max = torch.zeros_like(js_draft)
    todo = torch.arange(rows.numel(), device=rows.device)
    for rung in TAIL_LADDER:
        d, h, se = redecide(inputs, rows[todo], positions[todo], rung)  # [n] each
        js_draft[todo], js_heads_max[todo] = d, h
        todo = todo[(h - d).abs() <= TAIL_Z * se + TAIL_FLOOR] if rung is not None else todo[:0]
        if todo.numel() == 0:
            break
    return js_draft, js_heads_max


def redecide(
    inputs: VerifyInputs,
    rows: torch.Tensor,
    positions: torch.Tensor,
    rung: tuple[int, int] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. (6) at positions ``(rows [m], positions [m])`` of a sparse round, on one rung of ``TAIL_LADDER``: with
    ``rung = (E, S)`` on the plain head's and the draft's top-E tokens plus S sampled tail tokens
    (:func:`criteria.sampled_tail.sampled_js_statistics`), with None on the exact heads over the whole vocabulary
    and the draft's whole distribution (``inputs.exact_heads``).

    Returns:
        ``(js_draft, js_heads_max, se)`` ``[m]`` float32 nats; ``se`` the standard error of their difference (0
        where exact).
    """
    T = inputs.temperature
    heads, ids, weights = inputs.exact_heads(rows, positions, rung)  # [m, K, C + S or V]
    if ids is None:
        q = inputs.draft_probs[rows, positions]  # [m, V]
        d, h = (v[:, 0] for v in js_statistics(heads.unsqueeze(1), q.unsqueeze(1), T))
        return d, h, torch.zeros_like(d)
    # the draft at the support's entries only (no copy of its rows); duplicates count once
    q = inputs.draft_probs[rows[:, None], positions[:, None], ids].float()  # [m, C + S]
    q = q.masked_fill(torch.isneginf(heads[:, 0]), 0.0)
    return sampled_js_statistics(heads, q, weights, rung[1], T)
