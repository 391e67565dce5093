"""``static_ensemble`` against HF transformers' own ``assistant_ensemble_weight`` (the installed 5.19).

T = 0: our HF loop and transformers' assisted generation produce the same tokens on the tiny pair, for the same
prompts, weights and L. The rounds are aligned: our loop emits the first token from the prefill (the target's
argmax) and drafts after it, so transformers is given the prompt plus that token; it drafts exactly L candidates
per round (``num_assistant_tokens_schedule="constant"``, ``assistant_confidence_threshold=0``) and generates L + 1
tokens beyond our cap, so no round of the compared span is shortened by its length limit.

T > 0: on the same fixed logits and drafts, our rule and transformers' ``_speculative_sampling`` give the same
distribution of the accepted count and of the first emitted token (two-sample chi-square), and both match the
acceptance probability ``sum_x min(q, w p + (1 - w) q)`` at the first position.
"""

from __future__ import annotations

import copy

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.base import VerifyInputs
from criteria.dropout_heads import HeadSpec
from criteria.ensemble import StaticEnsemble
from criteria.registry import CRITERIA
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.output import end_of_sequence_ids
from runners.datasets.base import Sample
from runners.models.loader import load_pair
from tests.helpers.verify_inputs import chi2_two_sample, gen

PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7?",
    "Write a short answer. Step by step, we add the numbers.",
]
CAP = 40


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    spec = lambda role: {"name": role, "local_path": str(tiny_pair_dir / role), "order": ["local"]}  # noqa: E731
    return load_pair({"name": "tiny", "target": spec("target"), "draft": spec("draft")})


@torch.inference_mode()
def transformers_assisted(pair, prompt_ids, L, weight, max_new_tokens, eos):
    """transformers' greedy assisted generation with ``assistant_ensemble_weight``; the new ids, cut at EOS."""
    from transformers import GenerationConfig

    draft = pair.draft
    saved = copy.deepcopy(draft.generation_config)
    draft.generation_config.num_assistant_tokens = L
    draft.generation_config.num_assistant_tokens_schedule = "constant"
    draft.generation_config.assistant_confidence_threshold = 0.0
    x = torch.tensor([prompt_ids], dtype=torch.long, device=pair.target.device)
    cfg = GenerationConfig(
        do_sample=False,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
        eos_token_id=sorted(eos),
        pad_token_id=sorted(eos)[0],
        assistant_ensemble_weight=weight,
    )
    try:
        out = pair.target.generate(
            x, generation_config=cfg, assistant_model=draft, attention_mask=torch.ones_like(x)
        )
    finally:
        draft.generation_config = saved
    new = out[0, x.shape[1] :].tolist()
    cut = next((i for i, t in enumerate(new) if t in eos), None)
    return new if cut is None else new[:cut]


def ours(pair, prompt, rule, L, n):
    be = HFLoopBackend(pair, prefix_caching=False)
    sample = Sample(f"t/{abs(hash(prompt)) % 1000}", [{"role": "user", "content": prompt}])
    res = be.generate_one(
        sample, DecodingConfig(num_speculative_tokens=L, max_new_tokens=n), rule, HeadSpec()
    )
    return be.encode(sample), res


@pytest.mark.parametrize("L", [2, 4])
def test_greedy_token_identical_to_transformers_assisted_generation(pair, L):
    eos = end_of_sequence_ids(pair.tokenizer, pair.target.generation_config.eos_token_id)
    differs_from_ar = 0
    for weight in (0.3, 0.6):
        for prompt in PROMPTS:
            prompt_ids, res = ours(pair, prompt, StaticEnsemble(weight), L, CAP)
            got = [int(t) for t in res.output_token_ids]
            ref = transformers_assisted(pair, prompt_ids + got[:1], L, weight, CAP - 1 + L + 1, eos)
            assert got[1:] == ref[: CAP - 1], (weight, prompt)
            _, ar = ours(pair, prompt, CRITERIA.get("autoregressive")(), 0, CAP)
            differs_from_ar += got != [int(t) for t in ar.output_token_ids]
    assert differs_from_ar > 0, "the ensemble never changed an output: the comparison has no power"


def test_sampling_acceptance_distribution_equals_transformers():
    from transformers.generation.utils import _speculative_sampling

    N, V, L, w = 20000, 8, 3, 0.4
    g = gen(31)
    target_logits = 1.5 * torch.randn(L + 1, V, generator=g)
    draft_logits = 1.5 * torch.randn(L, V, generator=g)
    q = torch.softmax(draft_logits, -1)
    drafts = torch.stack(
        [torch.multinomial(q[i], N, replacement=True, generator=g) for i in range(L)], 1
    )

    torch.manual_seed(32)  # transformers draws from the global RNG
    prefix = torch.zeros(1, 5, dtype=torch.long)
    t_acc, t_first = torch.zeros(N, dtype=torch.long), torch.zeros(N, dtype=torch.long)
    for i in range(N):
        cand = torch.cat([prefix, drafts[i : i + 1]], dim=1)
        valid, n = _speculative_sampling(cand, draft_logits[None], L, target_logits[None], w)
        t_acc[i], t_first[i] = int(n), int(valid[0, 0])

    inputs = VerifyInputs(
        draft_token_ids=drafts,
        target_logits=target_logits.expand(N, L + 1, V).clone(),
        draft_probs=q.expand(N, L, V).clone(),
        temperature=1.0,
        generator=gen(33),
    )
    out = StaticEnsemble(w)(inputs)
    o_first = torch.where(out.num_accepted >= 1, drafts[:, 0], out.next_token_ids)

    crit = {L: 16.266, V - 1: 24.322}  # scipy.stats.chi2.ppf(0.999, df) for df = 3, 7
    acc_a, acc_b = (
        torch.bincount(t_acc, minlength=L + 1),
        torch.bincount(out.num_accepted, minlength=L + 1),
    )
    assert chi2_two_sample(acc_a, acc_b) < crit[L], (acc_a.tolist(), acc_b.tolist())
    first_a, first_b = torch.bincount(t_first, minlength=V), torch.bincount(o_first, minlength=V)
    assert chi2_two_sample(first_a, first_b) < crit[V - 1], (first_a.tolist(), first_b.tolist())
    p = torch.softmax(target_logits, -1)
    alpha = torch.minimum(q[0], w * p[0] + (1 - w) * q[0]).sum().item()
    se = (alpha * (1 - alpha) / N) ** 0.5
    for rate in (
        (t_acc >= 1).double().mean().item(),
        (out.num_accepted >= 1).double().mean().item(),
    ):
        assert abs(rate - alpha) < 5 * se
    # power: the same two-sample test tells weight 0.4 from weight 0.7
    other = StaticEnsemble(0.7)(inputs)
    assert chi2_two_sample(acc_a, torch.bincount(other.num_accepted, minlength=L + 1)) > crit[L]
