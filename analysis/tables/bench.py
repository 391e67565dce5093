"""The benchmark table (``./reproduce.sh bench``): AR, our SD, transformers' assisted generation and our SD+DM
side by side on the same prompts, as tokens/s and ratios, with τ, token equality to AR, verify(L+1)/decode
and the DropMatch decision overhead share of the verify pass.

Reads the records of ``method=bench`` runs only (``runners/measure/bench.py``; conf/experiment/bench.yaml), one
block per dtype:
    python -m runners.main -m experiment=bench
    python -m analysis.tables.bench [--profile default] [--pair NAME]
Writes results/bench/bench.{md,csv,tex} (the CSV holds numbers only).
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterable, Mapping

import pandas as pd

from analysis.load import load_runs
from analysis.measure_runs import newest_complete
from analysis.render import artefact_dir, provenance_lines, write_table

ARM_LABELS = {"ar": "our AR (L=0)", "hf_ar": "transformers generate (AR)", "sd": "our SD",
              "hf_assisted": "transformers assisted generation", "sd_dm": "our SD + DropMatch"}
REFS = ("ar", "hf_ar", "hf_assisted")


def select(runs: pd.DataFrame, profile: str | None, pair: str | None) -> list[dict]:
    """Summaries (plus ``_row``) of the complete bench runs of one pair, the newest per (dtype, L)."""
    return [{**s, "_row": dict(r)} for r, s in newest_complete(runs, "bench", profile, pair,
                                                                lambda r, s: (s.get("model/dtype"), r["L"]))]


def build(summary: Mapping) -> pd.DataFrame:
    """One row per arm of one run: rates (tokens/s), ratios to the reference arms, τ, equality with AR."""
    arms = list(summary["bench/arms"])
    n = summary["bench/num_lines"]
    rows = []
    for arm in arms:
        g = {k.split("/", 2)[2]: v for k, v in summary.items() if k.startswith(f"bench/{arm}/")}
        mism = g.get("first_mismatches") or []
        row = {"dtype": summary["model/dtype"], "L": summary["bench/L"], "arm": arm, "label": ARM_LABELS.get(arm, arm),
               "tok_per_s": g["tok_per_s"], "tok_per_s_repeat_std": g["tok_per_s_repeat_std"],
               "decode_tok_per_s": g["decode_tok_per_s"], "tau": g.get("tau", float("nan")),
               "identical_to_ar": n if arm == "ar" else g.get("identical_to_ar"), "lines": n,
               "first_mismatch": "; ".join(f"{m['prompt_id']}#{m['repeat']}@{m['position']}" for m in mism[:3])
               + (f" (+{len(mism) - 3})" if len(mism) > 3 else "")}
        for ref in REFS:
            for suffix in ("", "_decode", "_median"):
                row[f"x_{ref}{suffix}"] = 1.0 if ref == arm else g.get(f"x_{ref}{suffix}", float("nan"))
        rows.append(row)
    return pd.DataFrame(rows)


def notes(summary: Mapping) -> list[str]:
    """The cost ratios and setting of one run, for the footer."""
    f = lambda k, s=".2f": "n/a" if summary.get(k) is None else format(summary[k], s)  # noqa: E731
    pct = lambda k: "n/a" if summary.get(k) is None else f"{100 * summary[k]:.1f}%"  # noqa: E731
    return [f"{summary['model/dtype']}: {summary['bench/num_prompts']} prompts (mean {summary['bench/prompt_tokens_mean']:.0f} "
            f"prompt tokens) x {summary['bench/repeats']} repeats, L={summary['bench/L']}; verify(L+1)/decode "
            f"{f('bench/latency/verify_over_decode')} (timed, {summary.get('bench/latency/context', '?')}-token KV) / "
            f"{f('bench/in_situ/verify_over_decode')} (in the loop: SD verify pass vs AR step); DM decision overhead "
            f"{pct('bench/latency/dm_overhead_share')} of the verify pass (timed: K extra head rows + JS) / "
            f"{pct('bench/in_situ/dm_overhead_share')} (in the loop: SD+DM vs SD verify+criterion per pass); "
            f"torch threads {summary.get('model/threads')}; max 1-min load average {f('bench/loadavg_1min_max', '.1f')}"]


def format_table(t: pd.DataFrame) -> pd.DataFrame:
    f = pd.DataFrame({"dtype": t["dtype"], "arm": t["label"]})
    f["tok/s (prefill incl.)"] = [f"{a:.2f} ± {b:.2f}" for a, b in zip(t["tok_per_s"], t["tok_per_s_repeat_std"])]
    for ref, name in (("ar", "× our AR"), ("hf_ar", "× HF AR"), ("hf_assisted", "× HF assisted")):
        if f"x_{ref}" in t:
            f[name] = t[f"x_{ref}"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    f["× our AR, median per prompt"] = t["x_ar_median"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    f["× HF assisted, median per prompt"] = t["x_hf_assisted_median"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    f["tok/s (prefill excl.)"] = t["decode_tok_per_s"].map(lambda v: f"{v:.2f}")
    f["× our AR (excl.)"] = t["x_ar_decode"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    f["× HF assisted (excl.)"] = t["x_hf_assisted_decode"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    f["τ"] = t["tau"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}")
    f["= AR tokens"] = [f"{int(a)}/{int(b)}" for a, b in zip(t["identical_to_ar"], t["lines"])]
    f["first mismatch (prompt#repeat@position)"] = t["first_mismatch"]
    return f


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Benchmark: AR / SD / HF assisted / SD+DM, from method=bench run records")
    ap.add_argument("--profile", default="default", help="profile name of the runs to read")
    ap.add_argument("--pair", default=None, help="pair name (default: the one with most bench runs)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    chosen = select(load_runs(), args.profile, args.pair)
    if not chosen:
        print(f"no complete method=bench runs (profile={args.profile}); run: python -m runners.main -m experiment=bench",
              file=sys.stderr)
        return 1
    t = pd.concat([build(s) for s in chosen], ignore_index=True)
    used = pd.DataFrame([s["_row"] for s in chosen])
    foot = [*(line for s in chosen for line in notes(s)),
            "tok/s = output tokens / wall seconds, summed over prompts and repeats; prefill incl. = the whole call per "
            "prompt (tokenised prompt in, ids out; every arm prefills the full prompt, no prefix caching); prefill "
            "excl. = after the first committed chunk (ours: after the prefill's token; transformers: after its "
            "first streamed chunk); ± = std over repeats; × = ratio of the rates; median per prompt = median over "
            "prompt x repeat of the ratio on that line (robust to bursts of load); arms interleaved per prompt",
            "τ = 1 + accepted / rounds (ours: rounds up to where the output ends; transformers: committed tokens per "
            "target forward, its first forward = prefill + first verify); greedy, EOS or the cap ends every arm, "
            "no stop strings; = AR tokens: lines whose output ids equal our AR's (SD+DM is lossy by design)",
            *provenance_lines(used)]
    write_table(format_table(t), "bench", title="Benchmark: AR, SD, transformers assisted generation, SD+DropMatch",
                footer=foot)
    t.to_csv(artefact_dir("bench") / "bench.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
