"""Provenance footer lines of a table or figure, from the rows of the runs it used (:func:`analysis.load.load_runs`).

Every footer names: pair, backend, profile; device; the date span and run count; the decoding seeds of the runs
(``decoding.seed``: the dropout masks and any sampling draw from it); the git commits that wrote
the runs (each with its run count; a table from several commits says so); uncommitted changes; the model
identity per pair (weights' sha256 or hub revision, dtype); the decision-code fingerprint of the acceptance
rule when the records carry one (several in one table: said so, with counts); for DropMatch runs decided by
the sparse variant, its audited agreement with the exact rule (:func:`audit_lines`) and what its decision cost
in the runs themselves (:func:`decision_cost_lines`). Where a GGUF engine
(llama.cpp) made any of the runs, a line names the engine and precision of every run (:func:`engine_lines`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

import pandas as pd

from analysis.stats import clopper_pearson_lower


def _counted(values: Iterable[str]) -> str:
    c = Counter(values)
    return ", ".join(f"{k} ({n} run{'s' if n > 1 else ''})" for k, n in sorted(c.items()))


def commit_lines(runs: pd.DataFrame) -> list[str]:
    """The git commits of the runs, each with the number of runs written at it (a resumed run, or one whose
    commit moved while it ran, counts at each of its commits and is said to span them); dirty worktrees flagged."""
    per_run = [
        sorted({str(s)[:10] for s in (row or ())})
        for row in runs.get("git_shas", pd.Series(dtype=object))
    ]
    per_run = [r for r in per_run if r]
    if not per_run and "git_sha" in runs:
        per_run = [[str(s)[:10]] for s in runs["git_sha"].dropna()]
    if not per_run:
        return ["git: not recorded"]
    shas = [s for r in per_run for s in r]
    distinct = sorted(set(shas))
    line = f"git commits of the runs: {_counted(shas)}"
    if len(distinct) > 1:
        spanning = sum(len(r) > 1 for r in per_run)
        line += f" -- {len(distinct)} commits in one table"
        if spanning:
            line += f" ({spanning} of the {len(per_run)} runs span several commits)"
    out = [line]
    if "git_dirty" in runs and runs["git_dirty"].astype(bool).any():
        dirty = int(runs["git_dirty"].astype(bool).sum())
        out.append(
            f"uncommitted changes in the checkout when {dirty} of the {len(runs)} runs "
            f"{'was' if dirty == 1 else 'were'} made (the commit alone does not identify their code)"
        )
    return out


def identity_lines(runs: pd.DataFrame, dtype_column: bool = False) -> list[str]:
    """Model identity per pair (MIXED when one pair's runs used different weights or dtypes). With
    ``dtype_column`` (a table with a dtype column: bench) runs of the same weights in several dtypes are not MIXED:
    the line names the weights and counts the identities by dtype."""
    if "model_identity" not in runs:
        return []
    out = []
    for pair, g in runs.groupby("pair", sort=True):
        ids = sorted(set(g["model_identity"].astype(str)))
        weights = sorted(set(g.get("weights_identity", g["model_identity"]).astype(str)))
        if len(ids) == 1:
            out.append(f"model identity ({pair}): {ids[0]}")
        elif dtype_column and len(weights) == 1:
            out.append(
                f"model identity ({pair}): {weights[0]}; in the dtypes of the table's dtype column: "
                + _counted(g["model_identity"].astype(str))
            )
        else:
            out.append(
                f"MIXED model identity ({pair}): {_counted(g['model_identity'].astype(str))}"
            )
    return out


# backend -> the engine that computes its forwards (backend=auto is resolved before a run records its config)
ENGINES = {"hf": "transformers", "llamacpp": "llama.cpp", "vllm": "vLLM"}
GGUF_BACKENDS = ("llamacpp",)


def engine_lines(runs: pd.DataFrame) -> list[str]:
    """The engine and precision the forwards ran in, with run counts (``backend`` and the identities' dtypes:
    e.g. ``transformers bfloat16`` or ``llama.cpp gguf:Q4_K_M``); several in one table are said so. Only where a
    GGUF engine made a run (the other footers name the engine in ``backend`` and the dtype in the identity)."""
    if "backend" not in runs or not runs["backend"].isin(GGUF_BACKENDS).any():
        return []
    kinds = []
    for backend, ident in zip(runs["backend"], runs.get("model_identity", [""] * len(runs))):
        dtypes = sorted(set(re.findall(r"dtype ([^,]+)", str(ident))))
        kinds.append(" ".join([ENGINES.get(str(backend), str(backend)), "/".join(dtypes)]).strip())
    line = f"engine: {_counted(kinds)}"
    return [line + (" -- MIXED engines in one table" if len(set(kinds)) > 1 else "")]


def recorded_lines(runs: pd.DataFrame, column: str, label: str) -> list[str]:
    """``label: value (n runs)...`` for a provenance field that moves speed, not outputs (the memory allocator
    setting, the instruction set a run computed with), with run counts; nothing when no run recorded it."""
    if column not in runs or runs[column].isna().all():
        return []
    missing = int(runs[column].isna().sum())
    tail = f"; not recorded in {missing} run{'s' if missing > 1 else ''}" if missing else ""
    return [f"{label}: {_counted(runs[column].dropna().astype(str).tolist())}{tail}"]


def decision_lines(runs: pd.DataFrame) -> list[str]:
    """Decision-code fingerprints, one per rule and backend (each run's fingerprint covers the code its rule and
    backend run: :mod:`runners.records.fingerprint`); MIXED when runs of one rule and backend were decided by different
    code."""
    if "decision_code" not in runs:
        return []
    missing = int(runs["decision_code"].isna().sum())
    known = runs.dropna(subset=["decision_code"])
    if known.empty:
        return ["decision code fingerprint: not recorded in these runs"]
    tail = f"; not recorded in {missing} run{'s' if missing > 1 else ''}" if missing else ""
    rule = known["method"].astype(str)
    if (
        "criterion" in known
    ):  # the rule's registry key; records without one are named by their method
        rule = known["criterion"].where(known["criterion"].notna(), rule).astype(str)
    keys = rule + "@" + known["backend"].astype(str)
    if (
        "decision_rules" in known
    ):  # several rules in one run (bench): its own "<rule>@<backend>+..." name
        keys = known["decision_rules"].where(known["decision_rules"].notna(), keys).astype(str)
    parts, mixed = [], []
    for key in sorted(keys.unique()):
        fps = known.loc[keys == key, "decision_code"].astype(str)
        if fps.nunique() == 1:
            parts.append(f"{key} {fps.iloc[0]}")
        else:
            mixed.append(f"{key}: {_counted(fps)}")
    if mixed:
        return [
            f"MIXED decision code: {'; '.join(mixed)}{tail} -- acceptance decisions may differ between cells"
        ]
    return [f"decision code fingerprints (per rule@backend): {', '.join(parts)}{tail}"]


AUDIT_BAR = 99.9  # % : the audited agreement's lower bound the sparse variant must show to stand in for the exact rule


def audit_lines(runs: pd.DataFrame) -> list[str]:
    """The exactness audit of the DropMatch runs decided by the sparse variant (:mod:`criteria.audit`), pooled
    over ``runs``: the share of rounds audited, the agreement of the two verdicts at the compared positions and
    over rounds (same accepted length), each with its one-sided 95 % Clopper-Pearson lower bound
    (:func:`analysis.stats.clopper_pearson_lower`). No line when no run is sparse.
    """

    if "sparse_top_n" not in runs or "uses_dropmatch" not in runs:
        return []
    sparse = runs[runs["uses_dropmatch"].fillna(False).astype(bool) & runs["sparse_top_n"].notna()]
    if sparse.empty:
        return []
    ns = ", ".join(str(int(n)) for n in sorted(set(sparse["sparse_top_n"])))
    n_dm = int(runs["uses_dropmatch"].fillna(False).astype(bool).sum())
    escaped = (
        int(sparse["sparse_escape"].fillna(False).astype(bool).sum())
        if "sparse_escape" in sparse
        else 0
    )
    escape = (
        f", {escaped} of them with the escape (the tail sampled; more samples, then the exact heads, where unsure: "
        "dropmatch.sparse_escape=true)"
        if escaped
        else ""
    )
    head = (
        f"DropMatch decision: sparse variant (dropmatch.sparse_top_n={ns}) in {len(sparse)} of the {n_dm} "
        f"DropMatch runs{escape}"
    )
    has = (
        sparse["audit_rounds"].notna()
        if "audit_rounds" in sparse
        else pd.Series(False, index=sparse.index)
    )
    audited = sparse[has]
    missing = len(sparse) - len(audited)
    if audited.empty:
        return [f"{head}; NOT audited against the exact rule"]

    def total(col: str) -> int:
        return int(audited[col].sum())

    def agreement(same: str, k: int, n: int, what: str) -> str:
        if n == 0:
            return f"no audited {what}"
        lo = 100.0 * clopper_pearson_lower(k, n)
        return (
            f"{same} at {k}/{n} {what} ({100.0 * k / n:.2f}%, one-sided 95% lower bound {lo:.2f}%)"
        )

    k_pos, n_pos = total("audit_positions_equal"), total("audit_positions")
    rounds = total("audit_rounds")
    shares = ", ".join(f"{a:g}" for a in sorted(set(audited["audit_share"].dropna())))
    if n_pos and 100.0 * clopper_pearson_lower(k_pos, n_pos) >= AUDIT_BAR:
        verdict = "met"
    elif n_pos and 100.0 * k_pos / n_pos >= AUDIT_BAR:
        verdict = "cannot yet show (more audited positions needed)"
    else:
        verdict = "missed"
    return [
        f"{head}; exactness audit (dropmatch.audit_share={shares}): {rounds}/"
        f"{total('audit_rounds_total')} rounds also decided by the exact rule on the same dropout masks; "
        f"{agreement('same verdict', k_pos, n_pos, 'positions')}, "
        f"{agreement('same accepted length', total('audit_rounds_equal'), rounds, 'rounds')} "
        f"(Clopper-Pearson, pooled over the table's runs); the >= {AUDIT_BAR:g}% bar at positions: "
        + verdict
        + (f"; {missing} sparse run(s) NOT audited" if missing else "")
        + audit_time(audited)
    ]


# % : the DropMatch decision's share of a verify pass the default CPU profile aims at (Table 4 judges it too)
DECISION_TARGET = 3.0


def decision_cost_lines(runs: pd.DataFrame) -> list[str]:
    """What the DropMatch decision cost in its own runs, per benchmark and pooled: the seconds after the plain logits
    (the dropout heads and the rule, ``speed/rule_s``) over those of the verify pass (the target's forward
    ``verify_s`` plus the plain LM head ``plain_s``; :mod:`runners.backends.round_meter`), sums over the runs'
    samples. Beside it the same share of the table's other speculative runs (``L > 0``: their own rule, the argmax
    and bookkeeping any rule pays) and DropMatch's extra over it, which the 3% target is judged on (the gross share
    without such runs); where the escape ran, the positions that reached each rung. Traced runs (``trace``: every
    position decided, traces built) are left out. No line without a DropMatch run that measured it (the exact rule
    with ``p_drop > 0``, on any backend, and records older than the meter do not).
    """
    if "rule_s" not in runs or "plain_s" not in runs or "uses_dropmatch" not in runs:
        return []
    untraced = ~runs["trace"].fillna(False).astype(bool) if "trace" in runs else True
    timed = runs[untraced & runs[["rule_s", "plain_s", "verify_s"]].notna().all(axis=1)]
    is_dm = runs["uses_dropmatch"].fillna(False).astype(bool)
    timed_dm = is_dm[timed.index]
    dm, others = timed[timed_dm], timed[~timed_dm & (timed["L"] > 0)]

    def share(part: pd.DataFrame) -> float:
        verify = float(part["verify_s"].sum()) + float(part["plain_s"].sum())
        return 100.0 * float(part["rule_s"].sum()) / verify if verify > 0 else float("nan")

    pooled = share(dm)
    if dm.empty or pooled != pooled:  # NaN: nothing measured
        return []
    by_set = ", ".join(
        f"{name} {share(part):.1f}%" for name, part in dm.groupby("dataset", sort=False)
    )
    line = (
        f"DropMatch decision cost in its runs (seconds after the plain logits: dropout heads and rule, over the "
        f"verify pass: target forward + plain LM head; sums over samples): {by_set}; pooled {pooled:.1f}%"
    )
    judged, what = pooled, "gross"
    base = share(others) if not others.empty else float("nan")
    if base == base:
        judged, what = pooled - base, "extra"
        line += (
            f"; the other speculative runs' own rule (argmax and bookkeeping, which any rule pays) "
            f"{base:.1f}%, so DropMatch's extra {judged:.1f}%"
        )
    verdict = "met" if judged <= DECISION_TARGET else "missed"
    line += f" (the <= {DECISION_TARGET:g}% target, on the {what} share: {verdict})"
    missing = int((is_dm & untraced).sum()) - len(dm)
    if missing:
        line += f"; {missing} DropMatch run(s) did not measure it"
    reached = [
        p for p in dm.get("escape_positions", pd.Series(dtype=object)) if isinstance(p, dict)
    ]
    if reached:
        legend = (
            " (E+S: the top-E tokens exact, S sampled)"
            if any("+" in k for p in reached for k in p)
            else ""
        )
        line += f"; escape, positions that reached each rung{legend}: {rung_counts(reached)}"
    return [line]


def rung_counts(reached: list[dict]) -> str:
    """The escape's positions per rung summed over runs (``escape/positions``: ``{"64": n, "512+512": n, ...,
    "exact": n}``; :func:`criteria.sparse_heads.rung_name`), the sampled rungs by their tail samples, then their exact top,
    then the exact heads: ``"64 samples 50; 512+512 13; the exact heads 5"`` (``E+S``: the top-E tokens exact plus
    S samples). A rung any run has is printed for all (0 where a run never reached it)."""

    def order(key: str) -> tuple[int, int]:
        top, _, samples = key.rpartition("+")
        return int(samples), int(top or 0)

    sampled = sorted({k for p in reached for k in p if k != "exact"}, key=order)
    rungs = [(k, f"{k} samples" if i == 0 and "+" not in k else k) for i, k in enumerate(sampled)]
    rungs.append(("exact", "the exact heads"))
    return "; ".join(f"{label} {sum(int(p.get(key, 0)) for p in reached)}" for key, label in rungs)


def audit_time(audited: pd.DataFrame) -> str:
    """Where the audit's seconds went: outside the runs' tok/s (records that say so, ``audit_outside_wall``) or
    inside; empty for records older than the flag (their footers stay as they were built)."""
    if "audit_outside_wall" not in audited or audited["audit_outside_wall"].isna().all():
        return ""
    out = audited["audit_outside_wall"].fillna(False).astype(bool)
    # per-sample seconds are the batch's, in audit_s and wall_s alike: their ratio is the audit's share of time
    audit, wall = (float(audited[c].fillna(0.0).sum()) for c in ("audit_s", "wall_s"))
    size = f" ({100.0 * audit / wall:.1f}% of the decoding time)" if wall > 0 else ""
    if out.all():
        return f"; the audit's time{size} is left out of the runs' wall time and tok/s"
    return (
        f"; the audit's time{size} is left out of the wall time and tok/s of {int(out.sum())} of "
        f"{len(out)} audited runs (MIXED: the others count it in)"
    )


def seed_lines(runs: pd.DataFrame) -> list[str]:
    """The decoding seeds of the runs (config ``decoding.seed``), each with its run count; nothing when the rows
    lack the column."""
    if "seed" not in runs or runs["seed"].isna().all():
        return []
    return [
        f"decoding seed (decoding.seed): {_counted(str(int(s)) for s in runs['seed'].dropna())}"
    ]


def provenance_lines(runs: pd.DataFrame, dtype_column: bool = False) -> list[str]:
    """n of runs, pair, backend, profile, device, dates, decoding seeds, commits, model identity, decision
    code. ``dtype_column``: the table shows each row's dtype (:func:`identity_lines`)."""
    if runs.empty:
        return ["no runs"]
    dates = sorted(d for d in runs["date_utc"].dropna())
    span = f"{dates[0][:10]} .. {dates[-1][:10]}" if dates else "?"
    return [
        f"pair: {', '.join(sorted(runs['pair'].unique()))}; backend: {', '.join(sorted(runs['backend'].unique()))}; "
        f"profile: {', '.join(sorted(str(p) for p in runs['profile'].unique()))}",
        *engine_lines(runs),
        f"device: {', '.join(sorted(str(d) for d in runs['device'].dropna().unique()))}",
        *recorded_lines(runs, "cpu_isa", "instruction set"),
        *recorded_lines(runs, "allocator", "allocator"),
        f"date (UTC): {span}; runs: {len(runs)}",
        *seed_lines(runs),
        *commit_lines(runs),
        *identity_lines(runs, dtype_column),
        *decision_lines(runs),
        *audit_lines(runs),
        *decision_cost_lines(runs),
    ]


