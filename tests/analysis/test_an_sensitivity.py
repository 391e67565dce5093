"""Sensitivity artefact (analysis.figures.sensitivity): both acceptance rules (dropmatch.include_target) as lines
of their own, any batch size (one per figure), records without the field read as the paper's rule; Table 6 keeps
the paper's rule when the sensitivity sweep left include_target=true runs at its setting."""

from __future__ import annotations

from analysis.artefact import Profile
from analysis.figures import sensitivity
from analysis.load import load_runs
from tests.helpers.records import item_run, item_sample, run_cfg


def _cfg(method, *, p_drop=None, K=5, include_target=None, batch_size=1, majority=None):
    c = run_cfg(method, "gsm8k", p_drop=p_drop, K=K, L=5)
    if include_target is not None:
        c["dropmatch"]["include_target"] = include_target
    if majority is not None:
        c["dropmatch"]["majority"] = majority
    c["backend"]["batch_size"] = batch_size
    return c


def _samples(rounds, n=1):
    return [item_sample(f"gsm8k/test/{i}", rounds, 5) for i in range(n)]


def _sweep(results, *, Ks=(1, 5), p_drops=(0.1, 0.3), batch_size=1, n=1, tag=""):
    """SD (τ 2) plus DM per (K, p, rule): accepted per round = K - 1 + (1 if include_target) (τ = K or K + 1)."""
    item_run(results, f"sd{tag}", _cfg("sd", batch_size=batch_size), _samples([1, 1], n))
    for K in Ks:
        for p in p_drops:
            for it in (False, True):
                a = K - 1 + int(it)
                item_run(
                    results,
                    f"dm-K{K}-p{p}-{it}{tag}",
                    _cfg("dropmatch", p_drop=p, K=K, include_target=it, batch_size=batch_size),
                    _samples([a, a], n),
                )


def _build():
    return sensitivity.build(sensitivity.select(load_runs(), Profile("default")))


def test_both_rules_give_two_lines_per_K_and_both_rows(results):
    _sweep(results)
    art = _build()
    (t,), (f,) = art.tables, art.figures
    assert len(t.data) == 8 and sorted(set(t.data["include_target"])) == [False, True]
    taus = {(r.K, r.include_target, r.p_drop): r.tau for r in t.data.itertuples()}
    assert (
        taus[(1, False, 0.1)] == 1.0 and taus[(1, True, 0.3)] == 2.0 and taus[(5, True, 0.1)] == 6.0
    )
    assert list(t.display.columns[:3]) == ["K", "include_target", "p_drop"]
    assert set(t.display["include_target"]) == {"false", "true"}
    ax = f.fig.axes[0]
    assert len(ax.containers) == 4  # (K 1, 5) x (include_target false, true)
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    assert set(lines) == {"K=1", "K=1, include_target", "K=5", "K=5, include_target"}
    for K in (1, 5):
        solid, dashed = lines[f"K={K}"], lines[f"K={K}, include_target"]
        assert solid.get_color() == dashed.get_color()  # one colour per K
        assert solid.get_linestyle() == "-" and dashed.get_linestyle() == "--"
        assert dashed.get_markerfacecolor() == "none" and solid.get_markerfacecolor() != "none"
        assert list(dashed.get_ydata()) == [K + 1.0, K + 1.0]
    assert lines["K=1"].get_color() != lines["K=5"].get_color()
    assert [ln.get_linestyle() for ln in ax.lines if ln.get_label() == "SD"] == [
        ":"
    ]  # SD reference kept
    footer = "\n".join(t.footer)
    assert "include_target: false = the paper's Algorithm 1" in footer and "batch size 1;" in footer
    assert (
        "n (items per run): 1" in footer
        and "bootstrap" in footer
        and "git commits of the runs" in footer
    )
    assert f.footer == t.footer and len(art.runs) == 9


