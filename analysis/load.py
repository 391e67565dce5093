"""Read every run record into one pandas DataFrame (one row per run). Analysis never parses file names.

Columns: run_id, pair, dataset, method, backend, spec_method (draft_model | eagle3), eagle3_random_head, profile, L, p_drop, K, path,
include_target (``dropmatch.include_target``: bool, False when the record lacks it, the paper's Algorithm 1),
majority (``dropmatch.majority``: strict | plurality, strict when absent), threshold and judge_key (Auto-Judge
methods), temperature, seed, repeats, tok_per_s_repeat_std,
n (samples done), n_expected, offset, trace (criterion trace recorded), complete, accuracy, accuracy_stderr, tau, acceptance_rate,
per_position_rate (list), num_drafts (rounds, from ``spec/counters``; None when absent), tok_per_s, tok_per_s_std, num_output_tokens, wall_s, verify_s (seconds in verify passes), device, date_utc,
git_sha, git_shas (every commit that wrote to the run, sorted tuple), git_dirty, model_identity (text), weights_identity (the same without dtypes),
decision_code (text or None), decision_rules ("<rule>@<backend>+..." for a run deciding with several rules, bench; else None), run_dir, plus every ``quality/*`` metric as ``q_<name>``; quality_metric (the primary
metric's name, what accuracy is) and comparable_metric (lm-eval's own number when the primary is another, e.g.
GSM8K's ``exact_match,strict-match`` beside the primary ``math_verify,strict-match``; None otherwise).

:func:`load_items` reads one run's ``samples.jsonl`` as one row per benchmark item (for intervals).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.counter_checks import check_summary, checked_samples
from runners.paths import results_dir
from runners.records.io import get_number
from runners.records.legacy_fingerprints import current_value
from runners.records.record import iter_runs


def _short(v: Any) -> str:
    """A value for a footer: long hex digests cut to 12 characters."""
    s = str(v)
    return s[:12] if len(s) > 16 and all(c in "0123456789abcdef" for c in s.lower()) else s


def _flat_text(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k} {_flat_text(x)}" for k, x in sorted(v.items()) if x is not None)
    return _short(v)


def _without_dtype(v: Any) -> Any:
    """A recorded identity with every ``dtype`` entry dropped (at any depth)."""
    if isinstance(v, dict):
        return {k: _without_dtype(x) for k, x in v.items() if k != "dtype"}
    return v


def model_identity(cfg: dict, meta: dict, summary: dict, with_dtype: bool = True) -> str:
    """The weights a run used, as footer text: ``meta.model_identity`` when the record has it (any shape),
    else the pair config's pinned sha256 / hub revision per model and its dtype (left out with ``with_dtype``
    False: the weights alone)."""
    if meta.get("model_identity"):
        ident = meta["model_identity"]
        return _flat_text(ident if with_dtype else _without_dtype(ident))
    pair = cfg.get("pair") or {}
    parts = []
    for role in ("target", "draft"):
        m = pair.get(role) or {}
        pin = (m.get("pinned") or {}).get("sha256") if isinstance(m.get("pinned"), dict) else None
        rev = m.get("revision") or m.get("hub_revision")
        if pin:
            parts.append(f"{role} sha256 {_short(pin)}")
        elif rev:
            parts.append(f"{role} {m.get('hub_id') or m.get('name')}@{_short(rev)}")
        elif m:
            parts.append(f"{role} {m.get('name')} (unpinned)")
    dtype = meta.get("dtype") or summary.get("dtype") or pair.get("dtype")
    if dtype and with_dtype:
        parts.append(f"dtype {dtype}")
    return ", ".join(parts) or "?"


def decision_code(meta: dict, cfg: dict | None = None) -> str | None:
    """Fingerprint of the code that made the acceptance decisions (``meta.decision_code``), short, or None.

    A scheme-1 value (records from before per-run fingerprints) is shown as its scheme-2 equivalent
    (:func:`runners.records.legacy_fingerprints.current_value`) when one is known, so a record and a rerun of the same code agree.
    """
    dc = meta.get("decision_code")
    if isinstance(dc, dict):
        for k in ("fingerprint", "sha256", "hash"):
            if dc.get(k):
                value = dc[k]
                if cfg is not None and k == "fingerprint" and dc.get("scheme") is None:
                    method, backend = dict(cfg.get("method") or {}), dict(cfg.get("backend") or {})
                    value = (
                        current_value(value, method.get("criterion"), backend.get("name")) or value
                    )
                return _short(value)
        return _flat_text(dc)
    return _short(dc) if dc else None


def decision_rules(meta: dict) -> str | None:
    """``"<rule>@<backend>+..."`` of a run that decides with several rules (bench's arms: ``meta.decision_code.rules``,
    :func:`runners.records.fingerprint.rules_decision_code`), which its footer names; None for a run of one rule."""
    dc = meta.get("decision_code")
    rules = dc.get("rules") if isinstance(dc, dict) else None
    return "+".join(rules) if rules else None


def read_meta(run_dir: Path) -> dict:
    try:
        return json.loads((Path(run_dir) / "meta.json").read_text())
    except (OSError, ValueError):
        return {}


def knobs_of(cfg: dict) -> str:
    """A run's rule settings as one label: ``method.kwargs`` (``k=v`` sorted by key), DropMatch's
    ``p_drop``/``K`` when the method uses the heads, Auto-Judge's ``threshold``; ``""`` when it has none."""
    method = cfg.get("method") or {}
    parts = [
        f"{k}={v}" for k, v in sorted(dict(method.get("kwargs") or {}).items()) if v is not None
    ]
    dm = cfg.get("dropmatch") or {}
    if method.get("uses_dropmatch") and "p_drop" in dm:
        parts += [f"p_drop={float(dm['p_drop']):g}", f"K={int(dm.get('K', 0))}"]
    if method.get("threshold") is not None:
        parts.append(f"threshold={float(method['threshold']):g}")
    return ", ".join(parts)


