"""The footers' exactness-audit line (analysis.footer.audit_lines): pooled counts and their Clopper-Pearson bound."""

from __future__ import annotations

import pandas as pd
import pytest
from scipy.stats import beta

from analysis.footer import audit_lines


def _runs(*audits, extra=()):
    """Runs frame rows: one sparse DropMatch run per ``(rounds, rounds_equal, positions, positions_equal,
    rounds_total)`` (None: the run has no audit counts), plus ``extra`` rows as given."""
    rows = []
    for a in audits:
        row = {"method": "dropmatch", "uses_dropmatch": True, "sparse_top_n": 64.0}
        if a is not None:
            keys = ("rounds", "rounds_equal", "positions", "positions_equal", "rounds_total")
            row.update({f"audit_{k}": v for k, v in zip(keys, a)}, audit_share=0.05)
        rows.append(row)
    return pd.DataFrame([*rows, *extra])


AR = {"method": "ar", "uses_dropmatch": False, "sparse_top_n": None}
EXACT_DM = {"method": "dropmatch", "uses_dropmatch": True, "sparse_top_n": None}


def test_pooled_counts_and_the_clopper_pearson_bound():
    """Two audited runs pooled: k/n summed, and the printed bound is scipy's beta.ppf(0.05, k, n - k + 1)."""
    runs = _runs((30, 29, 120, 118, 700), (20, 20, 70, 70, 380), extra=[AR, EXACT_DM])
    (line,) = audit_lines(runs)
    k, n = 118 + 70, 120 + 70
    lo = 100 * beta.ppf(0.05, k, n - k + 1)
    assert (
        f"same verdict at {k}/{n} positions ({100 * k / n:.2f}%, one-sided 95% lower bound {lo:.2f}%)"
        in line
    )
    rlo = 100 * beta.ppf(0.05, 49, 50 - 49 + 1)
    assert (
        f"same accepted length at 49/50 rounds (98.00%, one-sided 95% lower bound {rlo:.2f}%)"
        in line
    )
    assert "50/1080 rounds also decided by the exact rule" in line
    assert "in 2 of the 3 DropMatch runs" in line and "sparse_top_n=64" in line
    assert "audit_share=0.05" in line and line.endswith("missed")


@pytest.mark.parametrize(
    "k, n, verdict",
    [
        (5000, 5000, "met"),  # lower bound 1 - 0.05^(1/5000) = 99.94 %
        (400, 400, "cannot yet show (more audited positions needed)"),  # 99.25 %: too few positions
        (990, 1000, "missed"),
    ],
)
def test_the_bar_verdict(k, n, verdict):
    (line,) = audit_lines(_runs((n // 4, n // 4, n, k, 20 * n // 4)))
    assert line.endswith(f"the >= 99.9% bar at positions: {verdict}")
    if k == n:  # k = n: the bound is alpha^(1/n)
        assert (
            f"{k}/{n} positions (100.00%, one-sided 95% lower bound {100 * 0.05 ** (1 / n):.2f}%)"
            in line
        )


def test_unaudited_sparse_runs_are_flagged_and_exact_tables_say_nothing():
    (line,) = audit_lines(_runs((10, 10, 40, 40, 200), None))
    assert line.endswith("; 1 sparse run(s) NOT audited")
    (only,) = audit_lines(_runs(None))
    assert only.endswith("NOT audited against the exact rule")
    assert audit_lines(pd.DataFrame([AR, EXACT_DM])) == []
    assert audit_lines(pd.DataFrame([{"method": "ar"}])) == []  # records from before the columns


def test_table6_footer_prints_the_audit_pooled_over_its_runs(results):
    """Table 6 rendered from records: two sparse, audited DM runs (GSM8K, MMLU) and their SD runs; the footer
    line pools both runs' counts."""
    from analysis.render import main
    from tests.helpers.records import item_run, item_sample, run_cfg

    counts = {"gsm8k": (6, 6, 20, 20), "mmlu": (4, 3, 12, 11)}
    for ds, (r, re, p, pe) in counts.items():
        item_run(results, f"sd-{ds}", run_cfg("sd", ds, L=5), [item_sample(f"{ds}/0", [3, 3], 5)])
        cfg = run_cfg("dropmatch", ds, p_drop=0.3, K=5, L=5)
        cfg["method"]["uses_dropmatch"] = True
        cfg["dropmatch"].update(sparse_top_n=64, audit_share=0.05)
        item_run(
            results,
            f"dm-{ds}",
            cfg,
            [item_sample(f"{ds}/0", [4, 4], 5)],
            **{
                "audit/rounds": r,
                "audit/rounds_equal": re,
                "audit/positions": p,
                "audit/positions_equal": pe,
                "audit/rounds_total": 100,
            },
        )
    assert main(["table6", "--profile", "default"]) == 0
    md = (results / "table6" / "table6.md").read_text()
    lo = 100 * beta.ppf(0.05, 31, 32 - 31 + 1)
    assert "sparse variant (dropmatch.sparse_top_n=64) in 2 of the 2 DropMatch runs" in md
    assert "10/200 rounds also decided by the exact rule" in md
    assert f"same verdict at 31/32 positions (96.88%, one-sided 95% lower bound {lo:.2f}%)" in md
    assert "same accepted length at 9/10 rounds" in md


def test_the_escape_is_named_only_where_runs_used_it():
    """The sparse variant with ``dropmatch.sparse_escape=true`` is another decision: the line counts those runs;
    without any, the line reads as before (committed footers unchanged)."""
    runs = _runs((30, 29, 120, 118, 700), (20, 20, 70, 70, 380))
    runs["sparse_escape"] = [True, False]
    (line,) = audit_lines(runs)
    assert "in 2 of the 2 DropMatch runs, 1 of them with the escape" in line
    assert "dropmatch.sparse_escape=true" in line
    runs["sparse_escape"] = False
    (plain,) = audit_lines(runs)
    assert "escape" not in plain and "in 2 of the 2 DropMatch runs; exactness audit" in plain
