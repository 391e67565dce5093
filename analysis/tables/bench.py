"""The benchmark table (``./reproduce.sh bench``): AR, our SD, transformers' assisted generation and our SD+DM
side by side on the same prompts, as tokens/s and ratios, with τ, token equality to AR, verify(L+1)/decode
and the DropMatch decision overhead share of the verify pass.

Reads the records of ``method=bench`` runs only (``runners/measure/bench.py``; conf/experiment/bench.yaml), the
newest complete run per (pair, dtype, L), one block of rows each:
    python -m runners.main -m experiment=bench
    python -m analysis.render bench --profile default
Ratios come with 95 % intervals by a paired bootstrap over prompts (each prompt's tokens and seconds summed
over its repeats, both arms resampled together); the timed cost ratios with intervals over their repeats
(:mod:`analysis.timings`). The CSV holds numbers only. Runs with ``method.batch_sizes`` > 1 add a second table,
``bench_batch`` (:mod:`analysis.tables.bench_batch`: aggregate tokens/s at batch B).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.artefact import Artefact, Profile, Table
from analysis.cells import est_columns
from analysis.footer import provenance_lines
from analysis.measure_runs import lines_of, newest, of_method, used, varying
from analysis.stats import B_DEFAULT, NAN, SEED, Estimate, bootstrap, fmt, fmt_spread
from analysis.tables.bench_batch import batch_rows, batch_table
from analysis.timings import CI_NOTE, median_ci, ratios, seconds_frame
from runners.records.bench_arm_names import ENGINE_NAMES, ENGINES, FP32_ARMS, GGUF_ARMS
from runners.records.bench_lines import decision_per_pass, share_of_sums, uses_meter

NAME = "bench"
ARM_LABELS = {
    "ar": "our AR (L=0)",
    "hf_ar": "transformers generate (AR)",
    "sd": "our SD",
    "hf_assisted": "transformers assisted generation",
    "sd_dm": "our SD + DropMatch",
    "f32_ar": "our AR, float32 (L=0)",
    "f32_sd": "our SD, float32",
    "f32_sd_dm": "our SD + DropMatch, float32",
    "lc_ar": "llama.cpp AR (L=0)",
    "lc_sd": "llama.cpp SD",
    "lc_sd_dm": "llama.cpp SD + DropMatch",
}
REFS = ("ar", "hf_ar", "hf_assisted", "f32_ar", "lc_ar")
REF_NAMES = {
    "ar": "× our AR",
    "hf_ar": "× HF AR",
    "hf_assisted": "× HF assisted",
    "f32_ar": "× our float32 AR",
    "lc_ar": "× llama.cpp AR",
}
OPTIONAL_REFS = ("f32_ar", "lc_ar")  # columns only in runs that have the arm


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete ``method=bench`` runs of the profile."""
    return of_method(runs, profile, "bench")


def per_prompt(lines: Sequence[Mapping[str, Any]], arm: str) -> pd.DataFrame:
    """``prompt_id, tokens, seconds`` of ``arm``, summed over each prompt's repeats (prefill included)."""
    rows = [
        {
            "prompt_id": ln["prompt_id"],
            "tokens": ln["arms"][arm]["tokens"],
            "seconds": ln["arms"][arm]["seconds"],
        }
        for ln in lines
        if ln.get("kind") == "prompt" and arm in ln["arms"]
    ]
    if not rows:
        return pd.DataFrame(columns=["tokens", "seconds"])
    return pd.DataFrame(rows).groupby("prompt_id", sort=True)[["tokens", "seconds"]].sum()


def rate_ratio_ci(lines: Sequence[Mapping[str, Any]], arm: str, ref: str) -> Estimate:
    """(Σtokens/Σseconds of ``arm``) / (that of ``ref``) over the prompts both ran, paired bootstrap over prompts.

    The point value equals the summary's ``bench/<arm>/x_<ref>`` (rates pooled over prompts and repeats)."""
    m = per_prompt(lines, arm).merge(
        per_prompt(lines, ref), left_index=True, right_index=True, suffixes=("_a", "_b")
    )
    if m.empty:
        return NAN

    def stat(ta: np.ndarray, sa: np.ndarray, tb: np.ndarray, sb: np.ndarray) -> np.ndarray:
        return (ta.sum(axis=-1) / sa.sum(axis=-1)) / (tb.sum(axis=-1) / sb.sum(axis=-1))

    return bootstrap(stat, [m["tokens_a"], m["seconds_a"], m["tokens_b"], m["seconds_b"]])