def test_batch_five_runs_render_and_one_batch_size_per_figure(results):
    from analysis.render import render

    _sweep(results, Ks=(5,), p_drops=(0.3,), batch_size=1, tag="-b1")  # 2 cells at batch 1
    _sweep(results, batch_size=5, n=5, tag="-b5")  # 8 cells at batch 5: this setting wins
    art = render("sensitivity", "default", echo=False)
    assert set(art.runs["batch_size"]) == {5} and len(art.runs) == 9
    (t,) = art.tables
    assert set(t.data["n"]) == {5}
    md = (results / "sensitivity" / "sensitivity.md").read_text()
    assert "batch size 5 (that many items decoded together" in md and "n (items per run): 5" in md
    assert (
        "SD reference (dotted line, band = its CI): τ 2.00" in md and "n=5" in md
    )  # the batch-5 SD run
    assert (results / "sensitivity" / "sensitivity_plot.png").stat().st_size > 0


def test_old_records_read_as_the_papers_rule(results):
    item_run(results, "old", run_cfg("dropmatch", "gsm8k", p_drop=0.3, L=5), _samples([1]))
    item_run(
        results,
        "new",
        _cfg("dropmatch", p_drop=0.3, include_target=True, majority="plurality"),
        _samples([1]),
    )
    item_run(results, "sd", run_cfg("sd", "gsm8k", L=5), _samples([1]))
    runs = load_runs().set_index("run_id")
    assert runs["include_target"].to_dict() == {"old": False, "new": True, "sd": False}
    assert runs["majority"].to_dict() == {"old": "strict", "new": "plurality", "sd": "strict"}


def test_figure_keeps_one_majority_rule(results):
    _sweep(results, Ks=(5,))
    for p in (
        0.1,
        0.3,
        0.5,
    ):  # a plurality sweep with more cells wins the figure; no strict run is mixed in
        for it in (False, True):
            item_run(
                results,
                f"plur-{p}-{it}",
                _cfg("dropmatch", p_drop=p, include_target=it, majority="plurality"),
                _samples([2, 2]),
            )
    (t,) = _build().tables
    assert len(t.data) == 6 and set(t.data["tau"]) == {3.0}
    assert "majority: plurality" in t.footer[0]


def test_table6_keeps_the_papers_rule(results):
    from analysis.tables import table6

    item_run(results, "ar", run_cfg("ar", "gsm8k"), [item_sample("gsm8k/test/0", [], 0, tokens=4)])
    item_run(results, "sd", _cfg("sd"), _samples([1, 1]))
    item_run(
        results, "dm-paper", _cfg("dropmatch", p_drop=0.3, include_target=False), _samples([2, 2])
    )
    item_run(
        results,
        "dm-target",
        _cfg("dropmatch", p_drop=0.3, include_target=True),
        _samples([3, 3]),
        date_utc="2026-12-01T08:00:00+00:00",
    )  # more recent, same setting: must not replace the paper's rule
    art = table6.build(table6.select(load_runs(), Profile("default")))
    assert "dm-paper" in set(art.runs["run_id"]) and "dm-target" not in set(art.runs["run_id"])


def test_table6_has_sd_rows_only_at_lengths_with_dropmatch_runs(results):
    # the Auto-Judge sweeps leave SD runs at L=8 (their reference): not a Table 6 row without SD + DM beside it
    from analysis.tables import table6

    item_run(results, "ar", run_cfg("ar", "gsm8k"), [item_sample("gsm8k/test/0", [], 0, tokens=4)])
    item_run(results, "sd5", _cfg("sd"), _samples([1, 1]))
    item_run(results, "dm5", _cfg("dropmatch", p_drop=0.3), _samples([2, 2]))
    sd8 = run_cfg("sd", "gsm8k", L=8)
    item_run(results, "sd8", sd8, [item_sample("gsm8k/test/0", [3, 3], 8)])
    art = table6.build(table6.select(load_runs(), Profile("default")))
    assert set(art.runs["run_id"]) == {"ar", "sd5", "dm5"}
    assert list(art.tables[0].display["L"]) == ["-", "5", "5"]
