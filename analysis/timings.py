"""Timing repeats of a measurement record (``method=latency`` lines, ``kind=latency`` lines of ``method=bench``):
medians with 95 % bootstrap intervals over repeats.

A line holds ``seconds``: ``{component: seconds}`` for one round-robin repeat (``runners/measure/latency.py``:
decode_step, verify_pass, lm_head, mc_dropout_heads, js_divergence, dropmatch_criterion). The repeats are the
unit of resampling here (how much a median would move on another set of repeats on the same machine), with
:func:`analysis.stats.bootstrap` (B, seed as there, so a table rebuilds byte for byte).

Per-repeat (paired) ratios, medians over repeats as the run's summary (:func:`runners.measure.latency.summarize_timings`):
    verify_over_decode = verify_pass / decode_step
    dm_overhead_share  = (mc_dropout_heads - lm_head + js_divergence) / verify_pass   (K extra head rows + JS)
    dm_rule_share      = (mc_dropout_heads - lm_head + dropmatch_criterion) / verify_pass
    dm_round_share     = (verify_round_dm - verify_round_sd) / verify_pass   (the decision as the loop runs it;
                         records made after the in-loop components were added)
    dm_audited_round_share = ((1 - a) * verify_round_dm_sparse + a * verify_round_dm_audited - verify_round_sd)
                         / verify_pass: the sparse decision with a share a of its rounds audited by the exact rule
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from analysis.stats import B_DEFAULT, SEED, Estimate, bootstrap

CI_NOTE = (
    f"[95% CI] of a median: percentile bootstrap over the timed repeats (B={B_DEFAULT}, seed {SEED}); "
    "it covers repeat-to-repeat noise on this machine, not other machines or loads"
)


def seconds_frame(lines: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """``{component: [n] float64 seconds}`` of the lines that hold ``seconds`` (one entry per repeat)."""
    timed = [ln["seconds"] for ln in lines if isinstance(ln.get("seconds"), Mapping)]
    comps = list(timed[0]) if timed else []
    return {c: np.array([t[c] for t in timed], dtype=np.float64) for c in comps}


def ratios(sec: Mapping[str, np.ndarray], audit_share: float = 0.0) -> dict[str, np.ndarray]:
    """Per-repeat ratios (see the module docstring), each ``[n]``; ``audit_share``: the run's a (0: no audit)."""
    extra = sec["mc_dropout_heads"] - sec["lm_head"]
    verify = sec["verify_pass"]
    out = {
        "verify_over_decode": verify / sec["decode_step"],
        "dm_overhead_share": (extra + sec["js_divergence"]) / verify,
        "dm_rule_share": (extra + sec["dropmatch_criterion"]) / verify,
    }
    if "verify_round_dm" in sec:
        out["dm_round_share"] = (sec["verify_round_dm"] - sec["verify_round_sd"]) / verify
    if "verify_round_dm_sparse" in sec:
        out["dm_sparse_round_share"] = (
            sec["verify_round_dm_sparse"] - sec["verify_round_sd"]
        ) / verify
    if "verify_round_dm_audited" in sec and audit_share > 0:
        a = float(audit_share)
        amortised = (1 - a) * sec["verify_round_dm_sparse"] + a * sec["verify_round_dm_audited"]
        out["dm_audited_round_share"] = (amortised - sec["verify_round_sd"]) / verify
    return out


def median_ci(values: Sequence[float] | np.ndarray, scale: float = 1.0) -> Estimate:
    """Median of per-repeat values times ``scale`` (e.g. 1e3: seconds -> ms), with its bootstrap interval."""
    return bootstrap(
        lambda x: np.median(x, axis=-1), [np.asarray(values, dtype=np.float64) * scale]
    )
