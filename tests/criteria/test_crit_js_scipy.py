"""The Jensen-Shannon divergence DropMatch (Eq. 6) and FSD (``divergence=js``) use is
``scipy.spatial.distance.jensenshannon(p, q) ** 2`` in nats, on random and edge-case distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from criteria.divergence import js_divergence
from criteria.dropmatch_base import js_statistics
from criteria.fsd import fsd_divergence

V = 7


def edge_cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    one = lambda i: np.eye(V)[i]  # noqa: E731
    uni = np.full(V, 1.0 / V)
    zeros_p = np.array([0.5, 0.5, 0, 0, 0, 0, 0.0])
    zeros_q = np.array([0, 0.25, 0.25, 0.5, 0, 0, 0.0])
    return [
        ("identical", uni, uni.copy()),
        ("identical_with_zeros", zeros_p, zeros_p.copy()),
        ("one_hot_same", one(3), one(3)),
        ("one_hot_disjoint", one(0), one(6)),  # = ln 2, the maximum
        ("one_hot_vs_uniform", one(2), uni),
        ("partly_overlapping_zeros", zeros_p, zeros_q),
        ("tiny_mass", np.array([1 - 6e-12] + [1e-12] * 6), uni),
    ]


def random_pairs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Dirichlet draws from sparse (concentration 0.05) to flat (5.0)."""
    rng = np.random.default_rng(seed)
    conc = rng.choice([0.05, 0.3, 1.0, 5.0], size=n)
    p = np.stack([rng.dirichlet(np.full(V, c)) for c in conc])
    q = np.stack([rng.dirichlet(np.full(V, c)) for c in rng.permutation(conc)])
    return p, q


def scipy_js(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    return np.array([jensenshannon(a, b) ** 2 for a, b in zip(np.atleast_2d(p), np.atleast_2d(q))])


@pytest.mark.parametrize("name,p,q", edge_cases(), ids=[c[0] for c in edge_cases()])
def test_edge_cases_equal_scipy(name, p, q):
    expected = scipy_js(p, q)[0]
    got64 = js_divergence(torch.tensor(p), torch.tensor(q)).item()
    got32 = js_divergence(
        torch.tensor(p, dtype=torch.float32), torch.tensor(q, dtype=torch.float32)
    ).item()
    assert got64 == pytest.approx(expected, abs=1e-12)
    assert got32 == pytest.approx(expected, abs=2e-6)
    assert fsd_divergence(torch.tensor(p), torch.tensor(q), "js").item() == pytest.approx(
        expected, abs=1e-12
    )
    if name == "one_hot_disjoint":
        assert got64 == pytest.approx(math.log(2), abs=1e-12)
    if name.startswith("identical") or name == "one_hot_same":
        assert got64 == 0.0


def test_random_distributions_equal_scipy():
    p, q = random_pairs(500, seed=0)
    expected = scipy_js(p, q)
    got = js_divergence(torch.tensor(p), torch.tensor(q)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    got32 = js_divergence(
        torch.tensor(p, dtype=torch.float32), torch.tensor(q, dtype=torch.float32)
    )
    np.testing.assert_allclose(got32.numpy(), expected, rtol=0, atol=3e-6)
    assert expected.min() < 0.01 and expected.max() > 0.5  # the draws span the range


def test_dropmatch_eq6_statistic_is_scipy_js_against_the_centroid():
    """Eq. (6): JS(p_hat || p_bar), p_bar = softmax(mean head logits), on random heads and draft."""
    g = torch.Generator().manual_seed(1)
    heads = torch.randn(3, 4, 5, V, generator=g, dtype=torch.float64)  # [B, L, K, V]
    draft = torch.softmax(torch.randn(3, 4, V, generator=g, dtype=torch.float64), -1)
    js_draft, js_heads_max = js_statistics(heads, draft, temperature=0.0)
    centroid = torch.softmax(heads.mean(dim=-2), -1).numpy()
    expected = scipy_js(draft.reshape(-1, V).numpy(), centroid.reshape(-1, V)).reshape(3, 4)
    np.testing.assert_allclose(js_draft.numpy(), expected, rtol=0, atol=3e-6)  # float32 inside
    per_head = torch.softmax(heads, -1).numpy()
    exp_heads = np.array(
        [
            scipy_js(per_head[b, t], np.repeat(centroid[b, t][None], 5, 0)).max()
            for b in range(3)
            for t in range(4)
        ]
    ).reshape(3, 4)
    np.testing.assert_allclose(js_heads_max.numpy(), exp_heads, rtol=0, atol=3e-6)
