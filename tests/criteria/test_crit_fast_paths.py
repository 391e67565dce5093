"""The fast paths of the DropMatch decision make the same decisions as the full computation (issue 13 Targets)."""

from __future__ import annotations

import pytest
import torch

from criteria.base import VerifyInputs
from criteria.dropmatch_base import js_statistics
from criteria.dropmatch_js import DropMatchJS
from criteria.dropmatch_naive import DropMatchNaive
from criteria.dropout_heads import dropout_head_logits


def lm_round(seed: int, B: int = 16, L: int = 5, K: int = 5, p_drop: float = 0.3, V: int = 3000, d: int = 32,
             T: float = 0.0, agree: float = 0.8) -> VerifyInputs:
    """A round shaped like a real one: sharp target logits, drafts mostly the target's token, draft probs
    close to the target's."""
    g = torch.Generator().manual_seed(seed)
    hidden, W = torch.randn(B * (L + 1), d, generator=g), torch.randn(V, d, generator=g)
    out = dropout_head_logits(hidden, W, num_heads=K, p_drop=p_drop, generator=torch.Generator().manual_seed(seed + 1))
    target = out[:, 0].reshape(B, L + 1, V)
    heads = out[:, 1:].reshape(B, L + 1, K, V)
    draft_logits = target[:, :L] + 1.5 * torch.randn(B, L, V, generator=g)
    drafts = torch.where(torch.rand(B, L, generator=g) < agree, target[:, :L].argmax(-1), draft_logits.argmax(-1))
    gen = torch.Generator().manual_seed(seed + 2) if T > 0 else None
    return VerifyInputs(drafts, target, torch.softmax(draft_logits, -1), heads, temperature=T, generator=gen)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("p_drop", [0.1, 0.3, 0.5])
def test_lazy_js_decides_as_the_full_test(seed, p_drop):
    """Without a trace the JS test runs only where Eq. 7 does not already accept, up to the first rejection;
    the round's decision equals the one computed with every position's JS."""
    inputs = lm_round(seed, p_drop=p_drop)
    rule = DropMatchJS()
    fast = rule(inputs)
    full = rule(inputs, trace=True)
    assert torch.equal(fast.accept_mask, full.accept_mask)
    assert torch.equal(fast.next_token_ids, full.next_token_ids)
    # the rounds exercise both branches of Algorithm 1
    assert bool(full.trace["accepted_by_majority"].any()) or bool(full.trace["accepted_by_js"].any())


def test_lazy_js_values_are_the_full_values():
    """The per-position JS computed on a slice equals the full computation bitwise (same per-row operations)."""
    inputs = lm_round(3, B=8)
    L = inputs.draft_token_ids.shape[1]
    jd, jh = js_statistics(inputs.head_logits[:, :L], inputs.draft_probs, 0.0)
    for t in range(L):
        rows = torch.tensor([1, 4, 6])
        d1, h1 = js_statistics(inputs.head_logits[rows, t : t + 1], inputs.draft_probs[rows, t : t + 1], 0.0)
        assert torch.equal(d1[:, 0], jd[rows, t]) and torch.equal(h1[:, 0], jh[rows, t])


@pytest.mark.parametrize("T", [0.0, 1.0])
@pytest.mark.parametrize("rule", [DropMatchJS, DropMatchNaive])
def test_sampling_rounds_unchanged_by_the_fast_path(rule, T):
    """At T > 0 the random draws (head tokens, emitted token) are the same with and without a trace."""
    a = rule()(lm_round(5, T=T))
    b = rule()(lm_round(5, T=T), trace=True)
    assert torch.equal(a.accept_mask, b.accept_mask) and torch.equal(a.next_token_ids, b.next_token_ids)
