"""Table 3: mean JS divergence between the heads' centroid and the draft, and the largest between the
centroid and a head, for draft tokens that agree / disagree with the heads' majority token.

Paper: DropMatch (arXiv 2603.03333) Table 3 (c = centroid; Eq. (5)-(7)); the text also contrasts
cases accepted by Eq. (6) with those accepted only by Eq. (7), so those two rows are added.
Reads the same DropMatch trace runs as Table 2 (conf/experiment/table3.yaml resolves to the same runs).

    python -m runners.main -m experiment=table3
    python -m analysis.render table3 --profile default
Writes results/table3/table3.* (share and means with 95 % bootstrap intervals over samples).
"""

from __future__ import annotations

import pandas as pd

from analysis.artefact import Artefact, Profile, Table
from analysis.footer import provenance_lines
from analysis.head_stats import js_table, mean_over_positions_ci, share_ci, sparse_agreement
from analysis.stats import B_DEFAULT, SEED, Estimate, clopper_pearson_lower, fmt
from analysis.tables import table2
from analysis.traces import n_line, run_config, trace_positions

NAME = "table3"
VALUES = ("share_pct", "mean_js_draft", "mean_js_heads_max")
COLUMNS = ["p_drop", "L", "case", "count", *[f"{v}{s}" for v in VALUES for s in ("", "_lo", "_hi")]]


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """The runs of Table 2 (DropMatch JS-rule runs with traces, K = 5, HumanEval)."""
    return table2.select(runs, profile)


def _masks(grp: pd.DataFrame) -> dict[str, pd.Series]:
    """The row masks of :func:`analysis.head_stats.js_table`'s cases, by case name."""
    agree = grp["draft_agrees_majority"].astype(bool)
    out = {"agree": agree, "disagree": ~agree}
    if "accepted_by_js" in grp:
        out["accepted by Eq. 6 (JS)"] = grp["accepted_by_js"].astype(bool)
    if "accepted_by_majority" in grp:
        out["accepted only by Eq. 7 (majority)"] = grp["accepted_by_majority"].astype(bool)
    out["all"] = pd.Series(True, index=grp.index)
    return out


def table(runs: pd.DataFrame) -> pd.DataFrame:
    """Table 3 rows for each (p_drop, L) group of ``runs`` (DropMatch JS-rule runs with trace=true)."""
    pos = trace_positions(runs)
    blocks = []
    for (p, L), grp in pos.groupby(["p_drop", "L"]) if not pos.empty else []:
        t = js_table(grp)
        g = grp.dropna(subset=["js_draft", "js_heads_max"]) if "js_draft" in grp else grp.iloc[0:0]
        masks = _masks(g) if len(g) else {}
        for v in VALUES:
            cis = []
            for case in t["case"]:
                m = masks.get(case)
                if m is None:
                    cis.append(Estimate(float("nan"), float("nan"), float("nan"), 0))
                elif v == "share_pct":
                    cis.append(share_ci(g, m).scaled(100.0))
                else:
                    cis.append(mean_over_positions_ci(g, m, v.replace("mean_", "")))
            t[f"{v}_lo"], t[f"{v}_hi"] = [e.lo for e in cis], [e.hi for e in cis]
        t.insert(0, "L", int(L))
        t.insert(0, "p_drop", float(p))
        blocks.append(t)
    if not blocks:
        return pd.DataFrame(columns=COLUMNS)
    return pd.concat(blocks, ignore_index=True)[COLUMNS]


def display(t: pd.DataFrame) -> pd.DataFrame:
    f = t[["p_drop", "L", "case", "count"]].copy()
    f["p_drop"] = f["p_drop"].map(lambda v: f"{v:g}")
    for v, label, digits in (
        ("share_pct", "share (%)", 1),
        ("mean_js_draft", "JS(c||draft)", 4),
        ("mean_js_heads_max", "max_i JS(c||head_i)", 4),
    ):
        f[label] = [
            fmt(Estimate(a, lo, hi, 1), digits) or "-"
            for a, lo, hi in zip(t[v], t[f"{v}_lo"], t[f"{v}_hi"])
        ]
    return f


def build(selected: pd.DataFrame) -> Artefact:
    t = table(selected)
    if t.empty:
        return Artefact(NAME)
    footer = [
        n_line(selected),
        "JS in nats (Eq. 6; T=1 for greedy); agree = the draft token equals the heads' majority token (Eq. 7); "
        "positions up to the first rejection of each round",
        "'accepted only by Eq. 7' = majority match while Eq. 6 fails (Algorithm 1's second branch)",
        f"value [95% CI]: percentile bootstrap over samples (B={B_DEFAULT}, seed {SEED}) of pooled "
        "positions (share = Σ case positions / Σ positions; JS = Σ JS / Σ case positions)",
        *sparse_lines(selected),
        *provenance_lines(selected),
    ]
    return Artefact(
        NAME,
        tables=[
            Table(
                NAME,
                "Table 3: JS divergence to the centroid c of the K=5 heads (HumanEval)",
                t,
                display(t),
                footer,
            )
        ],
        runs=selected,
    )


def sparse_lines(selected: pd.DataFrame) -> list[str]:
    """The sparse variant's decision agreement with the exact rule (the >= 99.9 % bar the footer states), when the runs
    were made with ``dropmatch.sparse_check_top_n`` (Table 2's experiment sets it)."""
    ns = sorted(
        {
            (run_config(d).get("dropmatch") or {}).get("sparse_check_top_n")
            for d in selected["run_dir"]
        }
        - {None}
    )
    agree = sparse_agreement(trace_positions(selected)) if ns else None
    if not agree:
        return []
    k, n = agree["positions_equal"], agree["positions"]
    lo = 100.0 * clopper_pearson_lower(k, n)
    rpct = 100.0 * agree["rounds_equal"] / agree["rounds"]
    verdict = (
        "meets"
        if lo >= 99.9
        else "cannot yet show (more positions needed)"
        if k == n or 100.0 * k / n >= 99.9
        else "misses"
    )
    return [
        f"sparse variant (dropmatch.sparse_top_n={', '.join(map(str, ns))}) vs the exact rule, decided on the same "
        f"dropout masks each round: same verdict at {k}/{n} traced positions ({100.0 * k / n:.2f}%, one-sided 95% "
        f"lower bound {lo:.2f}%, Clopper-Pearson), same accepted length in {agree['rounds_equal']}/"
        f"{agree['rounds']} rounds ({rpct:.2f}%); the >= 99.9% bar for using it: {verdict}"
    ]


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
