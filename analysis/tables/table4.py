"""Table 4: forward-latency split at batch 1, n_input = 5, p_drop = 0.3, K = 5 -- full forward, LM head,
MC-dropout heads, JS divergence -- each as a percentage of the full forward, measured on the target here,
next to analytic FLOP and byte ratios (for this target and for the paper's Llama-3.1-70B).

Paper: DropMatch (arXiv 2603.03333) Sec. 4.1, Table 4: LM head 0.05% of the full forward; MC dropout and
JS divergence together 1.64% (Llama-3.1-70B-Instruct, GPU).

No sweep: this module loads the target and times the loop's own functions (analysis.latency).
    python -m analysis.tables.table4 [--pair qwen25coder_0.5b_1.5b] [--repeats 20] [--warmup 3] [--context 256]
Writes results/table4/table4.{md,csv,tex} and table4_timings.csv (every kept repeat).
Wall time (embedded pair, DROPMATCH_THREADS=1): measured 1.6 min on the 2-core CPU (model load + 23 repeats);
15 min while other jobs evicted the weights from the page cache (those timings were discarded).
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterable

import pandas as pd

from analysis.latency import LLAMA31_70B, analytic_costs, measure
from analysis.render import artefact_dir, provenance_lines
from analysis.traces import write_artefact
from runners.paths import REPO_ROOT

PAPER_PCT = {"lm_head": 0.05, "dropmatch_overhead": 1.64}
LABELS = {
    "full_forward": "full forward (n_input tokens, incl. LM head)",
    "lm_head": "LM head (plain, [n,d]x[d,V])",
    "mc_dropout_heads": "MC-dropout heads, K rows + plain row (one matmul)",
    "mc_extra": "MC-dropout heads: extra over the LM head",
    "js_divergence": "JS computation (centroid, K heads + draft)",
    "dropmatch_overhead": "DropMatch overhead = MC extra + JS",
    "dropmatch_criterion": "whole dropmatch_js rule (Alg. 1, incl. JS)",
}


def pair_config(name: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "conf" / "pair" / f"{name}.yaml"), resolve=True)


def build(samples, config, paper_config=LLAMA31_70B, bytes_per_param: int = 4) -> pd.DataFrame:
    """Rows of Table 4 from measured ``samples`` (:class:`analysis.latency.LatencySamples`) and the analytic model."""
    med = {k: samples.median(k) for k in samples.seconds}
    q25 = {k: samples.quantile(k, 0.25) for k in samples.seconds}
    q75 = {k: samples.quantile(k, 0.75) for k in samples.seconds}
    med["mc_extra"] = med["mc_dropout_heads"] - med["lm_head"]
    med["dropmatch_overhead"] = med["mc_extra"] + med["js_divergence"]
    kw = {"n_input": samples.n_input, "K": samples.K, "context": samples.context}
    ours = analytic_costs(config, bytes_per_param=bytes_per_param, **kw)
    paper = analytic_costs(paper_config, bytes_per_param=int(paper_config.get("bytes_per_param", 2)), **kw)

    def pct(costs: dict, key: str, what: str) -> float:
        parts = {"full_forward": ["full_forward"], "lm_head": ["lm_head"],
                 "mc_dropout_heads": ["lm_head", "mc_dropout_heads"], "mc_extra": ["mc_dropout_heads"],
                 "js_divergence": ["js_divergence"],
                 "dropmatch_overhead": ["mc_dropout_heads", "js_divergence"]}.get(key)
        if parts is None:
            return float("nan")
        return 100.0 * sum(costs[p][what] for p in parts) / costs["full_forward"][what]

    rows = []
    for key in ("full_forward", "lm_head", "mc_dropout_heads", "mc_extra", "js_divergence", "dropmatch_overhead",
                "dropmatch_criterion"):
        rows.append({
            "component": LABELS[key],
            "median_ms": 1e3 * med[key],
            "iqr_ms": f"{1e3 * q25[key]:.2f}-{1e3 * q75[key]:.2f}" if key in q25 else "",
            "pct_of_full_measured": 100.0 * med[key] / med["full_forward"],
            "pct_flops_analytic": pct(ours, key, "flops"),
            "pct_bytes_analytic": pct(ours, key, "bytes"),
            "pct_bytes_llama70b_bf16": pct(paper, key, "bytes"),
            "paper_pct": PAPER_PCT.get(key, float("nan")),
        })
    return pd.DataFrame(rows)


def format_table(t: pd.DataFrame) -> pd.DataFrame:
    f = t.copy()
    f["median_ms"] = f["median_ms"].map(lambda v: f"{v:.2f}")
    for c in ("pct_of_full_measured", "pct_flops_analytic", "pct_bytes_analytic", "pct_bytes_llama70b_bf16",
              "paper_pct"):
        f[c] = f[c].map(lambda v: "" if pd.isna(v) else f"{v:.3g}")
    return f.rename(columns={
        "median_ms": "median (ms)", "iqr_ms": "IQR (ms)", "pct_of_full_measured": "% of full (measured)",
        "pct_flops_analytic": "% FLOPs (analytic)", "pct_bytes_analytic": "% bytes (analytic)",
        "pct_bytes_llama70b_bf16": "% bytes, Llama-3.1-70B bf16 (analytic)", "paper_pct": "paper (%)"})


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Table 4: forward-latency split of one DropMatch verify step")
    ap.add_argument("--pair", default="qwen25coder_0.5b_1.5b")
    ap.add_argument("--profile", default="default", help="recorded only (the measurement has no sweep)")
    ap.add_argument("--n-input", type=int, default=5)
    ap.add_argument("--K", type=int, default=5)
    ap.add_argument("--p-drop", type=float, default=0.3)
    ap.add_argument("--context", type=int, default=256, help="tokens already in the KV cache")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(list(argv) if argv is not None else None)

    from runners.models.loader import load_pair
    from runners.provenance import provenance

    pcfg = pair_config(args.pair)
    pair = load_pair(pcfg, need_draft=False)
    samples = measure(pair.target, n_input=args.n_input, K=args.K, p_drop=args.p_drop, context=args.context,
                      warmup=args.warmup, repeats=args.repeats)
    bpp = pair.target.get_output_embeddings().weight.element_size()
    t = build(samples, pair.target.config, bytes_per_param=bpp)
    out = artefact_dir("table4")
    pd.DataFrame(samples.seconds).to_csv(out / "table4_timings.csv", index_label="repeat")
    prov = provenance()
    runs = pd.DataFrame([{"pair": pcfg["name"], "backend": "hf (KVState + criteria)", "profile": args.profile,
                          "device": prov["device"], "date_utc": prov["date_utc"], "git_sha": prov["git_sha"]}])
    import torch

    notes = [f"n (timed repeats): {args.repeats} after {args.warmup} warm-up; batch 1, n_input={args.n_input}, "
             f"K={args.K}, p_drop={args.p_drop}, KV context {args.context} tokens; dtype {pair.dtype}; "
             f"torch threads {torch.get_num_threads()}",
             *provenance_lines(runs),
             "measured = median over repeats (components run round-robin); IQR = 25th-75th percentile",
             "analytic: FLOPs and bytes moved (weights read once per forward + KV cache + outputs); "
             "batch-1 GPU decoding is byte-bound, so the byte ratio is the one to read against the paper",
             "paper: Llama-3.1-70B-Instruct, LM head 0.05% of the full forward; MC dropout + JS 1.64% in total"]
    write_artefact(t, format_table(t), "table4", title="Table 4: forward latency split of one verify step",
                   footer=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