def quality_lines(runs: pd.DataFrame) -> list[str]:
    """The quality metric the runs' scorers recorded (``quality/metric``, with run counts) and their notes
    (e.g. HumanEval scored by its original ``check()`` because EvalPlus's HumanEval+ data is not available
    offline), as :func:`analysis.load.load_runs` read them: a footer names what was measured, not what was meant."""
    metrics = [
        str(m)
        for m in runs.get("quality_metric", pd.Series(dtype=object))
        if isinstance(m, str) and m
    ]
    notes = [
        str(n)
        for n in runs.get("quality_note", pd.Series(dtype=object))
        if isinstance(n, str) and n
    ]
    out = [f"quality metric (as scored): {_counted(metrics)}"] if metrics else []
    pairs = [
        (str(m), str(c))
        for m, c in zip(
            runs.get("quality_metric", pd.Series(dtype=object)),
            runs.get("comparable_metric", pd.Series(dtype=object)),
        )
        if isinstance(m, str) and isinstance(c, str) and c and c != m
    ]
    if pairs:
        out.append(
            "primary accuracy vs lm-eval's own number (CSV comparable_pct): "
            + ", ".join(f"{m} is primary, {c} comparable" for m, c in sorted(set(pairs)))
        )
    return out + [f"scorer note: {n}" for n in sorted(set(notes))]
