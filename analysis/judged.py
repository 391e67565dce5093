"""Judged quality of open-ended answers, read from the judging runs' records (Tables 7 and 10).

A judging run (``runners/judging``, ``method.measure: judge``) holds one line per judged question of one decode
run. :func:`with_judgments` adds the judging runs of the selected decode runs to an artefact's selection;
:class:`Judgments` picks one judge for the artefact (a strong judge over a weak one, then the judge that covers
the most cells, then the newest) and gives each decode run's quality cell: the protocol's per-question values
(rating 1-10; win rate: 100 / 50 / 0 per pairwise outcome, 100 x (preference - 1) for AlpacaEval) with a
percentile-bootstrap 95 % interval over questions, and the standard error the reference tool reports. The
per-question number is the ``value`` each judgment line carries (written by the judging run).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analysis.stats import Estimate, mean_ci
from runners.records.record import read_samples

JUDGE_COLUMNS = (
    "source_run_id",
    "protocol",
    "subset",
    "judge_key",
    "judge_label",
    "judge_weak",
    "baseline",
    "prompt_files",
)
DIGITS = {"single": 2, "pairwise": 1, "alpaca_eval": 1}


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def judge_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """The judging runs among ``runs`` (full question sets only), with their judge and source as columns."""
    r = (
        runs[runs["method"] == "judge"].copy()
        if not runs.empty and "method" in runs
        else runs.iloc[0:0].copy()
    )
    cols: dict[str, list] = {k: [] for k in JUDGE_COLUMNS}
    for _, row in r.iterrows():
        cfg = _json(Path(row["run_dir"]) / "config.json")
        summ = _json(Path(row["run_dir"]) / "summary.json")
        m = cfg.get("method") or {}
        cols["source_run_id"].append(m.get("source_run_id"))
        cols["protocol"].append(m.get("protocol"))
        cols["subset"].append(m.get("subset"))
        cols["judge_key"].append(
            json.dumps((cfg.get("judge") or {}).get("identity"), sort_keys=True)
        )
        cols["judge_label"].append(summ.get("judge/label"))
        cols["judge_weak"].append(bool(summ.get("judge/weak")))
        cols["baseline"].append(json.dumps(m.get("baseline"), sort_keys=True))
        cols["prompt_files"].append(
            json.dumps((cfg.get("judge") or {}).get("prompt_files"), sort_keys=True)
        )
    for k, v in cols.items():
        r[k] = v
    return r[r["subset"] == "all"] if not r.empty else r


def with_judgments(selected: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """``selected`` plus the judging runs of its runs (none: ``selected`` unchanged)."""
    j = judge_rows(runs)
    if j.empty or selected.empty:
        return selected
    j = j[j["source_run_id"].isin(set(selected["run_id"]))]
    return pd.concat([selected, j[selected.columns]]) if not j.empty else selected


def split(selected: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(decode runs, judging runs with their judge columns) of an artefact's selection."""
    if selected.empty:
        return selected, selected
    is_judge = selected["method"] == "judge"
    return selected[~is_judge], judge_rows(selected[is_judge])


@dataclass
class Judged:
    """One decode run's judged quality.

    Attributes:
        value: the protocol's mean over questions (rating, or win rate in %) with its 95 % bootstrap interval.
        se: its standard error (as FastChat / AlpacaEval report it), NaN below 2 questions.
        n_expected: questions judged or to judge; n_parse_failures: replies without a verdict (unscored).
        n_call_failures: questions whose judge call failed (not judged yet: rerun the judging to retry).
    """

    run_id: str
    protocol: str
    value: Estimate
    se: float
    n_expected: int
    n_parse_failures: int
    n_call_failures: int
    complete: bool
    per_question: dict[str, float] | None = (
        None  # sample id -> the protocol's value (rating; win-rate unit)
    )
    source_run_id: str | None = None  # the decode run judged
    baseline_run_id: str | None = (
        None  # the run whose answers a pairwise / AlpacaEval judging compared with
    )

    @property
    def scored(self) -> int:
        """Questions with a value (0: no answer scored, the cell reads n.j.)."""
        return 0 if math.isnan(self.value.value) else int(self.value.n)

    @property
    def self_baseline(self) -> bool:
        """A pairwise / AlpacaEval judging of the baseline run against itself: every answer a draw by construction,
        50 % with no judge call, not a measurement (the table prints the baseline marker instead)."""
        return self.baseline_run_id is not None and self.baseline_run_id == self.source_run_id


