"""Table 6: accuracy, mean acceptance length tau and throughput of SD vs SD + DropMatch (JS rule).

Paper: DropMatch Table 6 (p_drop = 0.3, K = 5, L in {5, 10}, batch size 1, greedy). Rows per pair:
AR (the autoregressive baseline, for speedups), then SD and DM for each L. Columns per benchmark:
accuracy (%), tau, tokens/s (mean +- std over throughput repeats when there are several) and speedup
(DM vs SD at the same L; SD and DM vs AR), all measured on the same machine.

    python -m analysis.tables.table6 [--profile default] [--backend hf]
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis.load import load_runs, one_setting
from analysis.render import provenance_lines, write_table

BENCHMARKS = ("gsm8k", "mmlu", "ifeval", "humaneval")
BENCH_LABEL = {"gsm8k": "GSM8K", "mmlu": "MMLU", "ifeval": "IFEval", "humaneval": "HumanEval"}
METHOD_LABEL = {"ar": "AR", "sd": "SD", "dropmatch": "SD+DM"}
SMALL_N = 30
PAPER_SETTING = (0.3, 5)  # (p_drop, K) of the paper's Table 6


def select_runs(runs: pd.DataFrame, profile: str | None, backend: str, p_drop: float, K: int) -> pd.DataFrame:
    """Runs that belong in the table: greedy, this profile/backend, DM at (p_drop, K), complete, no trace.

    Speedups compare cells of one benchmark, so all cells of a (pair, benchmark) come from one *setting*:
    the same items (``n_expected``, ``offset``) and the same ``max_new_tokens``. When runs of several settings
    exist (e.g. a profile's cap was changed, or another artefact ran the benchmark at other sizes), the
    setting with the most filled cells wins, then the larger n, then the most recent; within a cell, the most
    recent run. Trace runs (Tables 2-3) are left out: recording the trace costs time.
    """
    if runs.empty:
        return runs
    r = runs[(runs["temperature"] == 0.0) & (runs["backend"] == backend) & runs["method"].isin(METHOD_LABEL)
             & (runs["batch_size"] == 1) & runs["complete"]]
    if profile is not None:
        r = r[r["profile"] == profile]
    dm = r["method"] == "dropmatch"
    r = r[~dm | ((r["p_drop"].astype(float) == p_drop) & (r["K"] == K))]
    return one_setting(r, cell=("method", "L"))


def cell_stats(cell: pd.DataFrame) -> dict:
    """The numbers of one (pair, dataset, method, L) cell (one run; throughput +- std over its repeats)."""
    first = cell.iloc[0]
    reps = int(first["repeats"])
    return {
        "n": int(first["n"]),
        "acc": None if first["accuracy"] is None or pd.isna(first["accuracy"]) else 100.0 * float(first["accuracy"]),
        "tau": float(first["tau"]),
        "tps": float(first["tok_per_s"]),
        "tps_std": float(first["tok_per_s_repeat_std"]) if reps > 1 else None,
        "repeats": reps,
    }


def build_table(runs: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """Return (table, notes) where notes holds n per benchmark and repeat counts."""
    rows, ns, reps = [], {}, set()
    for pair in sorted(runs["pair"].unique()) if not runs.empty else []:
        pr = runs[runs["pair"] == pair]
        cells = {key: cell_stats(g) for key, g in pr.groupby(["dataset", "method", "L"])}
        Ls = sorted({L for (_, m, L) in cells if m != "ar"})
        order = [("ar", 0)] + [(m, L) for L in Ls for m in ("sd", "dropmatch")]
        for method, L in order:
            if not any(k[1:] == (method, L) for k in cells):
                continue  # no run of this row for any benchmark
            row = {"Pair": pair, "Method": METHOD_LABEL[method], "L": "-" if method == "ar" else L}
            for b in BENCHMARKS:
                lab = BENCH_LABEL[b]
                c = cells.get((b, method, L))
                if c is None:
                    row.update({f"{lab} Acc": "pending", f"{lab} τ": "", f"{lab} tok/s": "", f"{lab} speedup": ""})
                    continue
                ns[b] = max(ns.get(b, 0), c["n"])
                reps.add(c["repeats"])
                ar = cells.get((b, "ar", 0))
                sd = cells.get((b, "sd", L))
                if method == "dropmatch" and sd:
                    speed = f"{c['tps'] / sd['tps']:.2f}× SD" + (f", {c['tps'] / ar['tps']:.2f}× AR" if ar else "")
                elif method == "sd" and ar:
                    speed = f"{c['tps'] / ar['tps']:.2f}× AR"
                else:
                    speed = "1.00×" if method == "ar" else ""
                tps = f"{c['tps']:.2f}" + (f" ± {c['tps_std']:.2f}" if c["tps_std"] is not None else "")
                row.update({
                    f"{lab} Acc": "" if c["acc"] is None else f"{c['acc']:.1f}",
                    f"{lab} τ": f"{c['tau']:.2f}",
                    f"{lab} tok/s": tps,
                    f"{lab} speedup": speed,
                })
            rows.append(row)
    return pd.DataFrame(rows), {"n": ns, "repeats": sorted(reps)}


def _floats(text: str) -> list[float]:
    return [float(x) for x in str(text).split(",") if x.strip()]


def render(profile: str, backend: str, p_drop: float, K: int, stem: str = "table6") -> pd.DataFrame:
    """Select, build and write one Table 6 (DropMatch at ``p_drop``, ``K``) as ``results/table6/<stem>.*``."""
    runs = select_runs(load_runs(), None if profile == "any" else profile, backend, p_drop, K)
    table, notes = build_table(runs)
    if table.empty:
        print(f"[table6] no complete runs for profile={profile} backend={backend}; run ./reproduce.sh table6 first")
        return table
    n_text = ", ".join(f"{BENCH_LABEL[b]} n={n}" for b, n in notes["n"].items())
    footer = [
        f"SD = speculative decoding (greedy; exact match), SD+DM = DropMatch JS rule (Eq. 5-7), p_drop={p_drop}, "
        f"K={K}; batch size 1; τ = 1 + accepted/rounds (bonus/correction token included).",
        f"samples: {n_text}; max_new_tokens: "
        + ", ".join(f"{BENCH_LABEL.get(d, d)}={int(m)}" for d, m in runs.groupby("dataset")["max_new_tokens"].max().items()),
        "throughput: mean of per-sample output tokens/s (prefill excluded)"
        + (f", ± std over {max(notes['repeats'])} repeats" if max(notes["repeats"], default=1) > 1 else ", one repeat"),
        *provenance_lines(runs),
    ]
    if notes["n"] and min(notes["n"].values()) < SMALL_N:
        footer.append(
            f"NOTE: n < {SMALL_N} per benchmark (CPU time budget): accuracy differences are not significant. "
            "Use profile=full for the whole test sets."
        )
    pending = [BENCH_LABEL[b] for b in BENCHMARKS if b not in notes["n"]]
    if pending:
        footer.append(f"pending (no runs yet): {', '.join(pending)}")
    write_table(table, "table6", title=f"Table 6: SD vs SD + DropMatch (p_drop={p_drop}, K={K})", footer=footer,
                stem=stem)
    return table


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """Write ``table6.*`` for the paper's (p_drop, K) and ``table6_p<p>_K<K>.*`` for every other pair asked for.

    ``--p-drop`` and ``--K`` take comma lists (what a sweep's ``dropmatch.p_drop=0.1,0.2,0.3`` ran); returns
    the paper-setting table, or the first one asked for when the paper's setting is not among them.
    """
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default", help="profile whose runs to tabulate ('any' for all)")
    ap.add_argument("--backend", default="hf")
    ap.add_argument("--p-drop", default="0.3", help="DropMatch p_drop, or a comma list (one table each)")
    ap.add_argument("--K", default="5", help="number of dropout heads, or a comma list (one table each)")
    a = ap.parse_args(argv)
    tables = {}
    for p in _floats(a.p_drop):
        for K in (int(k) for k in _floats(a.K)):
            stem = "table6" if (p, K) == PAPER_SETTING else f"table6_p{p:g}_K{K}"
            tables[(p, K)] = render(a.profile, a.backend, p, K, stem)
    return tables.get(PAPER_SETTING, next(iter(tables.values())))


if __name__ == "__main__":
    main()
