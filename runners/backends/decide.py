"""One round's decision for a batch of rows, shared by the loops: the run's rule, then the exactness audit.

Both CPU loops (:mod:`runners.backends.hf_loop`, :mod:`runners.backends.llamacpp_loop`) hand their verify pass's
hidden states (and llama.cpp its own plain logits) to :func:`decide_round`, which calls
:func:`criteria.verify.verify_round` for the run's decision and, for the rows whose round the audit picks
(:func:`criteria.audit.is_audited`: each sample's own hashed stream), :func:`criteria.audit.exact_verdicts` on
the same dropout masks. The audit is a measurement on top of the decision, so its seconds are returned apart.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from criteria.audit import audit_states, exact_verdicts, is_audited
from criteria.base import AcceptResult
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.verify import verify_round
from runners.backends.round_meter import RoundClock


def decide_round(
    rows: Sequence[Any],
    hidden: torch.Tensor | None,
    head: LMHead | None,
    drafts: torch.Tensor,
    rule: Any,
    heads: HeadSpec,
    *,
    seed: int,
    trace: bool,
    **round_in: Any,
) -> tuple[AcceptResult, float, float]:
    """Decide one round of ``rows`` and audit the rows the audit picks.

    Args:
        rows: the batch's rows (:class:`runners.backends.batch_rows.Row`: ``gen``, ``sample``, ``accepted``,
            ``audit``), in the order of ``drafts``.
        hidden, head, drafts, rule, heads, trace: as :func:`criteria.verify.verify_round`.
        seed: the run's ``decoding.seed`` (the audit's hashed stream).
        round_in: ``temperature`` and the optional ``draft_probs`` / ``draft_hidden`` / ``target_logits``.

    Returns:
        ``(result, decision_s, audit_s)``: the run's :class:`AcceptResult` and the seconds of the decision and of
        the audit (0.0 when no row is audited); each audited row's tally gets the round, and every row the
        seconds to the plain logits and after them and its positions at each escape rung
        (:class:`runners.backends.round_meter.RoundClock`).
    """
    audit_rows = [
        i
        for i, r in enumerate(rows)
        if r.audit is not None
        and is_audited(heads.audit_share, seed, r.sample.sample_id, len(r.accepted))
    ]
    gens = [r.gen for r in rows]
    t0 = time.perf_counter()
    states = audit_states(gens, audit_rows)  # before the decision draws the masks
    clock = RoundClock(len(rows), drafts.device)
    res = verify_round(
        hidden, head, drafts, rule, heads, generators=gens, trace=trace, meter=clock, **round_in
    )
    clock.stop()
    t1 = time.perf_counter()
    clock.charge(rows)
    if not audit_rows:
        return res, t1 - t0, 0.0
    exact = exact_verdicts(
        hidden,
        head,
        drafts,
        rule,
        heads,
        generators=gens,
        audit_rows=audit_rows,
        states=states,
        run_accepted=res.num_accepted,
        **round_in,
    )
    for j, i in enumerate(audit_rows):
        rows[i].audit.add(len(rows[i].accepted), res.accept_mask[i].tolist(), exact[j].tolist())
    return res, t1 - t0, time.perf_counter() - t1
