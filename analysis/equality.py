"""Equality check as Spec-Bench's: greedy speculative output must equal greedy autoregressive output.

Paper: DropMatch Sec. 4.2 (vLLM, greedy); Spec-Bench ``evaluation/equal.py`` (Xia et al. 2024) compares each
method's outputs with the vanilla AR baseline's. Here, for every greedy vLLM run of method ``sd`` (exact match
at T = 0, so lossless), the AR run of the same pair, dataset, max_new_tokens and batch size is the reference;
outputs are compared token by token on the samples both hold. A divergence is reported as
``(sample_id, position)``: the first token index where the two id lists differ (or where one ends).
Lossy methods (DropMatch) are not expected to match and are not checked.

    python -m analysis.equality [--profile default] [--dataset gsm8k]
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from analysis.artefact import profile_arg
from analysis.counter_checks import checked_samples
from analysis.load import load_runs
from runners.sweep.console import console

logger = logging.getLogger(__name__)

KEYS = ("pair", "dataset", "max_new_tokens", "batch_size", "backend", "profile", "temperature")


def read_outputs(run_dir: str | Path) -> dict[str, list[int]]:
    """``{sample_id: output_token_ids}`` of one run record, read as every consumer reads it
    (:func:`analysis.counter_checks.checked_samples`: the first line of a sample wins, a torn last line is dropped,
    impossible values refused).

    Raises:
        runners.records.schema.RecordError: a damaged line (file, line, field).
    """
    return {
        s["sample_id"]: [int(t) for t in s.get("output_token_ids") or []]
        for s in checked_samples(Path(run_dir) / "samples.jsonl")
    }


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """First index where ``a`` and ``b`` differ (``min(len)`` when one is a strict prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_outputs(ref: dict[str, list[int]], test: dict[str, list[int]]) -> dict:
    """Compare two runs' outputs on their common samples.

    Returns:
        ``{"n": common samples, "equal": identical ones, "divergences": [(sample_id, position), ...]}``.
    """
    common = [s for s in ref if s in test]
    div = [(s, p) for s in common if (p := first_divergence(ref[s], test[s])) is not None]
    return {"n": len(common), "equal": len(common) - len(div), "divergences": div}


def check_runs(runs: pd.DataFrame, all_runs: pd.DataFrame | None = None) -> list[dict]:
    """One result per greedy ``sd`` run in ``runs``: its AR reference (searched in ``all_runs``) and the comparison.

    Each result: ``{run_id, pair, dataset, batch_size, L, ar_run_id (None: no reference), n, equal, divergences}``.
    """
    pool = runs if all_runs is None else all_runs
    out = []
    if runs.empty:
        return out
    for _, r in runs[(runs["method"] == "sd") & (runs["temperature"] == 0.0)].iterrows():
        ar = pool[(pool["method"] == "ar") & pool["complete"]]
        for k in KEYS:
            if k in pool and k in r:
                ar = ar[ar[k] == r[k]]
        res = {
            "run_id": r["run_id"],
            "pair": r["pair"],
            "dataset": r["dataset"],
            "batch_size": int(r.get("batch_size", 1)),
            "L": int(r["L"]),
            "ar_run_id": None,
            "n": 0,
            "equal": 0,
            "divergences": [],
        }
        if not ar.empty:
            ref = ar.sort_values("date_utc").iloc[-1]
            res["ar_run_id"] = ref["run_id"]
            res.update(compare_outputs(read_outputs(ref["run_dir"]), read_outputs(r["run_dir"])))
        out.append(res)
    return out


def equality_footer(runs: pd.DataFrame, all_runs: pd.DataFrame | None = None) -> list[str]:
    """Table footer lines: greedy SD == AR per SD run, divergences as (sample, token position)."""
    if all_runs is None:
        all_runs = load_runs()
    results = check_runs(runs, all_runs)
    if not results:
        return []
    checked = [x for x in results if x["ar_run_id"] is not None]
    missing = len(results) - len(checked)
    if not checked:
        return [
            f"equality (greedy SD == greedy AR, vLLM): not checked, no AR run matches the {missing} SD runs "
            "(same pair, dataset, max_new_tokens, batch size); add method=ar to the sweep"
        ]
    n, eq = sum(x["n"] for x in checked), sum(x["equal"] for x in checked)
    lines = [
        f"equality (Spec-Bench style; greedy SD output == greedy AR output, vLLM): {eq}/{n} samples identical "
        f"over {len(checked)} SD runs"
        + (f"; {missing} SD runs without an AR reference run" if missing else "")
    ]
    for x in checked:
        if x["divergences"]:
            where = ", ".join(f"({s}, token {p})" for s, p in x["divergences"][:5])
            lines.append(
                f"DIVERGENCE {x['pair']} {x['dataset']} L={x['L']} B={x['batch_size']} "
                f"(run {x['run_id']} vs AR {x['ar_run_id']}): {where}"
            )
    return lines


def main(argv: Iterable[str] | None = None) -> list[dict]:

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--profile", default=None, type=profile_arg, help="only runs of this profile ('any': all)"
    )
    ap.add_argument("--dataset", default=None, help="only runs on this dataset")
    a = ap.parse_args(list(argv) if argv is not None else None)
    console()
    runs = load_runs()
    if runs.empty:
        logger.info("[equality] no runs")
        return []
    sel = runs[runs["backend"] == "vllm"]
    if a.profile not in (None, "any"):
        sel = sel[sel["profile"] == a.profile]
    if a.dataset:
        sel = sel[sel["dataset"] == a.dataset]
    results = check_runs(sel, runs)
    for x in results:
        status = (
            "no AR reference run"
            if x["ar_run_id"] is None
            else f"{x['equal']}/{x['n']} identical"
            + (f"; divergences {x['divergences']}" if x["divergences"] else "")
        )
        logger.info(
            "[equality] %s %s L=%s B=%s run %s: %s",
            x["pair"],
            x["dataset"],
            x["L"],
            x["batch_size"],
            x["run_id"],
            status,
        )
    return results


if __name__ == "__main__":
    main()
