"""Table 3: mean JS divergence between the heads' centroid and the draft, and the largest between the
centroid and a head, for draft tokens that agree / disagree with the heads' majority token.

Paper: DropMatch (arXiv 2603.03333) Table 3 (c = centroid; Eq. (5)-(7)); the text also contrasts
cases accepted by Eq. (6) with those accepted only by Eq. (7), so those two rows are added.
Reads the same DropMatch trace runs as Table 2 (conf/experiment/table3.yaml resolves to the same runs).

    python -m runners.main -m experiment=table3
    python -m analysis.tables.table3 [--profile default] [--pair NAME]
Writes results/table3/table3.{md,csv,tex}.
"""

from __future__ import annotations

import sys
from typing import Iterable

import pandas as pd

from analysis.head_stats import js_table
from analysis.traces import cli, footer, load, trace_positions, write_artefact

K = 5
METHODS = ("dropmatch",)


def build(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 3 rows for each (p_drop, L) group of ``runs`` (DropMatch JS-rule runs with trace=true)."""
    pos = trace_positions(runs)
    blocks = []
    for (p, L), grp in (pos.groupby(["p_drop", "L"]) if not pos.empty else []):
        t = js_table(grp)
        t.insert(0, "L", int(L))
        t.insert(0, "p_drop", float(p))
        blocks.append(t)
    if not blocks:
        return pd.DataFrame(columns=["p_drop", "L", "case", "count", "share_pct", "mean_js_draft", "mean_js_heads_max"])
    return pd.concat(blocks, ignore_index=True)


def format_table(t: pd.DataFrame) -> pd.DataFrame:
    f = t.copy()
    f["share_pct"] = f["share_pct"].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    for c in ("mean_js_draft", "mean_js_heads_max"):
        f[c] = f[c].map(lambda v: "-" if pd.isna(v) else f"{v:.4f}")
    return f.rename(columns={"share_pct": "share (%)", "mean_js_draft": "JS(c||draft)",
                             "mean_js_heads_max": "max_i JS(c||head_i)"})


def main(argv: Iterable[str] | None = None) -> int:
    args = cli("Table 3: JS divergence to the centroid, agree vs disagree", argv, dataset="humaneval")
    runs = load(args.profile, args.dataset, args.pair, METHODS, trace=True, K=K)
    if runs.empty:
        print(f"no DropMatch trace runs (K={K}, dataset={args.dataset}, profile={args.profile}); "
              "run: python -m runners.main -m experiment=table3", file=sys.stderr)
        return 1
    t = build(runs)
    notes = ["JS in nats (Eq. 6; T=1 for greedy); agree = the draft token equals the heads' majority token (Eq. 7); "
             "positions up to the first rejection of each round",
             "'accepted only by Eq. 7' = majority match while Eq. 6 fails (Algorithm 1's second branch)"]
    write_artefact(t, format_table(t), "table3",
                   title="Table 3: JS divergence to the centroid c of the K=5 heads (HumanEval)",
                   footer=footer(runs, notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
