"""Table 4: cost split of one verify step at batch 1 -- decode step, verify pass (L+1 tokens), LM head,
MC-dropout heads, JS divergence -- as percentages of the verify pass, measured on the target here per
(dtype, L), next to analytic FLOP and byte ratios (for this target and for the paper's Llama-3.1-70B).
A second table gives the issue-13 numbers: verify(L+1)/decode and the DropMatch decision overhead
(K extra head rows + JS) as a share of the verify pass.

Paper: DropMatch (arXiv 2603.03333) Sec. 4.1, Table 4: LM head 0.05% of the full forward; MC dropout and
JS divergence together 1.64% (Llama-3.1-70B-Instruct, GPU).

Reads the records of ``method=latency`` runs only (``runners/measure/latency.py``; conf/experiment/table4.yaml):
    python -m runners.main -m experiment=table4
    python -m analysis.tables.table4 [--profile default] [--pair NAME]
Writes results/table4/table4.{md,csv,tex}, table4_targets.{md,csv,tex} and table4_timings.csv (every repeat).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from analysis.latency import LLAMA31_70B, analytic_costs
from analysis.load import load_runs
from analysis.measure_runs import newest_complete
from analysis.render import artefact_dir, provenance_lines, write_table
from runners.record import read_samples

PAPER_PCT = {"lm_head": 0.05, "dropmatch_overhead": 1.64}
LABELS = {
    "decode_step": "decode step (1 token, incl. LM head)",
    "verify_pass": "verify pass (L+1 tokens, incl. LM head)",
    "lm_head": "LM head (plain, [L+1,d]x[d,V])",
    "mc_dropout_heads": "MC-dropout heads, K rows + plain row (one matmul)",
    "mc_extra": "MC-dropout heads: extra over the LM head",
    "js_divergence": "JS computation (centroid, K heads + draft)",
    "dropmatch_overhead": "DropMatch overhead = MC extra + JS",
    "dropmatch_criterion": "whole dropmatch_js rule (Alg. 1, incl. JS)",
}
# analytic parts of each row, as a share of the verify pass (full forward over L+1 tokens)
PARTS = {"verify_pass": ["full_forward"], "lm_head": ["lm_head"], "mc_dropout_heads": ["lm_head", "mc_dropout_heads"],
         "mc_extra": ["mc_dropout_heads"], "js_divergence": ["js_divergence"],
         "dropmatch_overhead": ["mc_dropout_heads", "js_divergence"]}
TARGETS = {"verify_over_decode": 1.1, "dm_overhead_pct": 3.0}  # issue 13, at L = 5


def select(runs: pd.DataFrame, profile: str | None, pair: str | None) -> list[tuple[pd.Series, dict]]:
    """Complete latency runs of one pair, the newest per (dtype, L, K, p_drop, context): ``[(row, summary)]``."""
    return newest_complete(runs, "latency", profile, pair, lambda r, s: (s.get("model/dtype"), r["L"], r["K"], r["p_drop"],
                                                                        s.get("latency/context")))


def build(summary: Mapping, paper_config: Mapping = LLAMA31_70B) -> pd.DataFrame:
    """Rows of Table 4 for one latency run's ``summary`` (medians in ms, percentages of the verify pass)."""
    med = {c: summary[f"latency/{c}/median_ms"] for c in LABELS if f"latency/{c}/median_ms" in summary}
    med["mc_extra"] = med["mc_dropout_heads"] - med["lm_head"]
    med["dropmatch_overhead"] = med["mc_extra"] + med["js_divergence"]
    kw = {"n_input": int(summary["latency/n_input"]), "K": int(summary["latency/K"]),
          "context": int(summary["latency/context"])}
    dims = summary["model/dims"]
    ours = analytic_costs(dims, bytes_per_param=int(summary["model/bytes_per_param"]), **kw)
    ours_decode = analytic_costs(dims, bytes_per_param=int(summary["model/bytes_per_param"]), **{**kw, "n_input": 1})
    paper = analytic_costs(paper_config, bytes_per_param=int(paper_config.get("bytes_per_param", 2)), **kw)

    def pct(costs: dict, key: str, what: str) -> float:
        if key == "decode_step":
            return 100.0 * ours_decode["full_forward"][what] / costs["full_forward"][what] if costs is ours else float("nan")
        parts = PARTS.get(key)
        return float("nan") if parts is None else 100.0 * sum(costs[p][what] for p in parts) / costs["full_forward"][what]

    rows = []
    for key in LABELS:
        q = (summary.get(f"latency/{key}/q25_ms"), summary.get(f"latency/{key}/q75_ms"))
        rows.append({"dtype": summary["model/dtype"], "L": int(summary["latency/L"]), "component": LABELS[key],
                     "median_ms": med[key], "q25_ms": q[0], "q75_ms": q[1],
                     "pct_of_verify_measured": 100.0 * med[key] / med["verify_pass"],
                     "pct_flops_analytic": pct(ours, key, "flops"), "pct_bytes_analytic": pct(ours, key, "bytes"),
                     "pct_bytes_llama70b_bf16": pct(paper, key, "bytes"), "paper_pct": PAPER_PCT.get(key, float("nan"))})
    return pd.DataFrame(rows)


