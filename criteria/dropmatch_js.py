"""DropMatch JS-divergence criterion with the majority-vote fallback (the paper's main rule).

Paper: DropMatch (arXiv 2603.03333) Sec. 3.2, Eq. (5)-(7), Algorithm 1.
"""

from __future__ import annotations

import torch

from criteria.base import VerifyInputs
from criteria.dropmatch_base import (
    DropMatchBase,
    coarsen,
    coarsened_draft,
    js_inputs,
    js_statistics,
    lumping_slack,
    majority_vote,
)
from criteria.registry import CRITERIA


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
        (:meth:`_reached_js`, which also takes the escape, ``exact_heads``, at those positions only).
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
                js_draft, js_heads_max = self._unlump(
                    inputs, heads, draft_probs, by_majority, js_draft, js_heads_max
                )
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
        (``inputs.exact_heads``) a wave's unsure positions are decided again as :meth:`_unlump` does
        (:func:`escape`), so the escape costs only where a position both decides the round and is unsure.
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
            heads, cand = inputs.sparse_support(rows, positions)  # [m, K, C + 1], [m, C + 1]
            q = coarsen(inputs.draft_probs[rows[:, None], positions[:, None], cand[:, :-1]], heads)
            js_draft, js_heads_max = js_statistics(heads.unsqueeze(1), q.unsqueeze(1), T)  # [m, 1]
            if inputs.exact_heads is not None:
                slack = lumping_slack(heads.unsqueeze(1), q.unsqueeze(1), T)  # [m, 1] each
                js_draft, js_heads_max = escape(
                    inputs, rows, positions, js_draft, js_heads_max, *slack
                )
            accepted = js_draft[:, 0] <= js_heads_max[:, 0]  # [m]
            ok[rows, positions] = accepted
            start[rows] = torch.where(accepted, positions + 1, L)  # a rejection ends the row

    @staticmethod
    def _unlump(
        inputs: VerifyInputs,
        heads: torch.Tensor,
        draft_probs: torch.Tensor,
        by_majority: torch.Tensor,
        js_draft: torch.Tensor,
        js_heads_max: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The sparse variant's Eq. (6) decided again, on a wider support and then exactly, where it is unsure.

        A position is unsure when the majority (Eq. 7) does not accept it, no earlier position of its row is
        surely rejected, and the two sides of Eq. (6) are closer than what splitting the rest entry could move
        them (:func:`unsure_positions`). Those positions climb ``ESCAPE_LADDER``: decided again at ``REFINE_TOP_N`` candidates
        (``inputs.exact_heads(..., top_n)``: the heads at ~1,000 gathered LM-head rows), and those still unsure
        from the exact heads over the whole vocabulary (one pass over the LM head for all of them) and the
        draft's whole distribution. Returns ``(js_draft, js_heads_max)`` ``[B, L]`` with the values that decided.
        """
        slack_draft, slack_heads = lumping_slack(heads, draft_probs, inputs.temperature)  # [B, L]
        js_draft, js_heads_max = js_draft.clone(), js_heads_max.clone()
        for top_n in ESCAPE_LADDER:
            unsure = unsure_positions(js_draft, js_heads_max, slack_draft, slack_heads, by_majority)
            if not bool(unsure.any()):
                break
            rows, positions = unsure.nonzero(as_tuple=True)  # [m], [m]
            (
                js_draft[rows, positions],
                js_heads_max[rows, positions],
                slack_draft[rows, positions],
                slack_heads[rows, positions],
            ) = redecide(inputs, rows, positions, top_n)
        return js_draft, js_heads_max


# The sparse variant's second support (``exact_heads(..., top_n)``): 2 x 512 candidates. On real rounds (the
# embedded pair, IFEval / GSM8K / HumanEval, 3,847 positions) a JS test on it disagreed with the exact one at 12
# positions, against 24 at top-64 and 5 at top-2,048 or top-8,192 (so the rest goes to the exact heads); at batch
# 10 it cost ~10 ms per round against ~80 ms at top-2,048 (a top-4,096 over the vocabulary and the row gather).
REFINE_TOP_N = 512
# The supports an unsure position climbs, None the exact heads. Measured on 7,578 real positions (the embedded pair,
# 10 items each of IFEval / GSM8K / HumanEval, 2 mask seeds, batch 10; scripts/realpair_escape.py): 321 positions
# reached the first rung and 136 the exact heads; stopping at top-4,096 or top-2,048 instead left 11 and 13
# disagreements against 1, and a top-4,096 rung before the exact heads cost more than it saved.
ESCAPE_LADDER = (REFINE_TOP_N, None)
# How much wider than lumping_slack the unsure band is. The heads' rest entry is the plain head's mass outside
# the candidates, an estimate, so the bound is widened: at 1.5 x slack + 0.005 nats the band held every one of the
# 41 disagreements of 13,440 real positions (the same rounds, 3 mask seeds); at 1 x slack + 0 it missed one.
SLACK_SCALE = 1.5
SLACK_FLOOR = 0.005


def unsure_positions(
    js_draft: torch.Tensor,
    js_heads_max: torch.Tensor,
    slack_draft: torch.Tensor,
    slack_heads: torch.Tensor,
    by_majority: torch.Tensor,
) -> torch.Tensor:
    """Positions where the coarsened Eq. (6) may decide otherwise than the exact one and the decision matters.

    Args:
        js_draft, js_heads_max: ``[B, L]`` float32, the two sides of Eq. (6) as computed (nats).
        slack_draft, slack_heads: ``[B, L]`` float32, how far each could still move
            (:func:`criteria.dropmatch_base.lumping_slack`; 0 where already exact).
        by_majority: ``[B, L]`` bool, accepted by Eq. (7) (Eq. 6 is then moot).

    Returns:
        ``[B, L]`` bool: ``|js_heads_max - js_draft| <= SLACK_SCALE * (slack_draft + slack_heads) + SLACK_FLOOR``
        where both slacks are not 0, not accepted by the majority, and no earlier position of the row surely
        rejected (outside that band and above it).
    """
    band = SLACK_SCALE * (slack_draft + slack_heads) + SLACK_FLOOR
    exact = (slack_draft == 0) & (slack_heads == 0)
    near = ~by_majority & ~exact & ((js_heads_max - js_draft).abs() <= band)  # [B, L]
    surely_out = ~by_majority & ~near & (js_draft > js_heads_max)
    reached = (surely_out.cumsum(dim=-1) - surely_out.long()) == 0  # no sure rejection before
    return near & reached


def redecide(
    inputs: VerifyInputs, rows: torch.Tensor, positions: torch.Tensor, top_n: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eq. (6) at positions ``(rows [m], positions [m])`` of a sparse round, again: on the sparse variant's support
    at ``top_n`` candidates (``inputs.exact_heads(..., top_n)``) or, with ``top_n`` None, on the exact heads over the
    whole vocabulary and the draft's whole distribution.

    Returns:
        ``(js_draft, js_heads_max, slack_draft, slack_heads)`` ``[m]`` float32 nats; the slacks
        (:func:`criteria.dropmatch_base.lumping_slack`) are 0 where the values are exact.
    """
    T = inputs.temperature
    wide, cand = inputs.exact_heads(rows, positions, top_n)  # [m, K, C' + 1 or V]
    q = inputs.draft_probs[rows, positions]  # [m, V]
    q = q if cand is None else coarsened_draft(q, cand, wide)  # [m, C' + 1 or V]
    d, h = js_statistics(wide.unsqueeze(1), q.unsqueeze(1), T)  # [m, 1] each
    if cand is None:
        return d[:, 0], h[:, 0], torch.zeros_like(d[:, 0]), torch.zeros_like(h[:, 0])
    sd, sh = lumping_slack(wide.unsqueeze(1), q.unsqueeze(1), T)  # [m, 1] each
    return d[:, 0], h[:, 0], sd[:, 0], sh[:, 0]


def escape(
    inputs: VerifyInputs,
    rows: torch.Tensor,
    positions: torch.Tensor,
    js_draft: torch.Tensor,
    js_heads_max: torch.Tensor,
    slack_draft: torch.Tensor,
    slack_heads: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The escape at positions that decide their rows (none accepted by the majority, none after a rejection):
    those unsure (:func:`unsure_positions`) climb ``ESCAPE_LADDER``: decided again at ``REFINE_TOP_N`` candidates, and
    those still unsure on the exact heads (:func:`redecide`).

    Args:
        inputs: the sparse round (``exact_heads`` set); rows, positions: ``[m]`` int64.
        js_draft, js_heads_max, slack_draft, slack_heads: ``[m, 1]`` float32 nats, the coarsened Eq. (6) there.

    Returns:
        ``(js_draft, js_heads_max)`` ``[m, 1]`` float32 nats, the values that decide.
    """
    d, h = js_draft.clone(), js_heads_max.clone()
    sd, sh = slack_draft.clone(), slack_heads.clone()
    moot = torch.zeros_like(d, dtype=torch.bool)  # [m, 1] the majority accepts none of them
    for top_n in ESCAPE_LADDER:
        unsure = unsure_positions(d, h, sd, sh, moot)[:, 0]  # [m]
        if not bool(unsure.any()):
            break
        i = unsure.nonzero().squeeze(-1)
        d[i, 0], h[i, 0], sd[i, 0], sh[i, 0] = redecide(inputs, rows[i], positions[i], top_n)
    return d, h