def paired_delta(a: Judged | None, b: Judged | None) -> Estimate:
    """Judged quality of ``a`` minus that of ``b`` on the questions both scored, in the protocol's units
    (rating points; win-rate points): mean of the per-question differences with its 95 % percentile-bootstrap
    interval over those questions (:func:`analysis.stats.mean_ci`); NaN when either is missing or none is shared.
    Only the single-answer protocol has per-question values on one scale in both runs: a pairwise or AlpacaEval
    cell is already a paired comparison with its baseline's answers."""
    if a is None or b is None or not a.per_question or not b.per_question:
        return Estimate(math.nan, math.nan, math.nan, 0)
    shared = sorted(set(a.per_question) & set(b.per_question))
    if not shared:
        return Estimate(math.nan, math.nan, math.nan, 0)
    scale = 1.0 if a.protocol == "single" else 100.0
    return mean_ci([a.per_question[k] - b.per_question[k] for k in shared]).scaled(scale)


def baseline_run(baseline: str | None) -> str | None:
    """The run id of a judging run's baseline (its JSON ``method.baseline``), None for none (single grading, or
    the dataset's reference answers)."""
    b = json.loads(baseline) if isinstance(baseline, str) and baseline else baseline
    rid = b.get("run_id") if isinstance(b, dict) else None
    return str(rid) if rid else None


def baseline_kind(baseline: str | None) -> str:
    """The kind of a judging run's baseline (its JSON ``method.baseline``): the method whose answers it compares
    with (``sd``, ``reference``), without the run id that differs per setting; ``null`` for none."""
    b = json.loads(baseline) if isinstance(baseline, str) and baseline else None
    return str(b.get("method")) if isinstance(b, dict) else "null"