def dropmatch_fields(cfg: dict) -> dict:
    """A run's DropMatch settings as :func:`run_row`'s columns (None or the defaults where the record has none)."""
    dm = cfg.get("dropmatch") or {}
    return {
        "p_drop": dm.get("p_drop"),
        "K": dm.get("K"),
        "path": dm.get("path"),
        "include_target": bool(
            dm.get("include_target", False)
        ),  # records before the field: the paper's rule
        "majority": str(dm.get("majority") or "strict"),
        # DropMatch's decision: a decoding run of a DropMatch method, the sparse variant's top-N (None: exact),
        # whether its unsure positions escape to wider and exact heads, and the share of its rounds audited by the
        # exact rule (None: no audit)
        "uses_dropmatch": bool((cfg["method"] or {}).get("uses_dropmatch"))
        and not (cfg["method"] or {}).get("measure"),
        "sparse_top_n": dm.get("sparse_top_n"),
        "sparse_escape": bool(dm.get("sparse_escape", False)),
        "audit_share": dm.get("audit_share"),
    }


def run_row(cfg: dict, summary: dict, run_dir: Path) -> dict:
    meta = read_meta(run_dir)
    sessions = [meta, *(meta.get("sessions") or []), summary]
    shas = tuple(sorted({str(x["git_sha"]) for x in sessions if x.get("git_sha")}))
    judge = (cfg["method"] or {}).get("judge")
    row = {
        "run_id": summary.get("run_id", run_dir.name),
        "pair": cfg["pair"]["name"],
        "dataset": cfg["dataset"]["name"],
        "method": cfg["method"]["name"],
        "backend": cfg["backend"]["name"],
        "profile": (cfg.get("profile") or {}).get("name"),
        "L": int(cfg.get("L") or 0),
        **dropmatch_fields(cfg),
        "threshold": (cfg["method"] or {}).get("threshold"),
        "knobs": knobs_of(cfg),
        "judge_key": judge.get("key")
        if isinstance(judge, dict)
        else None,  # Auto-Judge (similarity's judge is a name)
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
        "accuracy": get_number(summary, "quality/accuracy"),
        "accuracy_stderr": get_number(summary, "quality/accuracy_stderr"),
        "quality_metric": summary.get("quality/metric"),
        "comparable_metric": summary.get("quality/comparable_metric"),
        "quality_note": summary.get("quality/note"),
        "tau": summary.get("spec/mean_acceptance_length"),
        "acceptance_rate": summary.get("spec/acceptance_rate"),
        "per_position_rate": summary.get("spec/per_position_rate"),
        "num_drafts": (summary.get("spec/counters") or {}).get("num_drafts"),
        "tok_per_s": get_number(summary, "speed/tok_per_s"),
        "tok_per_s_std": summary.get("speed/tok_per_s_std"),
        "tok_per_s_total": get_number(summary, "speed/tok_per_s_total"),
        "num_output_tokens": summary.get("speed/num_output_tokens"),
        "wall_s": summary.get("speed/wall_s"),
        "verify_s": summary.get("speed/verify_s"),
        "criterion_s": summary.get("speed/criterion_s"),
        "plain_s": summary.get("speed/plain_s"),
        "rule_s": summary.get("speed/rule_s"),
        "escape_positions": summary.get("escape/positions"),
        "audit_s": summary.get("speed/audit_s"),
        "audit_outside_wall": summary.get("speed/audit_outside_wall"),
        "device": summary.get("device"),
        "allocator": summary.get("allocator"),
        "cpu_isa": summary.get("cpu_isa"),
        "date_utc": summary.get("date_utc"),
        "artefact": cfg.get("artefact"),
        "git_sha": summary.get("git_sha"),
        "git_shas": shas,
        "git_dirty": any(bool(x.get("git_dirty")) for x in sessions),
        "model_identity": model_identity(cfg, meta, summary),
        "weights_identity": model_identity(cfg, meta, summary, with_dtype=False),
        "decision_code": decision_code(meta, cfg),
        "decision_rules": decision_rules(meta),
        "criterion": (cfg["method"] or {}).get("criterion"),
        "run_dir": str(run_dir),
    }
    for k, v in summary.items():
        if k.startswith("quality/") and (v is None or isinstance(v, (int, float))):
            row["q_" + k.split("/", 1)[1]] = get_number(summary, k)  # null: a metric's NaN
        elif k.startswith("audit/"):  # criteria.audit.pool: the exactness audit's counts
            row["audit_" + k.split("/", 1)[1]] = int(v)
    return row