def decision_share_ci(lines: Sequence[Mapping[str, Any]], pre: str = "") -> Estimate:
    """The DropMatch decision's own share of a verify pass in the loop, pooled over prompt lines
    (:func:`runners.records.bench_lines.decision_share` of SD+DM against SD of the engine ``pre``: ``""`` ours,
    ``"f32_"`` ours in float32, ``"lc_"`` llama.cpp), percentile bootstrap over the lines; :data:`analysis.stats.NAN` without them."""
    rows = decision_per_pass(lines, f"{pre}sd_dm", f"{pre}sd")
    if not rows:
        return NAN

    def stat(*cols):
        return share_of_sums(*(x.sum(axis=-1) for x in cols))

    cols = [np.array([r[i] for r in rows], dtype=float) for i in range(5)]
    est = bootstrap(stat, cols)
    return Estimate(100 * est.value, 100 * est.lo, 100 * est.hi, est.n)


def arm_dtype(summary: Mapping, arm: str) -> str:
    """The precision ``arm`` computed in: the pair's dtype, the float32 arms float32, llama.cpp's arms the GGUF's
    own types."""
    if arm in GGUF_ARMS:
        return summary.get("model/gguf_precision", "gguf")
    if arm in FP32_ARMS:
        return summary.get("model/f32_dtype", "float32")
    return summary["model/dtype"]


