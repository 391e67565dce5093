"""The frontier artefact (analysis/tables/frontier.py): paired comparisons with SD, the summary's choices."""

from __future__ import annotations

import json
import math

import pandas as pd

from analysis import style
from analysis.stats import newcombe_paired_ci
from analysis.tables import frontier
from tests.helpers.records import item_run, item_sample, run_cfg

N = 400  # items: enough for a setting scored exactly as SD to keep a lower bound above -2 points


def _samples(L: int, accepted: int, correct: list[float], lost: int = 0, mismatched: int = 0):
    """N items with ``accepted`` drafts accepted in each of 4 rounds; the first ``lost`` correct items
    answered wrongly (outputs changed there); ``mismatched`` accepted tokens per item off the argmax."""
    out = []
    k = 0
    for i, c in enumerate(correct):
        rounds = [accepted] * 4 if L else []  # autoregressive: no rounds
        s = item_sample(f"gsm8k/test/{i}", rounds, L, correct=c, tokens=20, wall_s=1.0)
        if c == 1.0 and k < lost:
            s["quality"]["correct"] = 0.0
            s["output_token_ids"] = [2] * len(s["output_token_ids"])
            k += 1
        if mismatched:
            s["spec"]["num_accepted_mismatched"] = mismatched
        out.append(s)
    return out


def _cfg(method: str, L: int, kwargs: dict | None = None, p_drop: float | None = None) -> dict:
    c = run_cfg(method, "gsm8k", L=L, p_drop=p_drop)
    c["method"]["kwargs"] = kwargs or {}
    if p_drop is not None:
        c["method"]["uses_dropmatch"] = True
    return c


def _records(root) -> None:
    correct = [float(i % 2 == 0) for i in range(N)]  # SD and AR: 50%
    runs = root
    item_run(runs, "ar", _cfg("ar", 0), _samples(0, 0, correct))
    item_run(runs, "sd", _cfg("sd", 5), _samples(5, 2, correct))
    # fsd: a setting scored as SD (tau 4.0), a faster one that loses 20 items (tau 5.0)
    item_run(runs, "f1", _cfg("fsd", 5, {"threshold": 0.1}), _samples(5, 3, correct, mismatched=1))
    item_run(runs, "f2", _cfg("fsd", 5, {"threshold": 1.0}), _samples(5, 4, correct, lost=20))
    item_run(runs, "dm", _cfg("dropmatch", 5, p_drop=0.3), _samples(5, 3, correct, lost=1))


def test_frontier_pairs_every_setting_with_sd_and_picks_the_best_within_tolerance(results):
    from analysis.render import render

    _records(results)
    art = render("frontier", "default", echo=False)
    summary = art.tables[0].data.set_index("method")
    # fsd at threshold 0.1: every item scored as SD's -> Newcombe lower bound above -2 points at n=400
    lb = 100 * newcombe_paired_ci(N // 2, 0, 0, N // 2)[1]
    assert -2.0 < lb < 0.0
    assert summary.loc["fsd", "within_knobs"] == "threshold=0.1"
    assert summary.loc["fsd", "within_tau"] == 4.0  # 1 + 3 accepted per round
    assert summary.loc["fsd", "no_loss_tau"] == 4.0 and summary.loc["fsd", "max_tau"] == 5.0
    # DropMatch lost one item: not "no item lost", but its lower bound may still be within -2
    assert math.isnan(summary.loc["dropmatch", "no_loss_tau"])
    rows = pd.read_csv(results / "frontier" / "frontier_gsm8k.csv").set_index("knobs")
    f2 = rows.loc["threshold=1.0"]
    assert abs(f2["delta_acc_pp_vs_sd"] + 5.0) < 1e-9 and f2["delta_acc_pp_vs_sd_lost"] == 20
    assert f2["delta_acc_pp_vs_sd_hi"] < 0  # 20 lost, none gained: the interval excludes 0
    assert (
        rows.loc["threshold=0.1", "accepted_mismatch_share"] == 1 / 12
    )  # 1 of 4 rounds x 3 accepted
    md = (results / "frontier" / "frontier.md").read_text()
    assert f"GSM8K {lb:+.1f} (n={N})" in md
    manifest = json.loads((results / "frontier" / "manifest.json").read_text())
    assert set(manifest["runs"]) == {"ar", "sd", "f1", "f2", "dm"}


def test_setting_labels_show_only_the_knobs_that_vary():
    assert frontier.varying(["a=1, b=2", "a=3, b=2"]) == ["a=1", "a=3"]
    assert frontier.varying(["a=1, b=2"]) == ["a=1, b=2"]


def test_frontier_shows_only_its_own_sweep_beside_other_artefacts_runs(results):
    """Table 6's SD and DropMatch runs on another benchmark (other n and cap) are not a frontier: once runs made
    for the frontier exist, the artefact shows only those."""
    from analysis.render import render

    correct = [float(i % 2 == 0) for i in range(N)]
    for rid, method, L, p in (
        ("ar", "ar", 0, None),
        ("sd", "sd", 5, None),
        ("dm", "dropmatch", 5, 0.3),
    ):
        c = _cfg(method, L, p_drop=p)
        c["artefact"] = "frontier"
        item_run(results, rid, c, _samples(L, 3 if L else 0, correct))
    for rid, method, p in (("t6-sd", "sd", None), ("t6-dm", "dropmatch", 0.3)):
        c = _cfg(method, 5, p_drop=p)
        c["dataset"]["name"], c["artefact"] = "humaneval", "table6"
        item_run(results, rid, c, [item_sample("humaneval/0", [3, 3], 5, correct=1.0)])
    art = render("frontier", "default", echo=False)
    assert [t.stem for t in art.tables] == ["frontier", "frontier_gsm8k"]
    manifest = json.loads((results / "frontier" / "manifest.json").read_text())
    assert set(manifest["runs"]) == {"ar", "sd", "dm"}


def test_no_two_rules_share_a_colour_and_a_marker():
    n, marks = len(frontier.RULE_LABEL), frontier.RULE_MARKERS
    looks = {(style.COLORS[i % len(style.COLORS)], marks[i % len(marks)]) for i in range(n)}
    assert len(looks) == n and "*" not in marks  # the star is SD's


def test_every_frontier_table_carries_the_provenance_footer(results):
    """The summary table too (before: frontier.md had no pair, device, date, seed, commit or identity lines)."""
    from analysis.footer import provenance_lines
    from analysis.render import render

    _records(results)
    art = render("frontier", "default", echo=False)
    prov = provenance_lines(art.runs)
    assert "decoding seed (decoding.seed): 0 (5 runs)" in prov
    for t in art.tables:
        assert t.footer[-len(prov) :] == prov, t.stem
    assert "- decoding seed (decoding.seed): 0 (5 runs)" in (
        (results / "frontier" / "frontier.md").read_text()
    )