def targets(summary: Mapping) -> dict:
    """The issue-13 row of one run: verify/decode and DM overhead share (medians of per-repeat ratios)."""
    return {"dtype": summary["model/dtype"], "L": int(summary["latency/L"]),
            "decode_ms": summary["latency/decode_step/median_ms"], "verify_ms": summary["latency/verify_pass/median_ms"],
            "verify_over_decode": summary["latency/verify_over_decode"],
            "dm_overhead_ms": summary["latency/dm_overhead_ms"],
            "dm_overhead_pct": 100.0 * summary["latency/dm_overhead_share"],
            "dm_rule_pct": 100.0 * summary["latency/dm_rule_share"]}


def timings(run_dir: str | Path, summary: Mapping) -> pd.DataFrame:
    """Every kept repeat of a run (seconds per component), tagged with dtype and L."""
    lines = read_samples(Path(run_dir) / "samples.jsonl")
    t = pd.DataFrame([ln["seconds"] for ln in lines])
    t.insert(0, "repeat", [ln["sample_id"] for ln in lines])
    t.insert(0, "L", int(summary["latency/L"]))
    t.insert(0, "dtype", summary["model/dtype"])
    return t


def _fmt(df: pd.DataFrame, digits: dict[str, str]) -> pd.DataFrame:
    f = df.copy()
    for col, spec in digits.items():
        f[col] = f[col].map(lambda v, s=spec: "" if pd.isna(v) else format(v, s))
    return f


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Table 4: verify-step cost split, from method=latency run records")
    ap.add_argument("--profile", default="default", help="profile name of the runs to read")
    ap.add_argument("--pair", default=None, help="pair name (default: the one with most latency runs)")
    args = ap.parse_args(list(argv) if argv is not None else None)
    chosen = select(load_runs(), args.profile, args.pair)
    if not chosen:
        print(f"no complete method=latency runs (profile={args.profile}); run: python -m runners.main -m "
              "experiment=table4", file=sys.stderr)
        return 1
    rows = pd.concat([build(s) for _, s in chosen], ignore_index=True)
    tgt = pd.DataFrame([targets(s) for _, s in chosen])
    used = pd.DataFrame([r for r, _ in chosen])
    out = artefact_dir("table4")
    pd.concat([timings(r["run_dir"], s) for r, s in chosen], ignore_index=True).to_csv(
        out / "table4_timings.csv", index=False)
    s0 = chosen[0][1]
    threads = sorted({t for _, s in chosen for t in s.get("model/threads", [])})
    notes = [f"n (timed repeats per run): {', '.join(str(int(s['num_samples'])) for _, s in chosen)}; batch 1, "
             f"n_input = L+1, K={s0['latency/K']}, p_drop={s0['latency/p_drop']}, KV context "
             f"{s0['latency/context']} tokens; torch threads {threads}",
             *provenance_lines(used),
             "measured = median over repeats (components round-robin in each repeat); q25/q75 = quartiles; "
             "% of verify = median component / median verify pass",
             "analytic: FLOPs and bytes moved (weights read once per forward + KV cache + outputs); batch-1 GPU "
             "decoding is byte-bound, so the byte ratio is the one to read against the paper",
             "paper: Llama-3.1-70B-Instruct, LM head 0.05% of the full forward; MC dropout + JS 1.64% in total"]
    digits = {"median_ms": ".2f", "q25_ms": ".2f", "q75_ms": ".2f", "pct_of_verify_measured": ".3g",
              "pct_flops_analytic": ".3g", "pct_bytes_analytic": ".3g", "pct_bytes_llama70b_bf16": ".3g",
              "paper_pct": ".3g"}
    write_table(_fmt(rows, digits), "table4", title="Table 4: cost split of one verify step", footer=notes)
    rows.to_csv(out / "table4.csv", index=False)
    tnotes = [f"issue-13 targets at L=5: verify(L+1)/decode <= {TARGETS['verify_over_decode']}, DM decision overhead "
              f"<= {TARGETS['dm_overhead_pct']}% of the verify pass",
              "verify_over_decode, dm_overhead_pct, dm_rule_pct: medians of the per-repeat (paired) ratios; "
              "dm_overhead = (MC-dropout heads - LM head) + JS; dm_rule = (MC-dropout heads - LM head) + whole rule",
              *provenance_lines(used)]
    write_table(_fmt(tgt, {"decode_ms": ".1f", "verify_ms": ".1f", "verify_over_decode": ".2f", "dm_overhead_ms": ".1f",
                           "dm_overhead_pct": ".1f", "dm_rule_pct": ".1f"}),
                "table4", title="Table 4 (issue 13): verify/decode cost and DropMatch decision overhead", footer=tnotes,
                stem="table4_targets")
    tgt.to_csv(out / "table4_targets.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
