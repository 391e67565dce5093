"""runners.backends.cpu_attention: the grouped matmuls are as accurate as transformers' sdpa (error against a float64
reference no larger than SDPA's own), with masks (padding, holes, rollback, a query that sees nothing) and without;
prefills keep SDPA bit for bit; a whole model gives sdpa's hidden states up to float32 rounding (the tiny pair's
target has 4 query heads per key/value head)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runners.backends.batch_kv import BatchKV
from runners.backends.cpu_attention import GROUPED_MAX_QUERY, NAME, cpu_gqa, use_cpu_gqa
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.kv_state import KVState
from tests.helpers.tiny import load_tiny_pair


class _Module(torch.nn.Module):
    num_key_value_groups = 6
    is_causal = True


def _inputs(B, q, S, D, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    Q = 2 * torch.randn(B, 12, q, D, generator=g, dtype=torch.float64)
    K = 2 * torch.randn(B, 2, S, D, generator=g, dtype=torch.float64)
    V = torch.randn(B, 2, S, D, generator=g, dtype=torch.float64)
    mask = torch.rand(B, 1, q, S, generator=g) > 0.3
    mask[..., -1] = True  # every query sees something
    rep = lambda t: t.repeat_interleave(6, dim=1)  # noqa: E731  (transformers' repeat_kv)
    ref = F.scaled_dot_product_attention(Q, rep(K), rep(V), attn_mask=mask, scale=D**-0.5)
    return Q.to(dtype), K.to(dtype), V.to(dtype), mask, ref.transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "B, q, S, D",
    [(1, 1, 40, 64), (3, 1, 70, 64), (4, 6, 90, 64), (2, 11, 33, 64), (8, 1, 300, 128)],
)
def test_grouped_is_as_accurate_as_sdpa(dtype, B, q, S, D):
    """D = 128 and 12 query heads over 2 key/value heads: the embedded Qwen2.5-1.5B target's attention shape.
    float32: both within 16 units in the last place of the output's magnitude (measured: up to 14). bf16, where
    the inputs' and the output's rounding dominate: the largest error at most one unit in the last place above
    SDPA's, the mean error at most 10% above (measured: 1-6%, from the probabilities rounded to bf16 before the
    second matmul, as the CPU flash kernel does)."""
    Q, K, V, mask, ref = _inputs(B, q, S, D, B * 100 + q, dtype)
    out, _ = cpu_gqa(_Module(), Q, K, V, mask, scaling=D**-0.5)
    sdpa = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=D**-0.5, enable_gqa=True)
    assert out.shape == (B, q, 12, D) and out.dtype == dtype
    err, err_sdpa = ((o.double() - ref).abs() for o in (out, sdpa.transpose(1, 2)))
    ulp = float(ref.abs().max()) * torch.finfo(dtype).eps
    if dtype == torch.float32:
        assert float(err.max()) <= 16 * ulp and float(err_sdpa.max()) <= 16 * ulp
    else:
        assert float(err.max()) <= float(err_sdpa.max()) + ulp
        assert float(err.mean()) <= 1.1 * float(err_sdpa.mean())


def test_a_query_that_sees_nothing_gets_zeros_as_in_sdpa():
    Q, K, V, mask, _ = _inputs(2, 3, 20, 64, 7, torch.float32)
    mask[1, 0, 2] = False
    out, _ = cpu_gqa(_Module(), Q, K, V, mask, scaling=0.125)
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=0.125, enable_gqa=True)
    assert not out.isnan().any()
    assert torch.equal(out[1, 2], torch.zeros_like(out[1, 2]))
    assert torch.allclose(out, ref.transpose(1, 2), atol=1e-5)


def test_an_additive_mask_equals_the_bool_one():
    Q, K, V, mask, _ = _inputs(2, 4, 30, 64, 3, torch.float32)
    additive = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    a, _ = cpu_gqa(_Module(), Q, K, V, mask, scaling=0.125)
    b, _ = cpu_gqa(_Module(), Q, K, V, additive, scaling=0.125)
    assert torch.allclose(a, b, atol=1e-6)


def test_prefills_keep_sdpa_bit_for_bit():
    """More new tokens than GROUPED_MAX_QUERY (masked), or a causal prefill with no mask: SDPA as before."""
    q = GROUPED_MAX_QUERY + 1
    Q, K, V, mask, _ = _inputs(2, q, q + 5, 64, 11, torch.bfloat16)
    out, _ = cpu_gqa(_Module(), Q, K, V, mask, scaling=0.125)
    ref = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask, scale=0.125, enable_gqa=True)
    assert torch.equal(out, ref.transpose(1, 2).contiguous())
    Qc, Kc, Vc = Q[..., :5, :], K[..., :5, :], V[..., :5, :]
    out, _ = cpu_gqa(_Module(), Qc, Kc, Vc, None, scaling=0.125)
    rep = lambda t: t.repeat_interleave(6, dim=1)  # noqa: E731
    ref = F.scaled_dot_product_attention(Qc, rep(Kc), rep(Vc), scale=0.125, is_causal=True)
    assert torch.equal(out, ref.transpose(1, 2).contiguous())


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


def test_a_batched_model_forward_matches_sdpa(pair):
    """Padded rows and a rollback hole (masks) through the tiny float32 target: hidden states equal to sdpa's up
    to float32 rounding, and the next tokens the same."""
    model = pair.target
    assert model.config.num_attention_heads > model.config.num_key_value_heads  # GQA
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [3, 4, 5, 6, 7]]
    outs = {}
    for impl in ("sdpa", NAME):
        model.set_attn_implementation(impl)
        kv = BatchKV(model)
        for p in prompts:
            st = KVState(model)
            st.prefill(p)
            kv.add(st.cache)
        h1 = kv.forward(torch.tensor([[20, 21, 22]] * 3))
        kv.keep_last(3, torch.tensor([1, 3, 0]))  # rollback: holes in two rows
        h2 = kv.forward(torch.tensor([[23, 24]] * 3))
        outs[impl] = (h1, h2)
    model.set_attn_implementation(NAME)
    head = model.get_output_embeddings()
    for a, b in zip(outs["sdpa"], outs[NAME]):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)
        assert torch.equal(head(a).argmax(-1), head(b).argmax(-1))


def test_loaded_cpu_models_and_the_loop_use_it(pair):
    assert pair.target.config._attn_implementation == NAME
    pair.draft.set_attn_implementation("sdpa")
    HFLoopBackend(pair)
    assert pair.draft.config._attn_implementation == NAME
    use_cpu_gqa(None)  # nothing to switch
