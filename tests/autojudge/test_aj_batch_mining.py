"""Batched Auto-Judge mining on the tiny pair (float32): several prompts' searches decoded together find the
mismatches, labels, responses and outcomes of the sequential search, with features equal up to float noise;
``method.judge.mining.batch_size`` is checked before anything loads and is not part of the mining key."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from runners.autojudge.artefact import mining_identity, mining_key
from runners.autojudge.batch_mining import guess, mine_batched
from runners.autojudge.mine import check_mining, mine
from runners.autojudge.mining import Tracked, mine_prompt, search
from runners.backends.hf_loop import HFLoopBackend
from runners.backends.kv_state import KVState
from runners.config.errors import ConfigError
from runners.datasets.base import Sample
from tests.helpers.tiny import load_tiny_pair

PROMPTS = [
    "Janet has 3 apples and buys 5 more.",
    "def add(a, b):",
    "Question: what is 12 times 7? Answer step by step, please.",
    "Step by step, we add the numbers",
    "A B C D. The answer is",
    "x",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
]
CAP = 24
NO_ANSWER = "[invalid]"


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


@pytest.fixture(scope="module")
def prompts(pair):
    enc = HFLoopBackend(pair).encode
    return [enc(Sample(f"p{i}", [{"role": "user", "content": t}])) for i, t in enumerate(PROMPTS)]


def stops_at_multiple_of_11(ids):
    """Ends a continuation at varying lengths, so rows leave and join the batch at different steps."""
    return bool(ids) and ids[-1] % 11 == 0


def never(ids):
    return False


def outcome_of(i):
    """Prompt 5 has no answer (skipped); the others' outcome is the first two tokens and the parity of the token
    sum: a mismatch at position 0 or 1 is important, one later important about half the time (and when not, its
    alternative becomes the current response)."""
    return (lambda r: NO_ANSWER) if i == 5 else (lambda r: (tuple(r[:2]), sum(r) % 2))


def kwargs(i, max_mismatches):
    return dict(
        outcome=outcome_of(i),
        max_mismatches=max_mismatches,
        skip=lambda o: o == NO_ANSWER,
    )


def sequential(pair, prompts, finished, max_mismatches):
    return [
        mine_prompt(
            Tracked(KVState(pair.target)),
            Tracked(KVState(pair.draft)),
            p,
            max_new_tokens=CAP,
            finished=finished,
            **kwargs(i, max_mismatches),
        )
        for i, p in enumerate(prompts)
    ]


def batched(pair, prompts, finished, max_mismatches, batch_size, lookahead=0, stats=None):
    searches = (
        search(Tracked(KVState(pair.draft)), p, **kwargs(i, max_mismatches))
        for i, p in enumerate(prompts)
    )
    out = list(
        mine_batched(
            pair.target,
            searches,
            batch_size=batch_size,
            max_new_tokens=CAP,
            finished=finished,
            lookahead=lookahead,
            stats=stats,
        )
    )
    assert sorted(i for i, _, _ in out) == list(range(len(prompts)))
    assert all(s > 0 for _, _, s in out)
    return [item for _, item in sorted((i, item) for i, item, _ in out)]


@pytest.mark.parametrize(
    "finished, max_mismatches, batch_size, lookahead",
    [
        (never, None, 3, 0),
        (stops_at_multiple_of_11, None, 2, 0),
        (stops_at_multiple_of_11, 3, 8, 0),
        (never, None, 1, 6),
        (never, None, 3, 4),
        (stops_at_multiple_of_11, 3, 8, 30),
    ],
)
def test_batched_mining_equals_sequential(
    pair, prompts, finished, max_mismatches, batch_size, lookahead
):
    seq = sequential(pair, prompts, finished, max_mismatches)
    stats = {}
    bat = batched(pair, prompts, finished, max_mismatches, batch_size, lookahead, stats)
    # with lookahead some greedy tokens come from confirmed guesses (the path is exercised)
    assert stats["kept"] > 0
    if lookahead:
        assert 0 < stats["accepted"] <= stats["guessed"]
    else:
        assert stats["guessed"] == 0
    kinds = set()
    for a, b in zip(seq, bat):
        assert (b.response, b.outcome, b.truncated, b.skipped) == (
            a.response,
            a.outcome,
            a.truncated,
            a.skipped,
        )
        assert [
            (x.pos, x.important, x.target_token, x.draft_token, x.alt_outcome) for x in b.mismatches
        ] == [
            (x.pos, x.important, x.target_token, x.draft_token, x.alt_outcome) for x in a.mismatches
        ]
        for x, y in zip(a.mismatches, b.mismatches):
            assert y.dd.dtype == y.dt.dtype == torch.float32
            assert torch.allclose(x.dd, y.dd, atol=1e-5), (x.pos, (x.dd - y.dd).abs().max())
            assert torch.allclose(x.dt, y.dt, atol=1e-4), (x.pos, (x.dt - y.dt).abs().max())
            kinds.add(y.important)
    # the case covers what batching must get right: both labels (an unimportant alternative replaces the
    # response, an important one rolls the row back), a skipped prompt, and (capped) truncated ones
    assert kinds == {True, False}
    assert sum(x.skipped for x in bat) == 1
    assert sum(len(x.mismatches) for x in bat) >= 10
    if max_mismatches is not None:
        assert any(x.truncated for x in bat)


def test_guess_follows_the_reference_after_a_substitution_and_realigns_by_ngram():
    n = 2
    ref = [9, 9, 1, 2, 3, 4, 5, 6, 7, 8]
    # a substituted token at position 4 (ref holds 3): the reference's tokens after position 4
    assert guess([9, 9, 1, 2, 30], n, [ref], 3) == [4, 5, 6]
    # the row follows the reference: its next tokens
    assert guess([9, 9, 1, 2, 3, 4], n, [ref], 10) == [5, 6, 7, 8]
    # diverged (an inserted token), then back on the reference's 3-gram [4, 5, 6] at another position
    assert guess([9, 9, 1, 2, 3, 77, 4, 5, 6], n, [ref], 2) == [7, 8]
    # no n-gram in common, or nothing to guess
    assert guess([9, 9, 1, 2, 3, 77, 78, 79], n, [ref], 4) == []
    # shorter n-grams, and the row's own tokens (prompt and response so far) as lookup text
    assert guess([9, 9, 1, 2, 3, 77, 78, 5], n, [ref], 2) == [6, 7]
    assert guess([5, 6, 7, 8, 5], 1, [], 2) == [6, 7]
    assert guess([9, 9, 1, 2, 30], n, [ref], 0) == []
    assert guess([9, 9, 1, 2, 30], n, [], 4) == []
    # the latest reference wins a tie; the nearest position wins over the latest reference
    old, new = [0, 0, 5, 6, 7, 1, 1], [0, 0, 5, 6, 7, 2, 2]
    assert guess([0, 0, 8, 5, 6, 7], n, [old, new], 2) == [2, 2]
    far = [0, 0, 9, 9, 9, 9, 5, 6, 7, 3]
    assert guess([0, 0, 8, 5, 6, 7], n, [old, far], 1) == [1]


def test_bad_lookahead_is_refused():
    for bad in (-1, 65, 2.5, "4", True, None):
        judge = {**JUDGE, "mining": {**JUDGE["mining"], "lookahead": bad}}
        with pytest.raises(
            ConfigError,
            match=r"method\.judge\.mining\.lookahead=.* allowed: an integer in \[0, 64\]",
        ):
            check_mining(judge)


@pytest.mark.parametrize(
    "key, bad, allowed",
    [
        ("limit", -1, "an integer >= 1 or null"),
        ("limit", 0, "an integer >= 1 or null"),
        ("offset", -1, "an integer >= 0"),
        ("offset", None, "an integer >= 0"),
        ("max_new_tokens", 0, "an integer >= 1 or null"),
        ("max_mismatches", 2.5, "an integer >= 1 or null"),
    ],
)
def test_bad_mining_sizes_are_refused(key, bad, allowed):
    """The miner's sizes are checked with the rest (before Hydra's run, by runners.autojudge.cli); null where a
    size may be unbounded passes."""
    with pytest.raises(
        ConfigError, match=rf"method\.judge\.mining\.{key}={bad!r} is invalid; allowed: {allowed}"
    ):
        check_mining({**JUDGE, "mining": {**JUDGE["mining"], key: bad}})
    if "null" in allowed:
        assert check_mining({**JUDGE, "mining": {**JUDGE["mining"], key: None}})[key] is None


def test_batch_size_one_row_is_the_sequential_search(pair, prompts):
    """batch_size=1 through the batched driver: one row, no padding; the target hidden equals the sequential one."""
    seq = sequential(pair, prompts[:3], never, None)
    bat = batched(pair, prompts[:3], never, None, 1)
    for a, b in zip(seq, bat):
        assert [x.pos for x in a.mismatches] == [x.pos for x in b.mismatches]
        assert all(torch.equal(x.dd, y.dd) for x, y in zip(a.mismatches, b.mismatches))
        assert all(
            torch.allclose(x.dt, y.dt, atol=1e-5) for x, y in zip(a.mismatches, b.mismatches)
        )


JUDGE = {
    "mining": {
        "dataset": "gsm8k",
        "split": "test",
        "offset": 1000,
        "limit": 2,
        "source_order": ["local", "pinned"],
        "max_new_tokens": 16,
        "max_mismatches": 2,
        "label": "answer",
        "features": "dd_dt",
    },
    "train": {},
}


def tiny_pair_cfg(pair_dir):
    """The tiny pair as a ``pair`` config (local paths only, float32)."""
    spec = lambda role: {"name": role, "local_path": str(pair_dir / role), "order": ["local"]}  # noqa: E731
    return {"name": "tiny", "dtype": "float32", "target": spec("target"), "draft": spec("draft")}


@pytest.mark.parametrize("bad", [0, -2, 2.5, "4", True, None])
def test_bad_batch_size_is_refused_before_any_model_loads(bad, tmp_path, monkeypatch):
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path))
    judge = {**JUDGE, "mining": {**JUDGE["mining"], "batch_size": bad}}
    with pytest.raises(
        ConfigError, match=r"method\.judge\.mining\.batch_size=.* allowed: an integer >= 1"
    ):
        check_mining(judge)
    # a pair that cannot load: the field is refused first
    nowhere = {"name": "nowhere", "target": {"name": "t", "local_path": str(tmp_path / "none")}}
    with pytest.raises(ConfigError, match=r"method\.judge\.mining\.batch_size"):
        mine({**nowhere, "draft": nowhere["target"]}, judge)
    assert not (tmp_path / "autojudge").exists()  # no record opened


def test_batch_size_is_not_part_of_the_mining_key():
    pair_cfg = {"name": "tiny", "target": {"name": "t"}, "draft": {"name": "d"}, "dtype": "float32"}
    keys = {
        mining_key(pair_cfg, {**JUDGE, "mining": {**JUDGE["mining"], **extra}})
        for extra in ({}, {"batch_size": 1}, {"batch_size": 8}, {"lookahead": 8})
    }
    assert len(keys) == 1
    assert (
        "batch_size"
        not in mining_identity(pair_cfg, {**JUDGE, "mining": {**JUDGE["mining"], "batch_size": 8}})[
            "mining"
        ]
    )
    other = mining_key(pair_cfg, {**JUDGE, "mining": {**JUDGE["mining"], "max_mismatches": 3}})
    assert other not in keys  # a field that changes the labels still changes the key


def test_mined_records_do_not_depend_on_batch_size(tiny_pair_dir, tmp_path, monkeypatch):
    """``mine`` at batch_size 1 and 3 on 4 GSM8K prompts: the same records, in the prompts' order once sorted by
    their ``index`` (as training reads them)."""
    from runners.autojudge.mine import decode_rows
    from runners.autojudge.train import in_dataset_order

    pair_cfg = tiny_pair_cfg(tiny_pair_dir)
    # the random tiny target never answers GSM8K: label=correctness (pass/fail) keeps every prompt
    mining = {**JUDGE["mining"], "limit": 4, "label": "correctness", "max_mismatches": 3}
    records = {}
    for bs in (1, 3):
        monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / f"b{bs}"))
        summary = mine(
            pair_cfg, {**JUDGE, "mining": {**mining, "batch_size": bs}}, log=lambda *_: None
        )
        assert summary["complete"] and summary["num_samples"] == 4
        (path,) = (tmp_path / f"b{bs}" / "autojudge" / "mining").glob("*/samples.jsonl")
        records[bs] = [json.loads(line) for line in path.read_text().splitlines()]
    one, three = records[1], in_dataset_order(records[3])  # batched: written as each search ends
    assert [r["index"] for r in one] == [0, 1, 2, 3]  # one at a time: written in data-set order
    assert [r["sample_id"] for r in three] == [r["sample_id"] for r in one]
    assert sum(len(r["mismatches"]) for r in one) >= 4
    for a, b in zip(one, three):
        for key in (
            "response_token_ids",
            "outcome",
            "correct",
            "mismatches",
            "truncated",
            "skipped",
        ):
            assert a[key] == b[key], key
        fa, fb = a["features"], b["features"]
        for name, width in (("dd", fa["d_draft"]), ("dt", fa["d_target"])):
            np.testing.assert_allclose(
                decode_rows(fb[name], width), decode_rows(fa[name], width), atol=1e-4
            )


def test_training_reads_records_in_data_set_order():
    """Records written out of order (batched mining) are read by their ``index``; records without one (written in
    order before it existed) keep their place, before the indexed ones that follow them."""
    from runners.autojudge.train import in_dataset_order

    recs = [
        {"sample_id": "c", "index": 2},
        {"sample_id": "a", "index": 0},
        {"sample_id": "b", "index": 1},
    ]
    assert [r["sample_id"] for r in in_dataset_order(recs)] == ["a", "b", "c"]
    old = [
        {"sample_id": "a"},
        {"sample_id": "b"},
        {"sample_id": "d", "index": 3},
        {"sample_id": "c", "index": 2},
    ]
    assert [r["sample_id"] for r in in_dataset_order(old)] == ["a", "b", "c", "d"]


def test_a_larger_limit_extends_a_smaller_mining_set(tiny_pair_dir, tmp_path, monkeypatch):
    """Mining 2 prompts, then 4 with otherwise the same settings: the second run copies the first 2 prompts'
    records (logged) and mines only the other 2; the records equal a 4-prompt run from scratch."""
    pair_cfg = tiny_pair_cfg(tiny_pair_dir)
    mining = {**JUDGE["mining"], "label": "correctness", "max_mismatches": 2, "batch_size": 2}
    logs = []
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "grow"))
    mine(pair_cfg, {**JUDGE, "mining": {**mining, "limit": 2}}, log=logs.append)
    grown = mine(pair_cfg, {**JUDGE, "mining": {**mining, "limit": 4}}, log=logs.append)
    assert any("2 prompts reused from mining" in line for line in logs)
    assert any("2 done, 2 to go" in line for line in logs)
    assert grown["complete"] and grown["num_samples"] == 4
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "scratch"))
    scratch = mine(pair_cfg, {**JUDGE, "mining": {**mining, "limit": 4}}, log=lambda *_: None)
    assert scratch["mining_key"] == grown["mining_key"]

    def lines(root):
        path = root / "autojudge" / "mining" / grown["mining_key"] / "samples.jsonl"
        recs = [json.loads(x) for x in path.read_text().splitlines()]
        return {r["sample_id"]: (r["mismatches"], r["response_token_ids"]) for r in recs}

    assert lines(tmp_path / "grow") == lines(tmp_path / "scratch")
    # another setting (max_mismatches) is not reused
    logs.clear()
    monkeypatch.setenv("DROPMATCH_RESULTS", str(tmp_path / "grow"))
    mine(
        pair_cfg, {**JUDGE, "mining": {**mining, "limit": 2, "max_mismatches": 1}}, log=logs.append
    )
    assert not any("reused" in line for line in logs)
