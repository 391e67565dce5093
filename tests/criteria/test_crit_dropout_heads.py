"""MC-dropout LM heads (Eq. 1-3): one matmul, row 0 plain, seeded masks, expectation preserved."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import criteria.dropout_heads as dh
from criteria.dropout_heads import dropout_head_logits, dropout_masks, dropped_hidden
from criteria.round_heads import dropped_inputs


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def setup(N=4, d=16, V=11, seed=0):
    g = gen(seed)
    return (
        torch.randn(N, d, generator=g),
        torch.randn(V, d, generator=g),
        torch.randn(V, generator=g),
    )


class MatmulCounter(TorchDispatchMode):
    MATMULS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default"}

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in self.MATMULS:
            self.calls.append([tuple(a.shape) for a in args if isinstance(a, torch.Tensor)])
        return func(*args, **(kwargs or {}))


def test_shape_and_row0_is_plain_head():
    h, W, b = setup()
    out = dropout_head_logits(h, W, b, num_heads=5, p_drop=0.3, generator=gen(1))
    assert out.shape == (4, 6, 11) and out.dtype == torch.float32
    torch.testing.assert_close(out[:, 0], h @ W.T + b)
    assert not torch.allclose(out[:, 1], out[:, 0])  # heads actually differ from the plain head


def test_one_matmul_over_stacked_rows():
    h, W, b = setup(N=3, d=8, V=5)
    with MatmulCounter() as counter:
        dropout_head_logits(h, W, b, num_heads=4, p_drop=0.3, generator=gen(0))
    assert len(counter.calls) == 1
    assert (3 * (1 + 4), 8) in counter.calls[0]  # the stacked [N*(1+K), d] operand


def test_same_seed_same_masks_other_seed_other_masks():
    h, W, b = setup()
    a = dropout_head_logits(h, W, b, num_heads=3, p_drop=0.3, generator=gen(7))
    a2 = dropout_head_logits(h, W, b, num_heads=3, p_drop=0.3, generator=gen(7))
    c = dropout_head_logits(h, W, b, num_heads=3, p_drop=0.3, generator=gen(8))
    assert torch.equal(a, a2)
    assert not torch.equal(a[:, 1:], c[:, 1:])


def test_masks_are_inverted_dropout_fresh_per_position_and_head():
    # With W = I the logits are the masked, scaled hidden units themselves.
    N, d, K, p = 6, 400, 4, 0.3
    h = torch.full((N, d), 2.0)  # identical positions: any difference comes from the masks
    out = dropout_head_logits(
        h, torch.eye(d), num_heads=K, p_drop=p, generator=gen(3)
    )  # [N, 1+K, d]
    heads = out[:, 1:]
    kept = heads != 0
    torch.testing.assert_close(
        heads[kept], torch.full_like(heads[kept], 2.0 / (1 - p))
    )  # scale 1/(1-p)
    frac = kept.float().mean().item()
    n = N * K * d
    assert abs(frac - (1 - p)) < 5 * ((p * (1 - p) / n) ** 0.5)  # Bernoulli(1 - p) per unit
    masks = kept.reshape(N * K, d)
    assert len({tuple(m.tolist()) for m in masks}) == N * K  # all masks distinct


def test_expectation_preserved():
    h, W, b = setup(N=3, d=32, V=6, seed=4)
    K = 4000
    out = dropout_head_logits(h, W, b, num_heads=K, p_drop=0.3, generator=gen(5))
    heads = out[:, 1:]  # [N, K, V]
    mean, sd = heads.mean(1), heads.std(1)
    se = sd / K**0.5
    assert bool(((mean - out[:, 0]).abs() < 5 * se).all())
    # the bound is tight enough to catch a missing 1/(1-p) scale
    assert bool(((0.7 * mean - out[:, 0]).abs() > 5 * se).any())


def test_p_drop_zero_rows_bitwise_equal_row0():
    h, W, b = setup()
    out = dropout_head_logits(h, W, b, num_heads=5, p_drop=0.0, generator=None)
    for k in range(1, 6):
        assert torch.equal(out[:, k], out[:, 0])
    torch.testing.assert_close(out[:, 0], h @ W.T + b)


def test_no_global_rng_use():
    h, W, b = setup()
    state = torch.get_rng_state()
    dropout_head_logits(h, W, b, num_heads=2, p_drop=0.5, generator=gen(0))
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(num_heads=0, p_drop=0.3), "num_heads"),
        (dict(num_heads=2.0, p_drop=0.3), "num_heads"),
        (dict(num_heads=2, p_drop=1.0), "p_drop"),
        (dict(num_heads=2, p_drop=-0.1), "p_drop"),
    ],
)
def test_invalid_settings_raise(kwargs, field):
    h, W, b = setup()
    with pytest.raises(ValueError, match=rf"{field}=.*allowed values"):
        dropout_head_logits(h, W, b, generator=gen(0), **kwargs)


def test_bad_shapes_and_missing_generator_raise():
    h, W, b = setup()
    with pytest.raises(ValueError, match="lm_head_weight"):
        dropout_head_logits(h, W.T, num_heads=2, p_drop=0.1, generator=gen(0))
    with pytest.raises(ValueError, match="lm_head_bias"):
        dropout_head_logits(h, W, b[:-1], num_heads=2, p_drop=0.1, generator=gen(0))
    with pytest.raises(ValueError, match="generator"):
        dropout_head_logits(h, W, num_heads=2, p_drop=0.1, generator=None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropped_hidden_equals_the_masked_definition(dtype):
    """Eq. (2) as written, h * m / (1 - p) with m in {0, 1}, value for value (zeros compare equal to -0.0)."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(7, 32, generator=g).to(dtype)
    keep = dropout_masks(7, 5, 32, 0.3, g, "cpu")
    ref = torch.where(keep, (h * (1.0 / 0.7)).unsqueeze(1), torch.zeros((), dtype=dtype))
    out = dropped_hidden(h, keep, 0.3)
    assert out.dtype == dtype and out.shape == (7, 5, 32) and torch.equal(out, ref)
    # every dropped unit is zero, and only those (h has no zeros)
    assert int((out == 0).sum()) == int((~keep).sum())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_heads_on_candidates_position_by_position_gives_each_dot_product(dtype, monkeypatch):
    """Above ``GATHER_BYTES`` the rows are gathered one position at a time, each distinct token once (a sampled
    tail repeats tokens): every logit is still ``W[id] . x_k + b[id]`` at its own entry, ``-inf`` at duplicates."""
    g = torch.Generator().manual_seed(5)
    M, K, d, V, C = 3, 4, 64, 50, 40  # C > V: tokens repeat within a position
    x = torch.randn(M, K, d, generator=g).to(dtype)
    W = torch.randn(V, d, generator=g).to(dtype)
    b = torch.randn(V, generator=g).to(dtype)
    ids = torch.randint(0, V, (M, C), generator=g)
    dup = torch.rand(M, C, generator=g) < 0.2
    one_shot = dh.heads_on_candidates(x, W, b, ids, dup)
    monkeypatch.setattr(dh, "GATHER_BYTES", C * d * W.element_size())  # less than M positions' rows
    seen = []
    real = torch.unique
    monkeypatch.setattr(torch, "unique", lambda t, **kw: seen.append(t.numel()) or real(t, **kw))
    split = dh.heads_on_candidates(x, W, b, ids, dup)
    assert seen == [C] * M  # one position at a time
    ref = (x.float() @ W.float()[ids].transpose(1, 2) + b.float()[ids].unsqueeze(1)).masked_fill(
        dup.unsqueeze(1), float("-inf")
    )
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 5e-2}
    for out in (one_shot, split):
        assert out.dtype == dtype and out.shape == (M, K, C)
        torch.testing.assert_close(out.float(), ref, **tol)
    # the same dot products grouped otherwise: equal here, within a rounding step of the dtype on any BLAS
    near = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 8e-3, "atol": 1e-2}
    torch.testing.assert_close(split, one_shot, **near)


