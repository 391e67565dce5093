"""Batched draft-verify: B rows decide exactly as each row alone, at float32, on the tiny pair."""

from __future__ import annotations

import pytest
import torch

import criteria.rules  # noqa: F401
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from runners.backends.base import DecodingConfig
from runners.backends.batch_kv import BatchKV
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.kv_state import KVState
from runners.datasets.base import Sample
from tests.helpers.tiny import load_tiny_pair

PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7? Answer step by step, then give the final answer.",
    "A B C D",
    "Write a short answer.",
    "The final answer is",
    "Step by step, we add the numbers and then subtract. What is 3 + 4 - 2?",
]
SAMPLES = [Sample(f"b/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


def run(pair, B, L, crit, heads=HeadSpec(), n=40, **kw):
    be = HFLoopBackend(pair, batch_size=B)
    dec = DecodingConfig(num_speculative_tokens=L, max_new_tokens=n, **kw)
    return {r.sample_id: r for r in be.generate(SAMPLES, dec, CRITERIA.get(crit)(), heads)}


CASES = [
    ("ar", 0, "autoregressive", HeadSpec(), {}),
    ("greedy_sd", 5, "greedy_match", HeadSpec(), {}),
    ("rejection", 3, "rejection", HeadSpec(), {}),
    ("dm_js", 5, "dropmatch_js", HeadSpec(5, 0.3), {}),
    ("dm_naive", 4, "dropmatch_naive", HeadSpec(5, 0.3), {}),
    ("dm_js_T1", 4, "dropmatch_js", HeadSpec(5, 0.3), {"temperature": 1.0}),
    ("dm_js_trace", 5, "dropmatch_js", HeadSpec(5, 0.3), {"trace": True}),  # Tables 2-3 run batched
    (
        "dropout_path",
        0,
        "dropout_path",
        HeadSpec(1, 0.3),
        {"seed_stream": 3},
    ),  # Table 1 / Fig. 3 paths
]


def _same_trace(x, y) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        return x == pytest.approx(y, rel=1e-4, abs=1e-6)
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same_trace(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same_trace(a, b) for a, b in zip(x, y))
    return x == y


@pytest.mark.parametrize("name,L,crit,heads,kw", CASES, ids=[c[0] for c in CASES])
def test_batch_of_four_decides_as_batch_of_one(pair, name, L, crit, heads, kw):
    """B=4 over 7 samples (rows leave and are refilled) gives each sample the ids and counters of B=1."""
    one = run(pair, 1, L, crit, heads, **kw)
    four = run(pair, 4, L, crit, heads, **kw)
    assert set(one) == set(four) == {s.sample_id for s in SAMPLES}
    lengths = set()
    for sid, a in one.items():
        b = four[sid]
        assert b.output_token_ids == a.output_token_ids, (name, sid)
        assert b.accepted_per_round == a.accepted_per_round, (name, sid)
        assert b.counters.to_dict() == a.counters.to_dict(), (name, sid)
        assert _same_trace(b.trace, a.trace), (
            name,
            sid,
        )  # decisions exact; JS/probabilities to batch-shape rounding
        c = b.counters
        assert L == 0 or c.num_drafts + c.num_accepted_tokens == max(
            0, len(b.output_token_ids) - 1 + b.eos_removed
        )
        lengths.add(len(b.output_token_ids))
        assert b.share_s is not None and 0 <= b.share_s <= b.wall_s + 1e-6
        assert a.share_s == pytest.approx(
            a.wall_s, rel=0.05, abs=5e-3
        )  # B = 1: the sample has the batch alone
    if L > 1:  # rows advance at different speeds: per-row acceptance differs
        assert len({tuple(r.accepted_per_round[:3]) for r in four.values()}) > 1


def test_batch_with_stop_strings_and_mixed_caps(pair):
    """Stop strings end rows at different rounds; ids equal B=1's and end at the stop."""
    free = run(pair, 1, 0, "autoregressive")
    text = free["b/0"].output_text
    stop = text[3:5]
    one = run(pair, 1, 5, "greedy_match", stop=[stop])
    three = run(pair, 3, 5, "greedy_match", stop=[stop])
    assert any(r.stop_reason == "stop" for r in one.values())
    for sid in one:
        assert three[sid].output_token_ids == one[sid].output_token_ids
        assert three[sid].stop_reason == one[sid].stop_reason


def test_results_come_as_rows_finish(pair):
    """Each result is yielded when its row finishes: a short cap finishes first even when queued later."""
    be = HFLoopBackend(pair, batch_size=4)
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=30)
    order = [
        r.sample_id for r in be.generate(SAMPLES, dec, CRITERIA.get("greedy_match")(), HeadSpec())
    ]
    assert sorted(order) == sorted(s.sample_id for s in SAMPLES) and len(order) == len(set(order))


def test_batch_kv_holes_and_compaction_match_single_rows(pair):
    """Rows fed together, rolled back by different amounts, compacted: each row's hidden states equal the
    same tokens fed to that row alone."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(5, 300, (n,), generator=g).tolist() for n in (7, 12, 9)]
    batch = BatchKV(pair.target)
    for p in prompts:
        st = KVState(pair.target)
        st.prefill(p)
        batch.add(st.cache)
    seqs = [list(p) for p in prompts]
    for step, keep in enumerate(([3, 1, 4], [0, 4, 2], [4, 4, 1])):
        new = torch.randint(5, 300, (3, 4), generator=g)
        h = batch.forward(new)
        for i in range(3):
            ref = KVState(pair.target).forward(seqs[i] + new[i].tolist())[-4:]
            torch.testing.assert_close(h[i], ref, rtol=1e-4, atol=1e-4)
            seqs[i] += new[i, : keep[i]].tolist()
        batch.keep_last(4, torch.tensor(keep))
        assert batch.lengths() == [len(s) for s in seqs]
        if step == 1:
            assert batch.holes() > 0
            batch.compact()
            assert batch.lengths() == [len(s) for s in seqs]
    batch.compact([0, 2])  # a row leaves
    h = batch.forward(torch.tensor([[11], [12]]))
    for i, tok in ((0, 11), (2, 12)):
        ref = KVState(pair.target).forward(seqs[i] + [tok])[-1]
        torch.testing.assert_close(h[0 if i == 0 else 1, -1], ref, rtol=1e-4, atol=1e-4)


def test_batch_size_validated(pair):
    with pytest.raises(ValueError, match="backend.batch_size"):
        HFLoopBackend(pair, batch_size=0)


def test_time_the_caller_spends_between_results_is_not_counted(pair):
    """A slow consumer (scoring, writing records) does not inflate the other rows' wall_s or share_s, nor take
    its time off a row that finished in the same round (whose result was made before the wait)."""
    import time

    be = HFLoopBackend(pair, batch_size=3)
    dec = DecodingConfig(num_speculative_tokens=3, max_new_tokens=20)
    fast = {
        r.sample_id: r
        for r in be.generate(SAMPLES, dec, CRITERIA.get("greedy_match")(), HeadSpec())
    }
    slow = {}
    for r in be.generate(SAMPLES, dec, CRITERIA.get("greedy_match")(), HeadSpec()):
        slow[r.sample_id] = r
        time.sleep(0.4)
    worst = max(f.wall_s for f in fast.values())
    assert all(s.wall_s < worst + 0.35 for s in slow.values()), [s.wall_s for s in slow.values()]
    assert all(s.wall_s > max(0.0, fast[k].wall_s - 0.2) for k, s in slow.items()), [
        (s.wall_s, fast[k].wall_s) for k, s in slow.items()
    ]
    assert sum(s.share_s for s in slow.values()) < sum(f.share_s for f in fast.values()) + 0.35


def test_rows_finishing_together_keep_their_wall_time(pair):
    """Rows that finish in the same round (AR, one cap): the caller's time on the first result must not come off
    the wall_s of the others, whose results were made at the same instant (it was subtracted: negative wall_s)."""
    import time

    be = HFLoopBackend(pair, batch_size=3)
    dec = DecodingConfig(num_speculative_tokens=0, max_new_tokens=12)
    same = [Sample(f"same/{i}", SAMPLES[0].messages) for i in range(3)]
    got = []
    for r in be.generate(same, dec, CRITERIA.get("autoregressive")(), HeadSpec()):
        got.append(r)
        time.sleep(0.3)
    assert [r.num_output_tokens for r in got] == [12, 12, 12]
    walls = [r.wall_s for r in got]
    assert min(walls) > 0 and max(walls) - min(walls) < 0.15, walls
