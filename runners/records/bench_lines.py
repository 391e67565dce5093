"""Readers of the benchmark's batch record lines (``kind: batch``), shared by its summary and its table.

Pure functions of the record lines (:mod:`runners.measure.bench` writes them): the summary
(:mod:`runners.measure.bench_batch_summary`) and the table (:mod:`analysis.tables.bench_batch`, which may not
import the measurement package) read the same totals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def batch_lines(lines: Sequence[Mapping[str, Any]], B: int) -> list[Mapping[str, Any]]:
    """The ``kind: batch`` lines of batch size ``B``, by repeat."""
    out = [ln for ln in lines if ln.get("kind") == "batch" and int(ln["batch_size"]) == B]
    return sorted(out, key=lambda ln: int(ln["repeat"]))


def paired_repeats(
    lines: Sequence[Mapping[str, Any]], B: int, arm: str, ref: str = "batch1", decode: bool = False
) -> list[tuple[float, float, float, float]]:
    """Per repeat (ascending): ``(tokens, seconds)`` of ``arm`` at batch B, then ``(tokens, seconds)`` of the
    reference.

    Args:
        ref: ``"batch1"``: the same arm's batch-1 calls on the same B prompts in that repeat (summed); an arm
            name: that arm's batch-B call in the same repeat.
        decode: False: the whole calls (``tokens``, ``seconds``: prefill included); True: the decoding after the
            prefills (``decode_tokens``, ``decode_s`` on both sides; a batch call records them since the
            bench's prefill-excluded batch columns, so older lines hold no pair).

    Returns:
        One tuple per repeat that holds both sides; empty when none does.
    """
    tk, sk = ("decode_tokens", "decode_s") if decode else ("tokens", "seconds")
    out = []
    for ln in batch_lines(lines, B):
        if arm not in ln["arms"] or sk not in ln["arms"][arm]:
            continue
        a = ln["arms"][arm]
        if ref == "batch1":
            wanted = set(ln["prompt_ids"])
            one = [
                p["arms"][arm]
                for p in lines
                if p.get("kind") == "prompt"
                and p["repeat"] == ln["repeat"]
                and p["prompt_id"] in wanted
                and arm in p["arms"]
            ]
            if len(one) != len(wanted) or any(r.get(sk) is None for r in one):
                continue
            t, s = sum(r[tk] for r in one), sum(r[sk] for r in one)
        elif ref in ln["arms"] and sk in ln["arms"][ref]:
            t, s = ln["arms"][ref][tk], ln["arms"][ref][sk]
        else:
            continue
        out.append((a[tk], a[sk], t, s))
    return out


def decision_per_pass(
    lines: Sequence[Mapping[str, Any]], arm: str, ref: str
) -> list[tuple[float, float, float, float, float]]:
    """Per prompt line holding both arms: ``(decision_s, passes)`` of ``arm``, ``(decision_s, verify_s, passes)``
    of ``ref``, each summed over the line's calls (batch 1, one prompt and repeat per line).

    Where every such line's two arms carry the round meter's parts (:func:`uses_meter`), ``decision_s`` is
    ``rule_s`` (the seconds after the plain logits: the dropout heads, the rule and its escape) and ``verify_s``
    the target's forward plus its plain LM head (``verify_s + plain_s``): Table 6's decision cost
    (:func:`analysis.footer.decision_cost_lines`). Otherwise (records made before the meter) ``decision_s`` is
    ``criterion_s`` (the LM head and the rule) and ``verify_s`` the forward alone. ``passes`` are the verify
    passes after the prefill. Lines recorded without these fields are left out.
    """
    pairs = _both_arms(lines, arm, ref, ("verify_passes",))
    meter = _metered(pairs)
    out = []
    for a, b in pairs:
        if any(r.get(k) is None for r in (a, b) for k in ("criterion_s", "verify_s")):
            continue
        if meter:
            row = (a["rule_s"], a["verify_passes"], b["rule_s"], b["verify_s"] + b["plain_s"])
        else:
            row = (a["criterion_s"], a["verify_passes"], b["criterion_s"], b["verify_s"])
        out.append(tuple(float(v) for v in (*row, b["verify_passes"])))
    return out


def uses_meter(lines: Sequence[Mapping[str, Any]], arm: str, ref: str) -> bool:
    """Whether every prompt line holding both arms has the round meter's ``plain_s`` and ``rule_s`` in both (and
    there is such a line): :func:`decision_per_pass` then measures the decision as Table 6 does."""
    return _metered(_both_arms(lines, arm, ref, ("verify_passes",)))


def _metered(pairs: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> bool:
    """Whether there are pairs and every one has the round meter's ``plain_s`` and ``rule_s`` on both sides."""
    return bool(pairs) and all(
        r.get(k) is not None for a, b in pairs for r in (a, b) for k in ("plain_s", "rule_s")
    )


def _both_arms(
    lines: Sequence[Mapping[str, Any]], arm: str, ref: str, fields: Sequence[str]
) -> list[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """``(arm's fields, ref's fields)`` of each prompt line holding both, each with every one of ``fields``."""
    out = []
    for ln in lines:
        if ln.get("kind") != "prompt" or arm not in ln["arms"] or ref not in ln["arms"]:
            continue
        a, b = ln["arms"][arm], ln["arms"][ref]
        if all(r.get(k) is not None for r in (a, b) for k in fields):
            out.append((a, b))
    return out


def decision_share(rows: Sequence[Sequence[float]]) -> float:
    """The decision's extra time per verify pass over the reference's forward per pass, pooled over prompts:
    :func:`share_of_sums` of :func:`decision_per_pass`'s rows summed; NaN without rows or passes."""
    if not rows:
        return float("nan")
    ca, pa, cb, vb, pb = (sum(r[i] for r in rows) for i in range(5))
    if pa <= 0 or pb <= 0 or vb <= 0:
        return float("nan")
    return share_of_sums(ca, pa, cb, vb, pb)


def share_of_sums(ca, pa, cb, vb, pb):
    """``(ca / pa − cb / pb) / (vb / pb)`` from the summed columns of :func:`decision_per_pass` (floats or numpy
    arrays of bootstrap resamples alike)."""
    return (ca / pa - cb / pb) / (vb / pb)
