"""Fig. 3's analysis side: bidirectional entailment from directed probabilities, the figure, the module on records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.figures import fig3
from analysis.similarity import bidirectional, off_diagonal_mean
from tests.helpers.records import run_cfg, similarity_line, summary, write_run


def test_bidirectional_needs_both_directions():
    P = np.array([[1.0, 0.9, 0.9], [0.2, 1.0, 0.7], [0.8, 0.6, 1.0]])
    binary, soft = bidirectional(P)
    assert np.array_equal(binary, [[1, 0, 1], [0, 1, 1], [1, 1, 1]])  # 0->1 holds, 1->0 does not
    assert np.allclose(binary, binary.T) and np.allclose(soft, soft.T)
    assert soft[0, 1] == pytest.approx(0.2) and soft[1, 2] == pytest.approx(0.6)
    assert off_diagonal_mean(binary) == pytest.approx(4 / 6)
    assert np.isnan(off_diagonal_mean(np.ones((1, 1))))


def test_figure_in_paper_style():
    from analysis import style

    m = np.eye(5) * 0.5 + 0.5
    mats = {
        0.1: {"cosine": m, "entailment_soft": m},
        0.3: {"cosine": m * 0.8, "entailment_soft": np.eye(5)},
    }
    fig, panels = fig3.figure(mats, judge="LLM judge: J-1B", sbert="mini", prompts=7)
    assert panels == ["(a)", "(b)", "(c)", "(d)"] and fig.get_figwidth() == style.WIDTH["double"]
    heat = [ax for ax in fig.axes if ax.get_images()]
    assert len(heat) == 4 and fig._suptitle is None
    # the figure says what H1-H5 are and which judge scored the entailment panels (no provenance lines)
    note = fig._supxlabel.get_text()
    assert (
        "H1-H5: the target's K=5 MC-dropout decoding paths" in note
        and "mean over 7 prompts" in note
    )
    assert "LLM judge: J-1B" in note and "SBERT embeddings: mini" in note
    bars = [ax for ax in fig.axes if not ax.get_images()]  # the colourbars, each labelled
    assert [b.get_ylabel() for b in bars] == [
        "cosine similarity",
        fig3.COLORBAR["entailment_soft"],
    ] * 2
    assert all(ax.get_xlabel() == "path $j$" and ax.get_ylabel() == "path $i$" for ax in heat)
    assert [t.get_text() for t in heat[3].texts if t.get_text().startswith("(")] == ["(d)"]
    assert heat[2].get_images()[0].get_array()[0, 1] == pytest.approx(
        0.4
    )  # p=0.3 cosine, off-diagonal


def test_fig3_renders_from_similarity_records(results):
    """The artefact on hand-written method=similarity records (2 p_drop x 2 prompts, 3 paths)."""
    from analysis.render import render

    same = [[1.0] * 3] * 3
    mixed_cos = [[1.0, 0.5, 0.2], [0.5, 1.0, 0.4], [0.2, 0.4, 1.0]]
    mixed_P = [[1.0, 0.9, 0.1], [0.8, 1.0, 0.3], [0.6, 0.2, 1.0]]
    recs = {
        0.1: [
            similarity_line("spec_bench/test/81", same, same),
            similarity_line("spec_bench/test/161", same, same),
        ],
        0.3: [
            similarity_line("spec_bench/test/81", mixed_cos, mixed_P),
            similarity_line("spec_bench/test/161", same, same),
        ],
    }
    for p, lines in recs.items():
        write_run(
            results,
            f"sim-{p}",
            run_cfg("similarity", "spec_bench", p_drop=p, K=3),
            summary(float("nan")),
            lines,
        )
    write_run(
        results,
        "decode",
        run_cfg("dropout_path", "spec_bench", p_drop=0.1, path=1, K=1),  # not read
        summary(float("nan")),
        [{"sample_id": "spec_bench/test/81", "output_text": "x"}],
    )
    art = render("fig3", "default", echo=False)
    assert sorted(art.runs["run_id"]) == ["sim-0.1", "sim-0.3"]
    out = results / "fig3"
    assert (out / "fig3.png").exists() and (out / "fig3.pdf").exists()
    summ = pd.read_csv(out / "fig3_summary.csv").set_index("p_drop")
    assert summ.loc[0.1, "mean off-diag bidirectional entailment"] == 1.0
    assert summ.loc[0.1, "mean off-diag cosine"] == pytest.approx(1.0)
    # p=0.3: prompt 1 has one equivalent pair (0,1) of 3 -> 1/3; prompt 2 all -> mean 2/3
    assert summ.loc[0.3, "mean off-diag bidirectional entailment"] == pytest.approx(2 / 3)
    assert summ.loc[0.3, "mean off-diag soft entailment"] == pytest.approx(
        (0.8 + 0.1 + 0.2) / 3 / 2 + 0.5
    )
    # interval over the 2 prompts: the bootstrap sees 1/3 and 1, so it lies within them and is not a point
    lo, hi = (
        summ.loc[0.3, "mean off-diag bidirectional entailment_lo"],
        summ.loc[0.3, "mean off-diag bidirectional entailment_hi"],
    )
    assert 1 / 3 <= lo < 2 / 3 < hi <= 1.0
    assert summ.loc[0.3, "identical outputs (pairs)"] == 3 and summ.loc[0.3, "prompts"] == 2
    mats = pd.read_csv(out / "fig3.csv")
    assert len(mats) == 2 * 3 * 9
    cap = (out / "fig3.md").read_text()
    assert (
        "(a) cosine similarity (SBERT) and (b) entailment score" in cap
        and "(d) entailment score" in cap
    )
    md = (out / "fig3_summary.md").read_text()
    assert "judge: stub judge" in md and "Test CPU" in md and str(results) not in md
    assert "n (prompts per p_drop): 2 at p_drop=0.1, 2 at p_drop=0.3" in md and "[95% CI]" in md


def test_fig3_without_records_exits_1(results, capsys):
    from analysis.render import main

    assert main(["fig3", "--profile", "default"]) == 1
    assert "fig3: no complete runs for profile=default" in capsys.readouterr().err
