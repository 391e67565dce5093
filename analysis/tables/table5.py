"""Table 5: throughput of SD vs SD + DropMatch across batch sizes (GSM8K, L = 10), SD = 1.0x.

Paper: DropMatch Table 5 (Llama-3.1-8B -> 70B, vLLM, TP = 4, batch sizes 1..128; DM ~1.10x throughout).
Throughput of a run at batch size B = output tokens / wall seconds of its ``llm.generate`` batches. The
vLLM backend records each sample's ``wall_s`` as its batch's wall time, so this is
sum(tokens) / (sum(wall_s) / B); a run with a partial batch is flagged. Columns per batch size: SD tok/s,
DM tok/s, DM / SD, and tau of both, each with a 95 % bootstrap interval over prompts (a prompt carries its
batch's time, so resampling prompts approximates resampling batches). One table per (L, p_drop, K) found:
``table5`` for the paper's (10, 0.3, 5), else ``table5_p<p>_K<K>`` and ``_L<L>``.

    python -m analysis.render table5 --profile default
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.artefact import (
    PAPER_SETTING,
    Artefact,
    Profile,
    Table,
    dm_settings,
    of_profile,
    setting_stem,
)
from analysis.cells import ItemCache, est_columns
from analysis.equality import check_runs, equality_footer
from analysis.footer import provenance_lines
from analysis.load import one_setting
from analysis.stats import B_DEFAULT, NAN, SEED, Estimate, bootstrap, fmt, ratio_ci, tau_ci

NAME = "table5"
PAPER_L = 10
METHOD_LABEL = {"sd": "SD", "dropmatch": "SD+DM"}
DATASET_LABEL = {"gsm8k": "GSM8K 8-shot CoT", "eagle_gsm8k": "GSM8K zero-shot (EAGLE's 80)"}
DATASETS = ("gsm8k", "eagle_gsm8k")


def select(runs: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """Complete greedy vLLM draft-model runs of AR / SD / DM on a GSM8K set (AR: the equality reference)."""
    r = of_profile(runs, profile)
    r = r[
        (r["temperature"] == 0.0)
        & (r["backend"] == "vllm")
        & r["dataset"].isin(list(DATASETS))
        & r["method"].isin(["ar", *METHOD_LABEL])
        & r["complete"].astype(bool)
    ]
    return r[r["spec_method"] == "draft_model"] if "spec_method" in r else r


def throughput(items: pd.DataFrame, B: int) -> Estimate:
    """Output tokens / wall seconds of the batches (tokens/s): sum(tokens) / (sum(wall_s) / B), CI over prompts."""
    return ratio_ci(items["tokens"].astype(float), items["wall_s"].astype(float) / B)


def ratio(a: pd.DataFrame, b: pd.DataFrame) -> Estimate:
    """Throughput of ``a`` / throughput of ``b`` (same B) on the prompts both hold, paired bootstrap."""
    m = a.merge(b, on="sample_id", suffixes=("_a", "_b"))
    if m.empty:
        return NAN

    def stat(ta: np.ndarray, wa: np.ndarray, tb: np.ndarray, wb: np.ndarray) -> np.ndarray:
        return (ta.sum(axis=-1) / wa.sum(axis=-1)) / (tb.sum(axis=-1) / wb.sum(axis=-1))

    return bootstrap(
        stat,
        [m[c].astype(float).to_numpy() for c in ("tokens_a", "wall_s_a", "tokens_b", "wall_s_b")],
    )


def rows(runs: pd.DataFrame, cache: ItemCache) -> tuple[list[dict], list[dict], list[str]]:
    """The table's data and display rows per (pair, dataset, batch size), and its notes: partial last batches, and
    the outputs that ended at ``max_new_tokens`` (:func:`cap_line`)."""
    data, display, notes = [], [], []
    capped: dict[tuple, pd.Series] = {}
    for (pair, ds, B), g in runs.groupby(["pair", "dataset", "batch_size"], sort=True):
        cells = {m: g[g["method"] == m].iloc[0] for m in METHOD_LABEL if (g["method"] == m).any()}
        for m, c in cells.items():
            if int(c["n"]) % int(B):
                notes.append(
                    f"{pair} {METHOD_LABEL[m]} B={B}: n={int(c['n'])} is not a multiple of B "
                    "(last batch partial; throughput approximate)"
                )
        items = {m: cache.items(c) for m, c in cells.items()}
        capped.update({(pair, ds, m, B): it["hit_cap"].dropna() for m, it in items.items()})
        tps = {m: throughput(it, int(B)) for m, it in items.items()}
        tau = {m: tau_ci(it["accepted"], it["rounds"]) for m, it in items.items()}
        rel = ratio(items["dropmatch"], items["sd"]) if len(items) == 2 else NAN
        n = int(max(c["n"] for c in cells.values()))
        data.append(
            {
                "pair": pair,
                "dataset": ds,
                "batch_size": int(B),
                "n": n,
                **est_columns("sd_tok_per_s", tps.get("sd", NAN)),
                **est_columns("dm_tok_per_s", tps.get("dropmatch", NAN)),
                **est_columns("dm_over_sd", rel),
                **est_columns("sd_tau", tau.get("sd", NAN)),
                **est_columns("dm_tau", tau.get("dropmatch", NAN)),
            }
        )
        display.append(
            {
                "Pair": pair,
                "Dataset": DATASET_LABEL.get(ds, ds),
                "Batch size": int(B),
                "n": n,
                "SD tok/s": fmt(tps["sd"]) if "sd" in tps else "pending",
                "SD+DM tok/s": fmt(tps["dropmatch"]) if "dropmatch" in tps else "pending",
                "SD": "1.00×" if "sd" in tps else "",
                "SD+DM": f"{fmt(rel)}×" if rel.n else "",
                "SD τ": fmt(tau.get("sd", NAN)),
                "SD+DM τ": fmt(tau.get("dropmatch", NAN)),
            }
        )
    line = cap_line(capped)
    return data, display, notes + ([line] if line else [])


def cap_line(capped: dict[tuple, pd.Series]) -> str | None:
    """Footer line: per method, the outputs that ended at ``max_new_tokens`` over every pair, dataset and batch size
    (``capped``: ``{(pair, dataset, method, B): hit_cap per prompt}``); where every output of a method is capped, its τ is bounded by the cap
    (the last round stops at it), so compare τ within the cap only."""
    parts, full = [], []
    for m, label in METHOD_LABEL.items():
        hit = [h for key, h in capped.items() if key[2] == m and len(h)]
        if not hit:
            continue
        h = pd.concat(hit)
        parts.append(f"{label} {int(h.sum())}/{len(h)}")
        full += [label] if bool(h.all()) else []
    if not parts:
        return None
    return (
        "outputs that hit max_new_tokens (capped): "
        + ", ".join(parts)
        + (
            f"; every {' and '.join(full)} output is capped, so its τ is bounded by the cap, not only by the rule"
            if full
            else ""
        )
    )


def zero_width_line(data: list[dict]) -> str | None:
    """Footer line where a cell's interval has zero width over more than one prompt (``<col>_lo == <col>_hi``):
    every prompt had the same value, so the bootstrap cannot vary it; None when no cell does."""
    cols = sorted(
        {
            k[:-3]
            for row in data
            for k in row
            if k.endswith("_lo")
            and int(row.get("n") or 0) > 1
            and row[k] == row.get(f"{k[:-3]}_hi")
            and row[k] == row[k]  # not NaN
        }
    )
    if not cols:
        return None
    labels = {
        "sd_tok_per_s": "SD tok/s",
        "dm_tok_per_s": "SD+DM tok/s",
        "dm_over_sd": "SD+DM / SD",
        "sd_tau": "SD τ",
        "dm_tau": "SD+DM τ",
    }
    return (
        f"a [x, x] interval ({', '.join(labels.get(c, c) for c in cols)}): every prompt of the cell had the same value, so resampling prompts "
        "cannot move it (τ: outputs capped at the same length; tok/s: prompts decoded in one batch, equally long, "
        "share its seconds); it is not a measurement without noise"
    )


def build(selected: pd.DataFrame) -> Artefact:
    """One table per (L, p_drop, K) of the DropMatch runs (the SD runs at that L in each)."""
    art, cache, used = Artefact(NAME), ItemCache(), []
    Ls = sorted(
        {int(L) for L in selected.loc[selected["method"] != "ar", "L"]},
        key=lambda L: (L != PAPER_L, L),
    )
    for L in Ls:
        atL = selected[(selected["L"] == L) & (selected["method"] != "ar")]
        for p, K in dm_settings(atL, ("dropmatch",)) or [PAPER_SETTING]:
            dm = atL["method"] == "dropmatch"
            runs = atL[~dm | ((atL["p_drop"].astype(float) == p) & (atL["K"].astype(float) == K))]
            runs = one_setting(runs, cell=("method", "batch_size"), artefact=NAME)
            if runs.empty:
                continue
            data, display, notes = rows(runs, cache)
            footer = [
                f"L={L}, greedy; SD = exact match (1.0× baseline per batch size), SD+DM = DropMatch JS rule (Eq. 5-7), "
                f"p_drop={p:g}, K={K}; vLLM, batch size = prompts per llm.generate call.",
                "throughput: output tokens / wall seconds of the batches (prefill included); τ = 1 + accepted/rounds.",
                f"value [95% CI]: percentile bootstrap over prompts (B={B_DEFAULT}, seed {SEED}); SD+DM/SD paired "
                "over the prompts both runs hold",
                f"max_new_tokens: {int(runs['max_new_tokens'].max())}; n (prompts per run) as shown"
                + (
                    "; NOTE: n < 30 and short outputs (CPU budget): ratios are noisy"
                    if int(runs["n"].max()) < 30
                    else ""
                ),
                *equality_footer(runs, selected),
                *notes,
                *[x for x in (zero_width_line(data),) if x],
                *provenance_lines(runs),
            ]
            stem = setting_stem(NAME, p, K) + ("" if L == PAPER_L else f"_L{L}")
            art.tables.append(
                Table(
                    stem,
                    f"Table 5: throughput vs batch size, SD vs SD + DropMatch (L={L}, "
                    f"p_drop={p:g}, K={K})",
                    pd.DataFrame(data),
                    pd.DataFrame(display),
                    footer,
                )
            )
            ar_refs = {
                x["ar_run_id"] for x in check_runs(runs, selected)
            }  # the equality check's references
            used += [runs, selected[selected["run_id"].isin(ar_refs)]]
    art.runs = pd.concat(used).drop_duplicates("run_id") if used else selected.iloc[0:0]
    return art


if __name__ == "__main__":
    import sys

    from analysis.render import cli

    sys.exit(cli(NAME))