def test_gathered_rows_reuse_one_buffer_and_give_the_rows():
    """``gathered_rows`` copies ``W[ids]`` into a buffer it keeps per (dtype, device, d) and grows only when a
    gather is larger, so a gather of the same size or smaller writes into the same memory (no fresh allocation)."""
    g = torch.Generator().manual_seed(9)
    W = torch.randn(50, 16, generator=g).to(torch.bfloat16)
    dh._SCRATCH.clear()
    first = dh.gathered_rows(W, torch.tensor([[3, 4, 49], [0, 0, 7]]))
    assert first.shape == (2, 3, 16) and torch.equal(
        first, W[torch.tensor([[3, 4, 49], [0, 0, 7]])]
    )
    where = first.data_ptr()
    ids = torch.tensor([5, 1])
    second = dh.gathered_rows(W, ids)
    assert second.data_ptr() == where and torch.equal(second, W[ids])
    wider = torch.randint(0, 50, (9,), generator=g)
    assert torch.equal(dh.gathered_rows(W, wider), W[wider])
    assert dh._SCRATCH[(W.dtype, W.device, 16, False)].shape[0] == 9
    assert torch.equal(
        dh.gathered_rows(W.float(), ids), W.float()[ids]
    )  # another dtype: its own buffer
    assert len(dh._SCRATCH) == 2


def test_gathered_rows_work_in_and_out_of_inference_mode():
    """A buffer made under ``torch.inference_mode`` (the loops decide there) is not written from outside it: torch
    refuses that in-place update. Each mode keeps its own buffer, in either order."""
    W = torch.randn(20, 8, generator=torch.Generator().manual_seed(1))
    ids = torch.tensor([[2, 19], [0, 5]])
    for order in ((True, False, True), (False, True, False)):
        dh._SCRATCH.clear()
        for inference in order:
            with torch.inference_mode(inference):
                assert torch.equal(dh.gathered_rows(W, ids), W[ids])
        assert len(dh._SCRATCH) == 2


def test_round_masks_from_one_buffer_are_each_rows_dropout_masks():
    """The verify round draws each row's uniforms into one buffer and compares them at once: the same masks as
    ``dropout_masks`` row by row from the same generators (one ``torch.rand((N, K, d))`` each), cut to P positions,
    and the generators end in the same state."""
    B, N, K, d, P, p = 3, 6, 5, 16, 4, 0.3
    hidden = torch.randn(B, N, d, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    gens = [torch.Generator().manual_seed(10 + b) for b in range(B)]
    got = dropped_inputs(hidden, gens, K, p, P)
    ref_gens = [torch.Generator().manual_seed(10 + b) for b in range(B)]
    keep = torch.stack([dropout_masks(N, K, d, p, g, "cpu")[:P] for g in ref_gens])
    want = dropped_hidden(hidden[:, :P].reshape(B * P, d), keep.reshape(B * P, K, d), p)
    assert got.shape == (B * P, K, d) and torch.equal(got, want)
    for g, r in zip(gens, ref_gens):
        assert torch.equal(g.get_state(), r.get_state())
