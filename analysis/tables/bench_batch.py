"""The benchmark's batch table (``results/bench/bench_batch.*``, part of the ``bench`` artefact): our arms decoding
the first B prompts together, as aggregate tokens/s, against the same arm at batch 1 on the same prompts and
against the engine's AR at batch B.

Reads the ``batch<B>/<repeat>`` lines of the runs :mod:`analysis.tables.bench` chose (runs with
``method.batch_sizes`` holding a B > 1; :mod:`runners.measure.bench`); point values are the summary's
(:mod:`runners.measure.bench_batch_summary`); intervals: percentile bootstrap over repeats, pairing each repeat's
batch call with the same repeat's batch-1 calls (or the AR arm's batch call); one repeat: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.artefact import Table
from analysis.cells import est_columns
from analysis.measure_runs import varying
from analysis.stats import B_DEFAULT, NAN, SEED, Estimate, bootstrap, fmt, fmt_spread
from runners.records.bench_arm_names import engine_ar
from runners.records.bench_lines import paired_repeats

STEM = "bench_batch"
TITLE = "Benchmark at batch B: aggregate tokens/s of our loops, B prompts decoded together"


PREFIX = "bench/batch"  # summary keys bench/batch<B>/<arm>/...


def repeat_ratio_ci(pairs: Sequence[tuple[float, float, float, float]]) -> Estimate:
    """Pooled rate ratio of per-repeat ``(tokens, seconds, ref tokens, ref seconds)``, bootstrap over repeats.

    The point value equals the summary's (pooled over the same repeats); one repeat: no interval
    (NaN bounds); none: :data:`analysis.stats.NAN`."""
    if not pairs:
        return NAN
    cols = [np.array([p[i] for p in pairs], dtype=float) for i in range(4)]

    def stat(ta: np.ndarray, sa: np.ndarray, tb: np.ndarray, sb: np.ndarray) -> np.ndarray:
        return (ta.sum(axis=-1) / sa.sum(axis=-1)) / (tb.sum(axis=-1) / sb.sum(axis=-1))

    if len(pairs) == 1:
        return Estimate(float(stat(*cols)), np.nan, np.nan, 1)
    return bootstrap(stat, cols)


def batch_rows(
    summary: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
    labels: Mapping[str, str],
    dtype_of: Mapping[str, str],
) -> pd.DataFrame:
    """One row per (B, arm) of one run: aggregate rate, ratios (+ CI), τ, outputs equal to batch 1.

    Args:
        labels: arm -> label; dtype_of: arm -> the precision it computed in (the batch-1 table's ``dtype``).
    """
    rows = []
    for B in [b for b in summary.get("bench/batch_sizes", []) if b > 1]:
        key = f"{PREFIX}{B}"
        for arm in summary["bench/arms"]:
            g = {
                k.removeprefix(f"{key}/{arm}/"): v
                for k, v in summary.items()
                if k.startswith(f"{key}/{arm}/")
            }
            if not g:
                continue
            ref = engine_ar(arm)
            mism = g.get("first_mismatches") or []
            row = {
                "dtype": dtype_of[arm],
                "L": summary["bench/L"],
                "B": B,
                "arm": arm,
                "label": labels.get(arm, arm),
                "repeats": summary[f"{key}/repeats"],
                "tok_per_s": g["tok_per_s"],
                "tok_per_s_repeat_std": g["tok_per_s_repeat_std"],
                "batch1_tok_per_s": g["batch1_tok_per_s"],
                **est_columns("x_batch1", repeat_ratio_ci(paired_repeats(lines, B, arm))),
                **(
                    {"x_ar": 1.0, "x_ar_lo": 1.0, "x_ar_hi": 1.0}
                    if arm == ref
                    else est_columns("x_ar", repeat_ratio_ci(paired_repeats(lines, B, arm, ref)))
                ),
                "decode_tok_per_s": g.get("decode_tok_per_s", np.nan),
                **est_columns(
                    "decode_x_batch1", repeat_ratio_ci(paired_repeats(lines, B, arm, decode=True))
                ),
                "tau": g.get("tau", np.nan),
                "identical_to_batch1": g["identical_to_batch1"],
                "outputs": g["num_outputs"],
                "first_mismatch": "; ".join(
                    f"{m['prompt_id']}#{m['repeat']}@{m['position']}" for m in mism[:3]
                )
                + (f" (+{len(mism) - 3})" if len(mism) > 3 else ""),
            }
            rows.append(row)
    return pd.DataFrame(rows)


def format_batch(t: pd.DataFrame) -> pd.DataFrame:
    """The rows as read (labels that vary across runs first)."""
    f = t[varying(t, ("pair", "L"))].astype(str).reset_index(drop=True)
    f["dtype"], f["arm"], f["B"] = t["dtype"].values, t["label"].values, t["B"].astype(int).values
    f["tok/s aggregate at B"] = [
        fmt_spread(a, b, n)
        for a, b, n in zip(t["tok_per_s"], t["tok_per_s_repeat_std"], t["repeats"])
    ]
    f["tok/s at batch 1 (same prompts)"] = [
        "" if pd.isna(v) else f"{v:.2f}" for v in t["batch1_tok_per_s"]
    ]
    for col, name in (("x_batch1", "× batch 1 [95% CI]"), ("x_ar", "× its AR at B [95% CI]")):
        f[name] = [
            fmt(Estimate(v, lo, hi, 1)) for v, lo, hi in zip(t[col], t[f"{col}_lo"], t[f"{col}_hi"])
        ]
    f["tok/s at B, prefill excl."] = [
        "" if pd.isna(v) else f"{v:.2f}" for v in t["decode_tok_per_s"]
    ]
    f["× batch 1, prefill excl. [95% CI]"] = [
        "" if pd.isna(v) else fmt(Estimate(v, lo, hi, 1))
        for v, lo, hi in zip(t["decode_x_batch1"], t["decode_x_batch1_lo"], t["decode_x_batch1_hi"])
    ]
    f["τ"] = ["" if pd.isna(v) else f"{v:.2f}" for v in t["tau"]]
    f["= batch-1 tokens"] = [
        f"{int(a)}/{int(b)}" for a, b in zip(t["identical_to_batch1"], t["outputs"])
    ]
    f["first mismatch (prompt#repeat@position)"] = t["first_mismatch"].values
    return f


def batch_footer(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Setting lines (one per run: n prompts, B, repeats, ISA) and the definitions."""
    notes = []
    for s in summaries:
        sizes = [b for b in s.get("bench/batch_sizes", []) if b > 1]
        if not sizes:
            continue
        isa = s.get("model/isa")
        notes.append(
            f"{s['model/dtype']}, L={s['bench/L']}: "
            + "; ".join(
                f"B={b}: the first {s[f'{PREFIX}{b}/num_prompts']} prompts decoded together x "
                f"{s[f'{PREFIX}{b}/repeats']} repeats"
                for b in sizes
            )
            + f"; torch threads {s.get('model/threads')}"
            + (f"; llama.cpp {s['model/gguf_precision']}" if s.get("model/gguf_precision") else "")
            + (
                f"; CPU ISA: {' '.join(isa) or 'none of avx2/avx512/amx/asimd'}"
                if isa is not None
                else "; CPU ISA: not recorded"
            )
        )
    return [
        *notes,
        "tok/s aggregate at B = output tokens of the B prompts / wall seconds of the one call that decodes them "
        "together (each prompt prefilled as it joins, then one forward per round for all rows), summed over "
        "repeats; ± = std over repeats; tok/s at batch 1 = the same arm on the same B prompts and repeats, one "
        "prompt at a time (the batch-1 table's calls); × its AR at B = over our AR at B (float32 arms: our "
        "float32 AR at B; llama.cpp arms: llama.cpp's AR at B)",
        "prefill excl. = the rounds only: (output tokens less each prompt's first, which its prefill emits) / "
        "(the call's wall seconds less its prefills, one prompt at a time, and its exactness audit); × batch 1, "
        "prefill excl. = over the same arm's batch-1 rate after the prefill on the same prompts and repeats (the "
        "batch-1 table's prefill-excl. rate); blank: a run recorded before batch calls kept their prefill times",
        f"[95% CI]: percentile bootstrap over repeats ({B_DEFAULT} resamples, seed {SEED}; each repeat's batch call "
        "paired with that repeat's reference calls); one repeat: no interval",
        "= batch-1 tokens: outputs (prompt x repeat) equal to the same arm's batch-1 output (greedy; batched "
        "kernels may round differently and so flip a near-tie); transformers' arms (generate AR, assisted "
        "generation) run at batch 1 only: assisted generation decodes a batch of one",
    ]


def batch_table(
    blocks: Sequence[pd.DataFrame], summaries: Sequence[Mapping[str, Any]], provenance: list[str]
) -> Table | None:
    """The batch table of the chosen runs, None when none has a B > 1."""
    blocks = [b for b in blocks if not b.empty]
    if not blocks:
        return None
    t = pd.concat(blocks, ignore_index=True)
    t = t[["pair", *(c for c in t.columns if c != "pair")]]
    return Table(STEM, TITLE, t, format_batch(t), [*batch_footer(summaries), *provenance])
