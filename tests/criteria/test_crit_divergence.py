"""Hand-worked values for the centroid, JS divergence, majority vote and agreement patterns (Eq. 5-7, Table 2)."""

from __future__ import annotations

import math

import pytest
import torch

from criteria.divergence import (
    LN2,
    agreement_pattern,
    agreement_pattern_names,
    centroid_probs,
    js_divergence,
    majority_token,
)


def js_reference(p: list[float], q: list[float]) -> float:
    """Scalar JS in nats, written out term by term."""
    m = [(a + b) / 2 for a, b in zip(p, q)]
    kl_pm = sum(a * math.log(a / c) for a, c in zip(p, m) if a > 0)
    kl_qm = sum(b * math.log(b / c) for b, c in zip(q, m) if b > 0)
    return 0.5 * kl_pm + 0.5 * kl_qm


class TestJSDivergence:
    def test_disjoint_support_is_ln2(self):
        js = js_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
        assert js.item() == pytest.approx(math.log(2.0), abs=1e-7)

    def test_hand_value_half_vs_point_mass(self):
        # m = [0.75, 0.25]; KL(p||m) = 0.5 ln(4/3), KL(q||m) = ln(4/3); JS = 0.75 ln(4/3).
        js = js_divergence(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]))
        assert js.item() == pytest.approx(0.75 * math.log(4.0 / 3.0), rel=1e-6)

    def test_matches_reference_on_batch_and_is_symmetric(self):
        g = torch.Generator().manual_seed(1)
        p = torch.softmax(torch.randn(4, 3, 7, generator=g, dtype=torch.float64), -1)
        q = torch.softmax(torch.randn(4, 3, 7, generator=g, dtype=torch.float64), -1)
        q[0, 0, :3] = 0.0  # zeros in one distribution
        q[0, 0] /= q[0, 0].sum()
        js = js_divergence(p, q)
        assert js.shape == (4, 3) and js.dtype == torch.float64
        ref = [
            [js_reference(p[i, j].tolist(), q[i, j].tolist()) for j in range(3)] for i in range(4)
        ]
        ref = torch.tensor(ref, dtype=torch.float64)
        torch.testing.assert_close(js, ref, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(js_divergence(q, p), js, rtol=0, atol=1e-15)

    def test_zeros_in_both_give_no_nan_and_identity_gives_zero(self):
        p = torch.tensor([0.0, 0.25, 0.75, 0.0])
        assert js_divergence(p, p).item() == 0.0
        js = js_divergence(p, torch.tensor([0.0, 0.75, 0.25, 0.0]))
        assert torch.isfinite(js) and js.item() == pytest.approx(
            js_reference([0, 0.25, 0.75, 0], [0, 0.75, 0.25, 0])
        )

    def test_range_on_random_inputs(self):
        g = torch.Generator().manual_seed(2)
        p = torch.softmax(5 * torch.randn(200, 11, generator=g), -1)
        q = torch.softmax(5 * torch.randn(200, 11, generator=g), -1)
        js = js_divergence(p, q)
        assert bool((js >= 0).all()) and bool((js <= LN2).all()) and bool((js > 0).all())

    def test_broadcasts_heads_against_centroid(self):
        heads = torch.tensor([[0.5, 0.5], [1.0, 0.0]])  # [K=2, V]
        c = torch.tensor([0.5, 0.5])
        js = js_divergence(heads, c.unsqueeze(0))
        assert js.shape == (2,)
        assert js[0].item() == 0.0 and js[1].item() == pytest.approx(
            0.75 * math.log(4.0 / 3.0), rel=1e-6
        )


class TestCentroid:
    def test_softmax_of_mean_logits_hand_value(self):
        logits = torch.tensor([[0.0, 0.0], [2.0, 0.0]])  # [K=2, V=2], mean [1, 0]
        c = centroid_probs(logits)
        e = math.e
        torch.testing.assert_close(c, torch.tensor([e / (e + 1), 1 / (e + 1)]))
        # not the mean of the heads' probabilities (that would be [0.6904, 0.3096])
        mean_probs = torch.softmax(logits, -1).mean(0)
        assert not torch.allclose(c, mean_probs, atol=1e-3)

    def test_batched_shape_and_normalised(self):
        c = centroid_probs(torch.randn(2, 3, 5, 9, generator=torch.Generator().manual_seed(0)))
        assert c.shape == (2, 3, 9)
        torch.testing.assert_close(c.sum(-1), torch.ones(2, 3))


class TestMajority:
    @pytest.mark.parametrize(
        "ids, token, count",
        [
            ([4, 4, 4, 4, 4], 4, 5),  # all agree
            ([4, 4, 4, 1, 1], 4, 3),  # 3-2
            ([1, 4, 4, 4, 1], 4, 3),  # the larger group wins even if it starts later
            ([5, 3, 5, 3, 7], 5, 2),  # 2-2-1 tie: token of the lowest head index (head 0 -> 5)
            ([3, 5, 5, 3, 7], 3, 2),  # same tie, other order -> 3
            (
                [7, 5, 3, 5, 3],
                5,
                2,
            ),  # tie between 5 and 3; head 1 (5) precedes head 2 (3); 7 has 1 vote
            ([9, 8, 7, 6, 5], 9, 1),  # all differ: head 0
            ([2], 2, 1),  # K = 1
        ],
    )
    def test_hand_cases(self, ids, token, count):
        t, c = majority_token(torch.tensor(ids))
        assert (t.item(), c.item()) == (token, count)
        assert t.dtype == torch.int64 and c.dtype == torch.int64

    def test_batched(self):
        ids = torch.tensor([[[1, 2, 2], [3, 3, 1]], [[0, 1, 2], [5, 5, 5]]])  # [2, 2, K=3]
        t, c = majority_token(ids)
        assert t.tolist() == [[2, 3], [0, 5]] and c.tolist() == [[2, 2], [1, 3]]


class TestAgreementPattern:
    def test_names_k5(self):
        assert agreement_pattern_names(5) == [
            "5",
            "4-1",
            "3-2",
            "3-1-1",
            "2-2-1",
            "2-1-1-1",
            "1-1-1-1-1",
        ]
        assert agreement_pattern_names(1) == ["1"]
        assert agreement_pattern_names(4) == ["4", "3-1", "2-2", "2-1-1", "1-1-1-1"]
        with pytest.raises(ValueError, match="K"):
            agreement_pattern_names(0)

    def test_codes_k5(self):
        ids = torch.tensor(
            [
                [7, 7, 7, 7, 7],
                [7, 2, 7, 7, 7],
                [2, 7, 2, 7, 7],
                [1, 7, 2, 7, 7],
                [1, 2, 2, 9, 1],
                [1, 2, 3, 4, 1],
                [1, 2, 3, 4, 5],
            ]
        )
        names = agreement_pattern_names(5)
        codes = agreement_pattern(ids)
        assert codes.dtype == torch.int64
        assert [names[c] for c in codes.tolist()] == [
            "5",
            "4-1",
            "3-2",
            "3-1-1",
            "2-2-1",
            "2-1-1-1",
            "1-1-1-1-1",
        ]

    def test_batched_shape_and_k1(self):
        assert agreement_pattern(torch.zeros(2, 3, 1, dtype=torch.int64)).tolist() == [
            [0, 0, 0],
            [0, 0, 0],
        ]
        ids = torch.tensor([[[1, 1, 2], [1, 2, 3]]])
        assert agreement_pattern(ids).tolist() == [[1, 2]]  # "2-1", "1-1-1"
