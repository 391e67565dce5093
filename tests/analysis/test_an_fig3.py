"""Fig. 3's analysis side: bidirectional entailment from directed probabilities, the figure, the module on records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.figures import fig3
from analysis.similarity import bidirectional, off_diagonal_mean
from analysis_fixtures import run_cfg, summary, write_run


def test_bidirectional_needs_both_directions():
    P = np.array([[1.0, 0.9, 0.9], [0.2, 1.0, 0.7], [0.8, 0.6, 1.0]])
    binary, soft = bidirectional(P)
    assert np.array_equal(binary, [[1, 0, 1], [0, 1, 1], [1, 1, 1]])  # 0->1 holds, 1->0 does not
    assert np.allclose(binary, binary.T) and np.allclose(soft, soft.T)
    assert soft[0, 1] == pytest.approx(0.2) and soft[1, 2] == pytest.approx(0.6)
    assert off_diagonal_mean(binary) == pytest.approx(4 / 6)
    assert np.isnan(off_diagonal_mean(np.ones((1, 1))))


def test_render_figure_to_tmp(tmp_path):
    m = np.eye(5) * 0.5 + 0.5
    mats = {0.1: {"cosine": m, "entailment": m}, 0.3: {"cosine": m * 0.8, "entailment": np.eye(5)}}
    paths = fig3.render_figure(mats, "LLM judge: test", tmp_path / "fig3", n_prompts={0.1: 2, 0.3: 2},
                               footer_text="pair | device | date")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)


def _line(sid: str, cos: list, P: list) -> dict:
    n = len(cos)
    return {"sample_id": sid, "question": "q", "paths": list(range(1, n + 1)), "cosine": cos, "entail_p": P,
            "identical": [[i == j or cos[i][j] == 1.0 for j in range(n)] for i in range(n)], "judge": "stub judge",
            "num_judge_calls": n * (n - 1), "sbert": "stub"}


def test_fig3_main_from_similarity_records(results):
    """The whole module on hand-written method=similarity records (2 p_drop x 2 prompts, 3 paths)."""
    same = [[1.0] * 3] * 3
    mixed_cos = [[1.0, 0.5, 0.2], [0.5, 1.0, 0.4], [0.2, 0.4, 1.0]]
    mixed_P = [[1.0, 0.9, 0.1], [0.8, 1.0, 0.3], [0.6, 0.2, 1.0]]
    recs = {0.1: [_line("spec_bench/test/81", same, same), _line("spec_bench/test/161", same, same)],
            0.3: [_line("spec_bench/test/81", mixed_cos, mixed_P), _line("spec_bench/test/161", same, same)]}
    for p, lines in recs.items():
        write_run(results, f"sim-{p}", run_cfg("similarity", "spec_bench", p_drop=p, K=3), summary(float("nan")), lines)
    write_run(results, "decode", run_cfg("dropout_path", "spec_bench", p_drop=0.1, path=1, K=1),  # not read
              summary(float("nan")), [{"sample_id": "spec_bench/test/81", "output_text": "x"}])
    assert fig3.main(["--profile", "default"]) == 0
    out = results / "fig3"
    assert (out / "fig3.png").exists() and (out / "fig3.pdf").exists()
    summ = pd.read_csv(out / "fig3.csv").set_index("p_drop")
    assert summ.loc[0.1, "mean off-diag bidirectional entailment"] == 1.0
    assert summ.loc[0.1, "mean off-diag cosine"] == pytest.approx(1.0)
    # p=0.3: prompt 1 has one equivalent pair (0,1) of 3 -> 1/3; prompt 2 all -> mean 2/3
    assert summ.loc[0.3, "mean off-diag bidirectional entailment"] == pytest.approx(round(2 / 3, 3))
    assert summ.loc[0.3, "mean off-diag soft entailment"] == pytest.approx(round((0.8 + 0.1 + 0.2) / 3 / 2 + 0.5, 3))
    assert summ.loc[0.3, "identical outputs (pairs)"] == 3
    mats = pd.read_csv(out / "fig3_matrices.csv")
    assert len(mats) == 2 * 3 * 9
    md = (out / "fig3.md").read_text()
    assert "judge: stub judge" in md and "Test CPU" in md and str(results) not in md


def test_fig3_main_without_records(results, capsys):
    assert fig3.main(["--profile", "default"]) == 1
    assert "experiment=fig3_measure" in capsys.readouterr().err
