"""The counter identity of a run record, checked on ``samples.jsonl``: the counters count only tokens the output kept.

Speculative runs (L > 0): ``num_drafts + num_accepted_tokens == len(output_token_ids) - 1 + eos_removed`` (rounds
emit every output token but the first, which comes from prefill; an EOS the output dropped was still emitted);
``accepted_per_round`` has one entry per round summing to the accepted count; the per-position counts sum to it.
Autoregressive runs (L = 0) count no drafts (vLLM's convention) and one zero-accepted step per emitted token.
"""

from __future__ import annotations

import json
from pathlib import Path


def counter_faults(run_dir: Path) -> list[str]:
    """Every sample of ``run_dir`` whose counters break the identity (empty: all hold)."""
    faults = []
    for line in (run_dir / "samples.jsonl").read_text().splitlines():
        s = json.loads(line)
        spec, ids = s.get("spec") or {}, s.get("output_token_ids") or []
        if "num_drafts" not in spec:  # measurement records (latency, bench) carry no rounds
            continue
        rounds, acc = int(spec["num_drafts"]), int(spec["num_accepted_tokens"])
        emitted = max(0, len(ids) - 1 + int(s.get("eos_removed", 0)))
        per_round = s.get("accepted_per_round")
        if not spec.get(
            "num_speculative_tokens"
        ):  # autoregressive (L = 0): no drafts, one step per token
            if (
                rounds
                or acc
                or (per_round is not None and (len(per_round) != emitted or any(per_round)))
            ):
                faults.append(
                    f"{s['sample_id']}: autoregressive run with drafts counted ({rounds} / {acc})"
                )
            continue
        per_pos = spec.get("num_accepted_tokens_per_pos") or []
        if rounds + acc != emitted:
            faults.append(
                f"{s['sample_id']}: rounds {rounds} + accepted {acc} != emitted {emitted}"
            )
        if per_round is not None and (len(per_round) != rounds or sum(per_round) != acc):
            faults.append(
                f"{s['sample_id']}: accepted_per_round has {len(per_round)} rounds summing to "
                f"{sum(per_round)}; counters say {rounds} / {acc}"
            )
        if per_pos and sum(per_pos) != acc:
            faults.append(
                f"{s['sample_id']}: per-position counts sum to {sum(per_pos)}, accepted {acc}"
            )
    return faults