def one_protocol(rows: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, the judging runs of one protocol and baseline kind: the pair judging most decode runs (ties:
    the newest), so a column never mixes e.g. 1-10 ratings with win rates, or win rates against different kinds of
    baseline (another method's answers vs the dataset's reference answers). Each row's baseline is that kind in
    the row's own setting (its pair, L, engine: another run per setting), so the kind, not the run, is compared."""
    if rows.empty or "dataset" not in rows:
        return rows
    combo = rows["protocol"].astype(str) + "|" + rows["baseline"].map(baseline_kind)
    keep = []
    for _, g in rows.assign(_combo=combo).groupby("dataset", dropna=False, sort=False):
        best = (
            g.groupby("_combo")
            .agg(cells=("source_run_id", "nunique"), date=("date_utc", "max"))
            .sort_values(["cells", "date"], ascending=False)
            .index[0]
        )
        keep.append(g[g["_combo"] == best])
    return pd.concat(keep).drop(columns="_combo")


class Judgments:
    """The judgments of one judge over an artefact's decode runs (module docstring)."""

    def __init__(self, judges: pd.DataFrame) -> None:
        self.rows = judges.iloc[0:0] if judges.empty else judges
        self.chosen = self.rows
        self.label, self.weak = None, False
        if not self.rows.empty:
            score = (
                self.rows.groupby("judge_key")
                .agg(
                    weak=("judge_weak", "max"),
                    cells=("source_run_id", "nunique"),
                    date=("date_utc", "max"),
                )
                .reset_index()
                .sort_values(["weak", "cells", "date"], ascending=[True, False, False])
            )
            key = score.iloc[0]["judge_key"]
            chosen = one_protocol(self.rows[self.rows["judge_key"] == key])
            # one judging run per decode run: the complete, then the newest
            self.chosen = chosen.sort_values(
                ["complete", "date_utc"], ascending=[False, False]
            ).drop_duplicates("source_run_id")
            self.label = str(self.chosen.iloc[0]["judge_label"])
            self.weak = bool(self.chosen.iloc[0]["judge_weak"])
        self.others = sorted(
            {str(x) for x in self.rows["judge_label"]} - {self.label}
            if not self.rows.empty
            else set()
        )
        self._cells: dict[str, Judged] = {}

    def __bool__(self) -> bool:
        return not self.chosen.empty

    def cell(self, source_run_id: str) -> Judged | None:
        """The judged quality of decode run ``source_run_id``, or None (not judged by the chosen judge)."""
        if not self:
            return None
        if source_run_id in self._cells:
            return self._cells[source_run_id]
        hit = self.chosen[self.chosen["source_run_id"] == source_run_id]
        if hit.empty:
            return None
        row = hit.iloc[0]
        summ = _json(Path(row["run_dir"]) / "summary.json")
        protocol = str(row["protocol"])
        lines = read_samples(Path(row["run_dir"]) / "samples.jsonl")
        per_q = {
            str(x["sample_id"]): float(x["value"]) for x in lines if x.get("value") is not None
        }
        vals = list(per_q.values())
        scale = 1.0 if protocol == "single" else 100.0
        est = mean_ci(vals).scaled(scale) if vals else Estimate(math.nan, math.nan, math.nan, 0)
        se = scale * float(pd.Series(vals).sem()) if len(vals) > 1 else math.nan
        c = Judged(
            run_id=str(row["run_id"]),
            protocol=protocol,
            value=est,
            se=se,
            n_expected=int(summ.get("num_expected") or 0),
            n_parse_failures=int(summ.get("judge/num_parse_failures") or 0),
            n_call_failures=int(summ.get("judge/num_call_failures") or 0),
            complete=bool(summ.get("complete")),
            per_question=per_q,
            source_run_id=str(source_run_id),
            baseline_run_id=baseline_run(row["baseline"]),
        )
        self._cells[source_run_id] = c
        return c

    def is_baseline(self, source_run_id: str) -> bool:
        """Whether decode run ``source_run_id`` is the baseline of the chosen pairwise / AlpacaEval judgings (the
        run the others' win rates compare with): its own win rate is 50 % by construction, not a measurement."""
        if not self:
            return False
        return any(baseline_run(b) == str(source_run_id) for b in self.chosen["baseline"])

    def protocol_of(self, source_run_ids) -> str | None:
        """The protocol of the judged runs among ``source_run_ids`` (None: none judged)."""
        if not self:
            return None
        hit = self.chosen[self.chosen["source_run_id"].isin(list(source_run_ids))]
        return None if hit.empty else str(hit.iloc[0]["protocol"])

    def used(self, source_run_ids) -> pd.DataFrame:
        """The chosen judging runs of ``source_run_ids`` (for the manifest)."""
        if not self:
            return self.chosen
        return self.chosen[self.chosen["source_run_id"].isin(list(source_run_ids))]

    def footer(self, judged_sets: dict[str, str], baseline_note: str = "") -> list[str]:
        """Footer lines naming the judge, the protocol per set, the counts of unscored and unjudged questions."""
        if not self:
            return []
        cells = [self.cell(s) for s in self.chosen["source_run_id"]]
        cells = [c for c in cells if c is not None]
        selfs = [
            c for c in cells if c.self_baseline
        ]  # a baseline against itself: draws, no judge call
        cells = [c for c in cells if not c.self_baseline]
        n = sum(c.n_expected for c in cells)
        unparsed = sum(c.n_parse_failures for c in cells)
        failed = sum(c.n_call_failures for c in cells)
        files = json.loads(self.chosen.iloc[0]["prompt_files"] or "null") or {}
        lines = [
            f"judge: {self.label}; prompts (sha256): "
            + ", ".join(f"{k} {str(v)[:12]}" for k, v in sorted(files.items()))
        ]
        if self.weak:
            lines.append(
                "WEAK JUDGE: these numbers are a weak judge's opinion of the answers, not GPT-4's (the paper's "
                "judge); not comparable with the paper's MT-Bench scores or win rates; rejudge the stored answers "
                "with a strong judge: python -m runners.judging <artefact> judge=api"
            )
        what = {
            "single": "mean FastChat single-answer rating 1-10 (single-v1; single-math-v1 with a reference "
            "answer for math, reasoning, coding), first turn",
            "pairwise": "FastChat pairwise win rate % vs the baseline (pair-v2 / pair-math-v1, both orders, "
            "inconsistent = tie, ties count half)",
            "alpaca_eval": "AlpacaEval 2.0 win rate % vs the baseline (weighted_alpaca_eval_gpt4_turbo "
            "annotator: 2 - P(m) from the top-5 logprobs; identical answers are draws; length-controlled win "
            "rate not computed)",
        }
        for label, protocol in judged_sets.items():
            lines.append(
                f"{label} Q: {what.get(protocol, protocol)}"
                + (f"; baseline: {baseline_note}" if protocol != "single" and baseline_note else "")
            )
        lines.append(
            f"judged quality: value [95% CI] percentile bootstrap over questions; standard errors in the CSV "
            f"(*_se); {n} questions judged in {len(cells)} judging runs, {unparsed} replies without a verdict "
            f"(unscored), {failed} questions whose judge call failed (not judged: rerun the judging)"
            + (
                f"; not counted: {len(selfs)} judging runs of a baseline against itself "
                f"({sum(c.n_expected for c in selfs)} questions, all draws, no judge call)"
                if selfs
                else ""
            )
        )
        if "single" in judged_sets.values():
            lines.append(
                "Δ (single-answer ratings): the row's rating minus the exact row's (same pair and L) on the "
                "questions both scored, mean of the per-question differences, 95% CI percentile bootstrap over "
                "those questions; identical answers get identical judgments (a repeated request reuses the reply)"
            )
        if self.others:
            lines.append(
                f"other judges' records exist ({'; '.join(self.others)}); python -m runners.judging prints their "
                "agreement on the calibration subset"
            )
        return lines