def arm_rows(summary: Mapping, lines: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per arm of one run: rates (tokens/s), ratios to the reference arms (+ CI), τ, equality with AR."""
    arms = list(summary["bench/arms"])
    n = summary["bench/num_lines"]
    rows = []
    for arm in arms:
        g = {k.split("/", 2)[2]: v for k, v in summary.items() if k.startswith(f"bench/{arm}/")}
        mism = g.get("first_mismatches") or []
        row = {
            "dtype": arm_dtype(summary, arm),
            "L": summary["bench/L"],
            "arm": arm,
            "label": ARM_LABELS.get(arm, arm),
            "prompts": summary["bench/num_prompts"],
            "repeats": summary["bench/repeats"],
            "tok_per_s": g["tok_per_s"],
            "tok_per_s_repeat_std": g["tok_per_s_repeat_std"],
            "decode_tok_per_s": g["decode_tok_per_s"],
            "tau": g.get("tau", np.nan),
            "identical_to_ar": n if arm == "ar" else g.get("identical_to_ar"),
            "lines": n,
            "first_mismatch": "; ".join(
                f"{m['prompt_id']}#{m['repeat']}@{m['position']}" for m in mism[:3]
            )
            + (f" (+{len(mism) - 3})" if len(mism) > 3 else ""),
        }
        for ref in REFS:
            if ref in OPTIONAL_REFS and ref not in arms:
                continue
            if ref == arm:
                row.update({f"x_{ref}": 1.0, f"x_{ref}_lo": 1.0, f"x_{ref}_hi": 1.0})
            elif ref in arms:
                row.update(est_columns(f"x_{ref}", rate_ratio_ci(lines, arm, ref)))
            else:
                row.update(est_columns(f"x_{ref}", NAN))
            for suffix in ("_decode", "_median"):
                row[f"x_{ref}{suffix}"] = 1.0 if ref == arm else g.get(f"x_{ref}{suffix}", np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def cost_note(summary: Mapping, lines: Sequence[Mapping[str, Any]]) -> str:
    """The cost ratios and setting of one run, for the footer (timed ratios with their CI over repeats)."""
    f = lambda k, s=".2f": "n/a" if summary.get(k) is None else format(summary[k], s)  # noqa: E731
    pct = lambda k: "n/a" if summary.get(k) is None else f"{100 * summary[k]:.1f}%"  # noqa: E731

    def audit(pre: str) -> str:  # records that time the exactness audit apart from the decision
        k = f"bench/in_situ/{pre}dm_audit_share"
        return f"; its exactness audit {pct(k)} more" if summary.get(k) is not None else ""

    def decision(pre: str) -> str:
        """The decision alone, from the lines (so records made before the summary key get it too)."""
        e = decision_share_ci(lines, pre)
        if np.isnan(e.value):
            return "n/a"
        return f"{e.value:.1f}%" + ("" if np.isnan(e.lo) else f" [{e.lo:.1f}, {e.hi:.1f}]")

    def seconds(pre: str) -> str:
        """What the decision's seconds are: the round meter's (Table 6's measure) or the older records' criterion."""
        if uses_meter(lines, f"{pre}sd_dm", f"{pre}sd"):
            return "seconds after the plain logits per pass less SD's, over SD's forward + LM head, as Table 6"
        return "decision seconds per pass less SD's" if pre == "" else "decision seconds"

    sec = seconds_frame([ln for ln in lines if ln.get("kind") == "latency"])
    if sec:
        r = ratios(sec)
        vd, dm = (
            fmt(median_ci(r["verify_over_decode"])),
            fmt(median_ci(r["dm_overhead_share"], 100.0), 1) + "%",
        )
        timed = f"{len(sec['verify_pass'])} timed repeats"
    else:
        vd, dm, timed = "n/a", "n/a", "no timed repeats"
    return (
        f"{summary['model/dtype']}, L={summary['bench/L']}: {summary['bench/num_prompts']} prompts (mean "
        f"{summary['bench/prompt_tokens_mean']:.0f} prompt tokens) x {summary['bench/repeats']} repeats; "
        f"verify(L+1)/decode {vd} (timed, {summary.get('bench/latency/context', '?')}-token KV, {timed}) / "
        f"{f('bench/in_situ/verify_over_decode')} (in the loop: SD verify pass vs AR step); DM decision overhead "
        f"{dm} of the verify pass (timed: the exact rule, K extra head rows over the whole vocabulary + JS) / {decision('')} (in the loop: SD+DM's "
        f"{seconds('')}{audit('')}; with the two arms' verify forwards too, whose difference is the "
        f"forward's own variation: {pct('bench/in_situ/dm_overhead_share')}); torch threads {summary.get('model/threads')}; "
        f"max 1-min load average {f('bench/loadavg_1min_max', '.1f')}"
        + (
            f"; CPU ISA: {' '.join(summary['model/isa']) or 'none of avx2/avx512/amx/asimd'}"
            if "model/isa" in summary
            else ""
        )
        + "".join(
            f"; {ENGINE_NAMES[pre]}"
            + ("" if pre == "f32_" else f" ({arm_dtype(summary, pre + 'ar')})")
            + f": verify(L+1)/decode "
            f"{f(f'bench/in_situ/{pre}verify_over_decode')} (in the loop), DM decision overhead "
            f"{decision(pre)} of its verify pass (in the loop, {seconds(pre)}{audit(pre)}; with the "
            f"forwards: {pct(f'bench/in_situ/{pre}dm_overhead_share')})"
            for pre in ENGINES[1:]  # the engines beside the pair's own
            if f"bench/in_situ/{pre}verify_over_decode" in summary
        )
    )


def _num(series: pd.Series, spec: str = ".2f") -> list[str]:
    return ["" if pd.isna(v) else format(v, spec) for v in series]


def format_table(t: pd.DataFrame) -> pd.DataFrame:
    """The rows as read: rates, ratios [95% CI], τ, token equality (labels that vary across runs first)."""
    f = t[varying(t, ("pair", "L"))].astype(str).reset_index(drop=True)
    f["dtype"], f["arm"] = t["dtype"].values, t["label"].values
    f["tok/s (prefill incl.)"] = [
        fmt_spread(a, b, n)
        for a, b, n in zip(t["tok_per_s"], t["tok_per_s_repeat_std"], t["repeats"])
    ]
    for ref, name in REF_NAMES.items():
        if f"x_{ref}" in t and t[f"x_{ref}"].notna().any():
            f[f"{name} [95% CI]"] = [
                fmt(Estimate(v, lo, hi, 1))
                for v, lo, hi in zip(t[f"x_{ref}"], t[f"x_{ref}_lo"], t[f"x_{ref}_hi"])
            ]
    f["× our AR, median per prompt"] = _num(t["x_ar_median"])
    f["× HF assisted, median per prompt"] = _num(t["x_hf_assisted_median"])
    f["tok/s (prefill excl.)"] = _num(t["decode_tok_per_s"])
    f["× our AR (excl.)"] = _num(t["x_ar_decode"])
    f["× HF assisted (excl.)"] = _num(t["x_hf_assisted_decode"])
    f["τ"] = _num(t["tau"])
    f["= AR tokens"] = [f"{int(a)}/{int(b)}" for a, b in zip(t["identical_to_ar"], t["lines"])]
    f["first mismatch (prompt#repeat@position)"] = t["first_mismatch"].values
    return f


def build(selected: pd.DataFrame) -> Artefact:
    """One table: the arms of the newest complete bench run per (pair, dtype, L)."""
    art = Artefact(NAME)
    chosen = newest(selected, lambda r, s: (r["pair"], s.get("model/dtype"), r["L"]))
    if not chosen:
        return art
    blocks, notes, batched = [], [], []
    for row, s in chosen:
        lines = lines_of(row)
        blocks.append(arm_rows(s, lines).assign(pair=row["pair"]))
        notes.append(cost_note(s, lines))
        dtypes = {a: arm_dtype(s, a) for a in s["bench/arms"]}
        batched.append(batch_rows(s, lines, ARM_LABELS, dtypes).assign(pair=row["pair"]))
    t = pd.concat(blocks, ignore_index=True)
    t = t[["pair", *(c for c in t.columns if c != "pair")]]
    runs = used(chosen)
    blocks_n = t.drop_duplicates(["pair", "dtype", "L"])
    foot = [
        "n (prompts x repeats) per block: "
        + "; ".join(
            f"{b.pair} {b.dtype} L={b.L}: {b.prompts}x{b.repeats}" for b in blocks_n.itertuples()
        ),
        *notes,
        "tok/s = output tokens / wall seconds, summed over prompts and repeats; prefill incl. = the whole call per "
        "prompt (tokenised prompt in, ids out; every arm prefills the full prompt, no prefix caching); prefill "
        "excl. = after the first committed chunk (ours: after the prefill's token; transformers: after its "
        "first streamed chunk); ± = std over repeats; × = ratio of the rates; median per prompt = median over "
        "prompt x repeat of the ratio on that line (robust to bursts of load); arms interleaved per prompt",
        f"× [95% CI]: paired percentile bootstrap over prompts (B={B_DEFAULT}, seed {SEED}; a prompt's tokens "
        "and seconds summed over its repeats; one prompt: zero width); timed cost ratios: "
        + CI_NOTE,
        "τ = 1 + accepted / rounds (ours: rounds up to where the output ends; transformers: committed tokens per "
        "target forward, its first forward = prefill + first verify); greedy, EOS or the cap ends every arm, "
        "no stop strings; = AR tokens: lines whose output ids equal our AR's (SD+DM is lossy by design)"
        + "".join(
            f"; {ENGINE_NAMES[pre]}, SD arms: equal to its AR; its AR: equal to our AR"
            for pre in ENGINES[1:]
            if t["arm"].isin([f"{pre}ar"]).any()
        ),
        *provenance_lines(runs, dtype_column=True),
    ]
    art.tables.append(
        Table(
            NAME,
            "Benchmark: AR, SD, transformers assisted generation, SD+DropMatch",
            t,
            format_table(t),
            foot,
        )
    )
    extra = batch_table(batched, [s for _, s in chosen], provenance_lines(runs, dtype_column=True))
    if extra is not None:
        art.tables.append(extra)
    art.runs = runs
    return art


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
