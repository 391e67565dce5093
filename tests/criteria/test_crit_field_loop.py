"""The field's rules through the HF loop on the tiny pair (greedy): each rule's lossless setting decodes exactly the
target's greedy output, its permissive setting accepts more drafts and changes some output, and the counters count
only output tokens."""

from __future__ import annotations

import pytest

import criteria.rules  # noqa: F401
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.datasets.base import Sample
from runners.models.loader import load_pair

PROMPTS = ["Janet has 3 apples and buys 5 more. How many apples?", "def add(a, b):"]
L, CAP = 4, 40

LOSSLESS = {  # settings equal to greedy SD at T = 0
    "fly": {"entropy_threshold": 5.0},
    "fsd": {"threshold": 0.0},
    "relaxed_topk": {"top_k": 1, "delta": 0.0},
    "prob_threshold": {"threshold_single": 1.0},
    "static_ensemble": {"weight": 1.0},
    "block_verify": {},
}
PERMISSIVE = {
    "fly": {"entropy_threshold": 0.0, "window_size": 1},
    "fsd": {"threshold": 0.7, "divergence": "js"},
    "typical": {"posterior_threshold": 0.0},
    "relaxed_topk": {"top_k": 8, "delta": 0.5},
    "prob_threshold": {"threshold_single": 0.0},
    "static_ensemble": {"weight": 0.0},
    "bild": {"fallback_threshold": 0.0, "rollback_threshold": 50.0},
}


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    spec = lambda role: {"name": role, "local_path": str(tiny_pair_dir / role), "order": ["local"]}  # noqa: E731
    return load_pair({"name": "tiny", "target": spec("target"), "draft": spec("draft")})


def decode(pair, rule, n_draft):
    be = HFLoopBackend(pair, prefix_caching=False)
    out = []
    for i, prompt in enumerate(PROMPTS):
        s = Sample(f"loop/{i}", [{"role": "user", "content": prompt}])
        r = be.generate_one(
            s, DecodingConfig(num_speculative_tokens=n_draft, max_new_tokens=CAP), rule, HeadSpec()
        )
        c = r.counters
        if n_draft:
            assert (
                c.num_drafts + c.num_accepted_tokens == len(r.output_token_ids) - 1 + r.eos_removed
            )
        out.append(([int(t) for t in r.output_token_ids], c.num_accepted_tokens))
    return out


@pytest.fixture(scope="module")
def reference(pair):
    ar = [ids for ids, _ in decode(pair, CRITERIA.get("autoregressive")(), 0)]
    sd = decode(pair, CRITERIA.get("greedy_match")(), L)
    assert [ids for ids, _ in sd] == ar
    return ar, sum(a for _, a in sd)


@pytest.mark.parametrize("name", sorted(LOSSLESS))
def test_lossless_setting_decodes_the_greedy_output(pair, reference, name):
    ar, _ = reference
    assert [ids for ids, _ in decode(pair, CRITERIA.get(name)(**LOSSLESS[name]), L)] == ar


@pytest.mark.parametrize("name", sorted(PERMISSIVE))
def test_permissive_setting_accepts_more_and_changes_the_output(pair, reference, name):
    ar, sd_accepted = reference
    got = decode(pair, CRITERIA.get(name)(**PERMISSIVE[name]), L)
    assert sum(a for _, a in got) > sd_accepted
    assert [ids for ids, _ in got] != ar
