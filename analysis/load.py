"""Read every run record into one pandas DataFrame (one row per run). Analysis never parses file names.

Columns: run_id, pair, dataset, method, backend, spec_method (draft_model | eagle3), eagle3_random_head, profile, L, p_drop, K, path,
threshold and judge_key (Auto-Judge methods), temperature, seed, repeats, tok_per_s_repeat_std,
n (samples done), n_expected, offset, trace (criterion trace recorded), complete, accuracy, accuracy_stderr, tau, acceptance_rate,
per_position_rate (list), tok_per_s, tok_per_s_std, num_output_tokens, wall_s, device, date_utc,
git_sha, run_dir, plus every ``quality/*`` metric as ``q_<name>``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from runners.paths import results_dir
from runners.record import iter_runs


def run_row(cfg: dict, summary: dict, run_dir: Path) -> dict:
    dm = cfg.get("dropmatch") or {}
    row = {
        "run_id": summary.get("run_id", run_dir.name),
        "pair": cfg["pair"]["name"],
        "dataset": cfg["dataset"]["name"],
        "method": cfg["method"]["name"],
        "backend": cfg["backend"]["name"],
        "profile": (cfg.get("profile") or {}).get("name"),
        "L": int(cfg.get("L") or 0),
        "p_drop": dm.get("p_drop"),
        "K": dm.get("K"),
        "path": dm.get("path"),
        "threshold": (cfg["method"] or {}).get("threshold"),
        "judge_key": ((cfg["method"] or {}).get("judge") or {}).get("key"),
        "temperature": float(cfg["decoding"]["temperature"]),
        "seed": int(cfg["decoding"]["seed"]),
        "repeats": int(summary.get("speed/repeats") or 1),
        "tok_per_s_repeat_std": summary.get("speed/tok_per_s_repeat_std"),
        "batch_size": int((cfg.get("backend") or {}).get("batch_size") or 1),
        "spec_method": str((cfg.get("backend") or {}).get("spec_method") or "draft_model"),
        "eagle3_random_head": bool((cfg.get("pair") or {}).get("eagle3_random_head", False)),
        "n": int(summary.get("num_samples", 0)),
        "n_expected": int(summary.get("num_expected", 0)),
        "complete": bool(summary.get("complete", False)),
        "max_new_tokens": cfg["decoding"].get("max_new_tokens"),
        "offset": int(cfg["dataset"].get("offset") or 0),
        "trace": bool(cfg.get("trace", False)),
        "accuracy": summary.get("quality/accuracy"),
        "accuracy_stderr": summary.get("quality/accuracy_stderr"),
        "tau": summary.get("spec/mean_acceptance_length"),
        "acceptance_rate": summary.get("spec/acceptance_rate"),
        "per_position_rate": summary.get("spec/per_position_rate"),
        "tok_per_s": summary.get("speed/tok_per_s"),
        "tok_per_s_std": summary.get("speed/tok_per_s_std"),
        "tok_per_s_total": summary.get("speed/tok_per_s_total"),
        "num_output_tokens": summary.get("speed/num_output_tokens"),
        "wall_s": summary.get("speed/wall_s"),
        "device": summary.get("device"),
        "date_utc": summary.get("date_utc"),
        "git_sha": summary.get("git_sha"),
        "run_dir": str(run_dir),
    }
    for k, v in summary.items():
        if k.startswith("quality/") and isinstance(v, (int, float)):
            row["q_" + k.split("/", 1)[1]] = v
    return row


def load_runs(root: str | Path | None = None) -> pd.DataFrame:
    """All runs with a summary under ``root`` (default ``results/runs``)."""
    root = Path(root) if root is not None else results_dir() / "runs"
    rows = [run_row(c, s, d) for c, s, d in iter_runs(root)]
    return pd.DataFrame(rows)


SETTING = ("pair", "dataset", "n_expected", "offset", "max_new_tokens")


def one_setting(runs: pd.DataFrame, cell: tuple[str, ...], group: tuple[str, ...] = ("pair", "dataset")) -> pd.DataFrame:
    """Keep, per ``group``, the runs of one *setting* (same items and ``max_new_tokens``), one run per cell.

    Cells of a table that are compared with each other (speedups, lines of a plot) must come from the same
    items and output cap. When runs of several settings exist (a profile cap was changed, another artefact ran
    the benchmark at other sizes), the setting with the most filled ``cell`` s wins, then the larger n, then the
    most recent; within a cell the most recent run. Trace runs (criterion trace recorded, which costs time) are
    dropped first.

    Args:
        runs: :func:`load_runs` rows.
        cell: the columns that name one cell, e.g. ``("method", "L")``.
        group: the columns within which all cells share a setting.
    """
    if runs.empty:
        return runs
    r = runs[~runs["trace"].astype(bool)] if "trace" in runs else runs
    setting = list(dict.fromkeys([*group, *SETTING]))
    r = r.sort_values("date_utc", ascending=False).drop_duplicates(setting + list(cell))
    if r.empty:
        return r
    score = r.groupby(setting).agg(cells=("run_id", "size"), n=("n", "max"), date=("date_utc", "max")).reset_index()
    best = score.sort_values(["cells", "n", "date"], ascending=False).drop_duplicates(list(group))
    return r.merge(best[setting], on=setting)