def load_runs(root: str | Path | None = None) -> pd.DataFrame:
    """All runs with a summary under ``root`` (default ``results/runs``).

    Raises:
        RecordError: a summary holding an impossible value (:func:`analysis.counter_checks.check_summary`:
            its file, the field and the allowed range).
    """
    root = Path(root) if root is not None else results_dir() / "runs"
    rows = []
    for c, s, d in iter_runs(root):
        check_summary(s, int(c.get("L") or 0), d / "summary.json")
        rows.append(run_row(c, s, d))
    return pd.DataFrame(rows)


def unfinished_records(root: str | Path | None, runs: pd.DataFrame) -> list[str]:
    """Run ids of the records under ``root`` that are not complete: a run directory with a config but no summary
    (a run interrupted before its end: :func:`load_runs` has no row for it) and the rows of ``runs`` (its
    :func:`load_runs`) whose summary says ``complete: false``."""
    root = Path(root) if root is not None else results_dir() / "runs"
    ids = [
        d.name
        for d in sorted(root.glob("*/"))
        if (d / "config.json").exists() and not (d / "summary.json").exists()
    ]
    if not runs.empty and "complete" in runs:
        ids += [str(r) for r in runs.loc[~runs["complete"].astype(bool), "run_id"]]
    return sorted(set(ids))


SETTING = ("pair", "dataset", "n_expected", "offset", "max_new_tokens")


def one_setting(
    runs: pd.DataFrame,
    cell: tuple[str, ...],
    group: tuple[str, ...] = ("pair", "dataset"),
    extra: tuple[str, ...] = (),
    artefact: str | None = None,
) -> pd.DataFrame:
    """Keep, per ``group``, the runs of one *setting* (same items and ``max_new_tokens``), one run per cell.

    Cells of a table that are compared with each other (speedups, lines of a plot) must come from the same
    items and output cap. When runs of several settings exist (a profile cap was changed, another artefact ran
    the benchmark at other sizes), the setting holding runs made for ``artefact`` (config ``artefact``) wins, so
    a table is not taken over by another artefact's larger sweep on the same benchmark; then the most filled
    ``cell`` s, then the larger n, then the most recent; within a cell the most recent run. Trace runs
    (criterion trace recorded, which costs time) are dropped first.

    Args:
        runs: :func:`load_runs` rows.
        cell: the columns that name one cell, e.g. ``("method", "L")``.
        group: the columns within which all cells share a setting.
        extra: more columns a setting fixes besides :data:`SETTING` (e.g. ``("batch_size",)``: the cells of
            a row all come from runs of one batch size).
    """
    if runs.empty:
        return runs
    r = runs[~runs["trace"].astype(bool)] if "trace" in runs else runs
    setting = list(dict.fromkeys([*group, *SETTING, *extra]))
    r = r.sort_values("date_utc", ascending=False).drop_duplicates(setting + list(cell))
    if r.empty:
        return r
    own = (r["artefact"] == artefact) if artefact and "artefact" in r else False
    score = (
        r.assign(own=own)
        .groupby(setting)
        .agg(own=("own", "max"), cells=("run_id", "size"), n=("n", "max"), date=("date_utc", "max"))
        .reset_index()
    )
    best = score.sort_values(["own", "cells", "n", "date"], ascending=False).drop_duplicates(
        list(group)
    )
    return r.merge(best[setting], on=setting)


