"""The exactness audit of the sparse variant: a seeded share of rounds also decided by the exact rule.

Paper: DropMatch (arXiv 2603.03333) Algorithm 1 decides with K heads over the whole vocabulary (Eq. 3, 5-7).
The sparse variant (:class:`criteria.dropout_heads.HeadSpec` ``top_n``) evaluates the heads at candidate tokens
only, which costs a fraction of the exact heads; it is not the paper's rule, so its agreement is measured in
every run: with ``dropmatch.audit_share`` = a, each round is, with probability a, decided a second time by the
exact rule on the same dropout masks. The run keeps the sparse decision; the two verdicts are counted.

Which rounds (:func:`is_audited`): round r (0-based, the sample's r-th draft-verify round) of sample s in a run
of seed S is audited iff ``u(S, s, r) < a``, where u is the first 64 bits of ``sha256("dropmatch-audit\\0S\\0s\\0r")``
over 2^64. The choice is its own stream: it draws nothing from the run's generators and depends neither on the
batch the sample is decoded in nor on the order of samples, so a sample is audited on the same rounds alone
and in a batch.

Same masks (:func:`audit_states`, :func:`exact_verdicts`): each audited row's generator state is read before the
round; after the run's (sparse) decision the exact rule decides those rows on generator copies restored from these
states, so both verdicts see the same masks (and, at T > 0, the same uniforms for head tokens and the emitted
token), and the run's generators move on exactly as without the audit. At T = 0 the exact rule decides only the
positions the comparison reads (the audit's cost is K full-vocabulary head rows per decided position).

Agreement of one audited round (:func:`compare`): the two prefix-closed accept masks ``[L]`` at the positions
a traced round keeps (:func:`criteria.verify.trace_to_json`): the run's accepted prefix and its first rejected
position, ``min(a + 1, L)`` positions for ``a`` accepted drafts. Prefix closure makes "every compared position
equal" the same as "the same accepted length". Per sample the counts are kept compact (:class:`AuditTally`);
a run pools them (:func:`pool`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from criteria.base import AcceptResult
from criteria.dropout_heads import HeadSpec, LMHead
from criteria.verify import verify_round

_SALT = "dropmatch-audit"


def audit_draw(seed: int, sample_id: str, round_index: int) -> float:
    """The audit's uniform of one round, in ``[0, 1)``: sha256 of ``(seed, sample_id, round_index)`` (module
    docstring); no torch generator is touched."""
    blob = f"{_SALT}\0{int(seed)}\0{sample_id}\0{int(round_index)}".encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") / 2.0**64


def is_audited(share: float, seed: int, sample_id: str, round_index: int) -> bool:
    """Whether round ``round_index`` of sample ``sample_id`` (run seed ``seed``) is audited at ``share``."""
    return share > 0 and audit_draw(seed, sample_id, round_index) < share


def audit_states(generators: Sequence[torch.Generator | None], audit_rows: Sequence[int]) -> list:
    """The generator states of the audited rows, read before the round (the exact rule replays them).

    Raises:
        ValueError: ``audit_rows`` with an index out of ``[0, B)`` or repeated (B = ``len(generators)``).
    """
    rows, B = [int(i) for i in audit_rows], len(generators)
    if len(set(rows)) != len(rows) or any(not 0 <= i < B for i in rows):
        raise ValueError(f"audit_rows must be distinct row indices in [0, {B}); got {rows}")
    return [None if generators[i] is None else generators[i].get_state() for i in rows]


def exact_verdicts(
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    draft_token_ids: torch.Tensor,
    rule: Any,
    heads: HeadSpec,
    *,
    temperature: float,
    generators: Sequence[torch.Generator | None],
    audit_rows: Sequence[int],
    states: Sequence[Any],
    run_accepted: torch.Tensor,
    draft_probs: torch.Tensor | None = None,
    draft_hidden: torch.Tensor | None = None,
    target_logits: torch.Tensor | None = None,
) -> torch.Tensor:
    """The exact rule's verdicts of the rows ``audit_rows``, on the masks the run's decision used.

    Each audited row is decided again by :func:`criteria.verify.verify_round` with ``HeadSpec(K, p_drop)`` (the
    heads over the whole vocabulary) on a generator restored from its state before the round (``states``,
    :func:`audit_states`). At T = 0 the round is cut to the positions :func:`compare` reads, ``min(a + 1, L)``
    for the row that accepted most (``max_positions``: the K exact heads, the audit's whole cost, are computed
    there only); at T > 0 the rule's own uniforms are laid out over the whole round, so it is not cut.

    Args:
        hidden, lm_head, draft_token_ids, rule, temperature, draft_probs, draft_hidden, target_logits: the round,
            as given to :func:`criteria.verify.verify_round` (all B rows).
        heads: the run's sparse :class:`HeadSpec`.
        generators: the run's B generators (only their devices are read).
        audit_rows: distinct row indices; states: their generator states before the round.
        run_accepted: ``[B]`` the run's accepted drafts per row.

    Returns:
        ``[len(audit_rows), L]`` bool, the exact rule's prefix-closed accept masks in that order; positions after
        the cut are False (never compared).

    Raises:
        ValueError: an audit of a run that is not sparse (``heads.top_n`` None: nothing to audit), no rows, or
            a state count other than the row count.
    """
    rows = [int(i) for i in audit_rows]
    if heads.top_n is None:
        raise ValueError(
            "the audit decides sparse rounds again with the exact rule, but the run is exact "
            "(dropmatch.sparse_top_n=null); allowed: audit_rows=() for an exact run"
        )
    if not rows or len(states) != len(rows):
        raise ValueError(f"need one state per audited row; got {len(states)} for rows {rows}")
    L = draft_token_ids.shape[1]
    copies = [
        None if s is None else torch.Generator(device=generators[i].device).set_state(s)
        for i, s in zip(rows, states)
    ]
    idx = torch.tensor(rows, dtype=torch.long, device=draft_token_ids.device)

    def pick(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.index_select(0, idx.to(t.device))

    cut = None
    if temperature == 0:
        cut = min(int(run_accepted.index_select(0, idx.to(run_accepted.device)).max()) + 1, L)
    exact = verify_round(
        pick(hidden),
        lm_head,
        pick(draft_token_ids),
        rule,
        HeadSpec(heads.K, heads.p_drop),
        temperature=temperature,
        generators=copies,
        draft_probs=pick(draft_probs),
        draft_hidden=pick(draft_hidden),
        target_logits=pick(target_logits),
        max_positions=cut,
    ).accept_mask
    if exact.shape[1] < L:
        exact = torch.cat([exact, exact.new_zeros(len(rows), L - exact.shape[1])], dim=1)
    return exact


def audited_verify_round(
    hidden: torch.Tensor | None,
    lm_head: LMHead | None,
    draft_token_ids: torch.Tensor,
    rule: Any,
    heads: HeadSpec,
    *,
    temperature: float,
    generators: Sequence[torch.Generator | None],
    audit_rows: Sequence[int] = (),
    draft_probs: torch.Tensor | None = None,
    draft_hidden: torch.Tensor | None = None,
    trace: bool = False,
    target_logits: torch.Tensor | None = None,
) -> tuple[AcceptResult, torch.Tensor | None]:
    """:func:`criteria.verify.verify_round` (the run's decision, unchanged), plus the exact rule's verdicts of the
    rows ``audit_rows`` on the same dropout masks (:func:`audit_states`, then :func:`exact_verdicts`; the loops
    call the two parts themselves to time the audit apart from the decision).

    Args:
        hidden, lm_head, draft_token_ids, rule, heads, temperature, generators, draft_probs, draft_hidden, trace,
            target_logits: as :func:`criteria.verify.verify_round` (``heads`` the run's sparse
            :class:`HeadSpec`; ``target_logits`` the engine's plain logits, used by both decisions).
        audit_rows: indices of the rows (``0 <= i < B``, distinct) to decide again exactly; empty: no audit.

    Returns:
        ``(result, exact)``: the run's :class:`AcceptResult` (bit for bit what ``verify_round`` returns, generators
        advanced as by it) and ``exact`` ``[len(audit_rows), L]`` bool (:func:`exact_verdicts`); None when
        ``audit_rows`` is empty.

    Raises:
        ValueError: ``audit_rows`` with an index out of ``[0, B)`` or repeated, or an audit of a run that is not
            sparse (``heads.top_n`` None: nothing to audit); and whatever ``verify_round`` raises.
    """
    if len(generators) != draft_token_ids.shape[0]:
        raise ValueError(
            f"need one generator per row: B={draft_token_ids.shape[0]}, got {len(generators)}"
        )
    states = audit_states(generators, audit_rows)
    if audit_rows and heads.top_n is None:
        raise ValueError(
            "the audit decides sparse rounds again with the exact rule, but the run is exact "
            "(dropmatch.sparse_top_n=null); allowed: audit_rows=() for an exact run"
        )
    res = verify_round(
        hidden,
        lm_head,
        draft_token_ids,
        rule,
        heads,
        temperature=temperature,
        generators=generators,
        draft_probs=draft_probs,
        draft_hidden=draft_hidden,
        trace=trace,
        target_logits=target_logits,
    )
    if not audit_rows:
        return res, None
    exact = exact_verdicts(
        hidden,
        lm_head,
        draft_token_ids,
        rule,
        heads,
        temperature=temperature,
        generators=generators,
        audit_rows=audit_rows,
        states=states,
        run_accepted=res.num_accepted,
        draft_probs=draft_probs,
        draft_hidden=draft_hidden,
        target_logits=target_logits,
    )
    return res, exact


def compare(run_mask: Sequence[bool], exact_mask: Sequence[bool]) -> tuple[int, int, bool]:
    """One audited round: ``(positions compared, positions equal, same accepted length)``.

    Args:
        run_mask / exact_mask: the run's (sparse) and the exact rule's prefix-closed accept masks, ``L`` bools.

    Returns:
        Compared: the run's accepted prefix and its first rejected position, ``min(a + 1, L)``.
    """
    run, exact = [bool(x) for x in run_mask], [bool(x) for x in exact_mask]
    if len(run) != len(exact):
        raise ValueError(f"accept masks of different lengths: {len(run)} vs {len(exact)}")
    n = min(sum(run) + 1, len(run))
    equal = sum(a == b for a, b in zip(run[:n], exact[:n]))
    return n, equal, sum(run) == sum(exact)


@dataclass
class AuditTally:
    """The audited rounds of one sample, as the loop decides them (cut to the kept rounds by :meth:`record`).

    Attributes:
        rounds: per audited round ``(round index, positions compared, positions equal, same accepted length)``.
    """

    rounds: list[tuple[int, int, int, bool]] = field(default_factory=list)

    def add(self, round_index: int, run_mask: Sequence[bool], exact_mask: Sequence[bool]) -> None:
        """Count one audited round (:func:`compare`)."""
        self.rounds.append((int(round_index), *compare(run_mask, exact_mask)))

    def record(self, kept_rounds: int) -> dict:
        """The sample record's ``audit`` entry over its first ``kept_rounds`` rounds (those in its output).

        Returns:
            ``{"rounds", "rounds_equal", "positions", "positions_equal"}`` counts, ``"audited"`` (the audited
            round indices) and ``"differ"`` (those whose accepted lengths differ), all ints / int lists.
        """
        kept = [r for r in self.rounds if r[0] < kept_rounds]
        return {
            "rounds": len(kept),
            "rounds_equal": sum(int(r[3]) for r in kept),
            "positions": sum(r[1] for r in kept),
            "positions_equal": sum(r[2] for r in kept),
            "audited": [r[0] for r in kept],
            "differ": [r[0] for r in kept if not r[3]],
        }


COUNTS = ("rounds", "rounds_equal", "positions", "positions_equal")


def pool(samples: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """A run's audit summary from its sample records (``audit`` entries of :meth:`AuditTally.record`).

    Returns:
        ``{}`` when no record has an ``audit`` entry; else ``audit/<count>`` for each of :data:`COUNTS` summed
        over the samples, and ``audit/rounds_total``, the rounds of those samples (audited or not), so that
        ``audit/rounds / audit/rounds_total`` is the realised audited share.
    """
    audited = [s for s in samples if isinstance(s.get("audit"), Mapping)]
    if not audited:
        return {}
    out = {f"audit/{k}": sum(int(s["audit"][k]) for s in audited) for k in COUNTS}
    out["audit/rounds_total"] = sum(len(s.get("accepted_per_round") or ()) for s in audited)
    return out
