"""runners.models.attention: the CPU GQA attention gives transformers' sdpa numbers bit for bit, with masks
(padding, holes, rollback) and without, on random tensors and through a whole model (the tiny pair's target
has 4 query heads per key/value head)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from runners.backends.batch_kv import BatchKV
from runners.backends.kv_state import KVState
from runners.models.attention import NAME, sdpa_cpu_gqa
from tests.helpers.tiny import load_tiny_pair


class _Module(torch.nn.Module):
    num_key_value_groups = 6
    is_causal = True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "B, q, S, D", [(1, 1, 40, 64), (3, 1, 70, 64), (4, 5, 90, 64), (2, 9, 33, 64), (8, 9, 300, 128)]
)
def test_masked_gqa_equals_repeated_heads(dtype, B, q, S, D):
    """D = 128 and 12 query heads over 2 key/value heads: the embedded Qwen2.5-1.5B target's attention shape."""
    g = torch.Generator().manual_seed(B * 100 + q)
    Q = torch.randn(B, 12, q, D, generator=g).to(dtype)
    K = torch.randn(B, 2, S, D, generator=g).to(dtype)
    V = torch.randn(B, 2, S, D, generator=g).to(dtype)
    mask = torch.rand(B, 1, q, S, generator=g) > 0.3
    mask[..., -1] = True  # every query sees something
    out, _ = sdpa_cpu_gqa(_Module(), Q, K, V, mask, scaling=0.125)
    rep = lambda t: t.repeat_interleave(6, dim=1)  # noqa: E731  (transformers' repeat_kv)
    ref = F.scaled_dot_product_attention(Q, rep(K), rep(V), attn_mask=mask, scale=0.125)
    assert out.shape == (B, q, 12, D)
    assert torch.equal(out, ref.transpose(1, 2).contiguous())


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


def test_a_batched_model_forward_is_unchanged(pair):
    """Padded rows and a rollback hole (masks) through the tiny target: hidden states equal under both attentions."""
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
    assert all(torch.equal(a, b) for a, b in zip(outs["sdpa"], outs[NAME]))


def test_loaded_cpu_models_use_it(pair):
    assert pair.target.config._attn_implementation == NAME