ITEM_COLUMNS = (
    "sample_id",
    "rounds",
    "accepted",
    "correct",
    "tokens",
    "wall_s",
    "wall_s_repeats",
    "tok_per_s",
    "hit_cap",
    "output",
    "mismatched",
    "comparable",
    "verify_passes",
    "verify_s",
    "accepted_per_pos",
)


def output_of(sample: dict) -> tuple[int, ...] | str | None:
    """A sample's output for comparison across runs: its token ids when recorded, else its text, else None."""
    ids = sample.get("output_token_ids")
    if isinstance(ids, list):
        return tuple(int(i) for i in ids)
    text = sample.get("output_text")
    return text if isinstance(text, str) else None


def load_items(run_dir: str | Path, comparable: str | None = None) -> pd.DataFrame:
    """One row per benchmark item of a run (its ``samples.jsonl``), for intervals over items.

    Columns: sample_id; rounds (``spec.num_drafts``, rounds), accepted (``spec.num_accepted_tokens``,
    tokens); correct (``quality.correct``, 0/1, NaN when not scored); tokens (output tokens); wall_s (seconds:
    the median of the item's timing repeats ``speed.wall_s_repeats`` when recorded, else the item's share of
    its batch's wall time ``speed.share_s`` (batched backends: every interval split equally among the rows
    decoding then, so the shares of a run sum to its decoding time; ``== speed.wall_s`` at batch size 1), else
    ``speed.wall_s``); wall_s_repeats (list of seconds); tok_per_s (tokens / wall_s, tokens/s; NaN when
    wall_s is 0); hit_cap (1.0 when the output ended at ``max_new_tokens`` (``stop_reason == "length"``), 0.0 when
    at EOS or a stop string, NaN in records without ``stop_reason``); output (the item's output as a tuple of
    token ids (``output_token_ids``), else its ``output_text``, else None: what two runs' outputs are compared
    by, e.g. :func:`analysis.stats.paired_accuracy`'s ``n_diverged``); mismatched (accepted draft tokens that
    differ from the target's argmax, ``spec.num_accepted_mismatched``; NaN in records without it); comparable
    (0/1: the item's ``quality[comparable]``, a metric the records carry beside the primary, e.g.
    ``"exact_match,strict-match"``; NaN when ``comparable`` is None or the item lacks it); verify_passes (target
    passes after the prefill: the length of ``accepted_per_round``, one per round, an AR step included); verify_s
    (``speed.verify_s``, seconds: the verify passes of the rounds the item was in, each the whole batch's pass;
    NaN when not recorded); accepted_per_pos (tuple of ints: the item's rounds whose accepted prefix reached
    draft position i, ``spec.num_accepted_tokens_per_pos``; empty when not recorded).

    Raises:
        RecordError: a damaged line or an impossible value (:func:`analysis.counter_checks.checked_samples`,
            ``comparable`` checked as a score in [0, 1]).
    """
    rows = []
    for s in checked_samples(Path(run_dir) / "samples.jsonl", [comparable] if comparable else []):
        spec, speed, q = s.get("spec") or {}, s.get("speed") or {}, s.get("quality") or {}
        one = speed.get(
            "share_s", speed.get("wall_s", 0.0)
        )  # batched: the item's share of the batch's time
        reps = [float(x) for x in (speed.get("wall_s_repeats") or [one])]
        wall = float(statistics.median(reps)) if reps else 0.0
        tokens = int(speed.get("num_output_tokens", 0))
        correct = q.get("correct") if isinstance(q, dict) else None
        other = q.get(comparable) if comparable and isinstance(q, dict) else None
        rows.append(
            {
                "sample_id": s["sample_id"],
                "rounds": int(spec.get("num_drafts", 0)),
                "accepted": int(spec.get("num_accepted_tokens", 0)),
                "correct": float(correct) if isinstance(correct, (int, float)) else float("nan"),
                "tokens": tokens,
                "wall_s": wall,
                "wall_s_repeats": reps,
                "tok_per_s": tokens / wall if wall > 0 else float("nan"),
                "hit_cap": float(s["stop_reason"] == "length")
                if s.get("stop_reason")
                else float("nan"),
                "output": output_of(s),
                "mismatched": float(spec["num_accepted_mismatched"])
                if "num_accepted_mismatched" in spec
                else float("nan"),
                "comparable": float(other) if isinstance(other, (int, float)) else float("nan"),
                "verify_passes": len(s.get("accepted_per_round") or []),
                "verify_s": float(speed["verify_s"])
                if isinstance(speed.get("verify_s"), (int, float))
                else float("nan"),
                "accepted_per_pos": tuple(
                    int(x) for x in (spec.get("num_accepted_tokens_per_pos") or [])
                ),
            }
        )
    return pd.DataFrame(rows, columns=list(ITEM_COLUMNS))
