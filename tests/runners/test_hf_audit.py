"""The exactness audit in the HF loop (criteria/audit.py), on the tiny pair at float32: the audit moves nothing
the run computes, a sample is audited on the same rounds alone and in a batch, and the counts reach the
record, the run's summary and the footers."""

from __future__ import annotations

import json

import pytest

import criteria.rules  # noqa: F401
from criteria.dropmatch_js import TAIL_LADDER
from criteria.dropout_heads import HeadSpec
from criteria.registry import CRITERIA
from criteria.sparse_heads import rung_name
from runners.backends.base import DecodingConfig
from runners.backends.hf_loop import HFLoopBackend
from runners.datasets.base import Sample
from tests.helpers.cli import run_main
from tests.helpers.tiny import load_tiny_pair

PROMPTS = [
    "Janet has 3 apples and buys 5 more. How many apples?",
    "def add(a, b):",
    "Question: what is 12 times 7? Answer step by step, then give the final answer.",
    "A B C D",
    "Write a short answer.",
    "The final answer is",
]
SAMPLES = [Sample(f"a/{i}", [{"role": "user", "content": p}]) for i, p in enumerate(PROMPTS)]


@pytest.fixture(scope="module")
def pair(tiny_pair_dir):
    return load_tiny_pair(tiny_pair_dir)


def run(pair, heads, B=1, T=0.0, rule="dropmatch_js", n=40):
    be = HFLoopBackend(pair, batch_size=B)
    dec = DecodingConfig(num_speculative_tokens=4, max_new_tokens=n, temperature=T, seed=5)
    return {r.sample_id: r for r in be.generate(SAMPLES, dec, CRITERIA.get(rule)(), heads)}


def _decoded(res):
    return {
        k: (r.output_token_ids, r.accepted_per_round, r.counters.to_dict(), r.stop_reason)
        for k, r in res.items()
    }


@pytest.mark.parametrize("T", [0.0, 1.0])
def test_audit_leaves_the_outputs_unchanged(pair, T):
    """audit_share 0 vs 0.5 (sparse both): the same tokens, rounds and counters at T = 0 and T = 1 (at T > 0 any
    draw taken from a sample's generator would change its samples), and about half the rounds audited."""
    plain = run(pair, HeadSpec(5, 0.3, top_n=8), B=3, T=T)
    audited = run(pair, HeadSpec(5, 0.3, top_n=8, audit_share=0.5), B=3, T=T)
    assert _decoded(plain) == _decoded(audited)
    assert all(r.audit is None for r in plain.values())
    n_audited = sum(r.audit["rounds"] for r in audited.values())
    n_rounds = sum(len(r.accepted_per_round) for r in audited.values())
    assert n_rounds > 30 and 0.25 < n_audited / n_rounds < 0.75
    # the audit's seconds are timed apart from the decision's: none without it, some with it
    assert all(r.audit_s == 0.0 for r in plain.values())
    assert all(r.audit_s > 0.0 for r in audited.values() if r.audit["rounds"])


def test_audit_time_is_outside_the_wall_time(pair, monkeypatch):
    """An audit made 50 ms slower per audited round lands in audit_s, not in wall_s or share_s (tok/s): the
    audited run's wall time stays below the plain run's plus a fraction of the added sleep."""
    import time

    import runners.backends.decide as decide

    real = decide.exact_verdicts

    def slow(*a, **kw):
        time.sleep(0.05)
        return real(*a, **kw)

    heads = HeadSpec(5, 0.3, top_n=8, audit_share=1.0)
    plain = run(pair, HeadSpec(5, 0.3, top_n=8), B=2, n=24)
    monkeypatch.setattr(decide, "exact_verdicts", slow)
    audited = run(pair, heads, B=2, n=24)
    slept = (
        0.05 * sum(r.audit["rounds"] for r in audited.values()) / 2
    )  # B = 2 rows share a round's audit
    assert slept > 0.5
    wall = lambda res: sum(r.wall_s for r in res.values())  # noqa: E731
    share = lambda res: sum(r.share_s for r in res.values())  # noqa: E731
    assert sum(r.audit_s for r in audited.values()) >= 2 * slept * 0.99
    assert (
        wall(audited) < wall(plain) + 0.5 * slept and share(audited) < share(plain) + 0.25 * slept
    )


def test_same_audited_rounds_alone_and_in_a_batch(pair):
    """B = 1 and B = 4 (rows leave and are refilled): each sample's audit record (audited rounds, counts) is
    the same."""
    heads = HeadSpec(5, 0.3, top_n=8, audit_share=0.3)
    one, four = run(pair, heads, B=1), run(pair, heads, B=4)
    assert _decoded(one) == _decoded(four)
    assert {k: r.audit for k, r in one.items()} == {k: r.audit for k, r in four.items()}
    assert sum(len(r.audit["audited"]) for r in one.values()) > 5


def test_covering_the_vocabulary_the_audit_agrees_everywhere(pair):
    """With 2N >= V every audited round and position agrees (T = 0); the counts are those of the kept rounds."""
    V = pair.target.get_output_embeddings().weight.shape[0]
    res = run(pair, HeadSpec(5, 0.3, top_n=V, audit_share=1.0), B=2, rule="dropmatch_naive")
    for r in res.values():
        a = r.audit
        assert a["audited"] == list(range(len(r.accepted_per_round)))
        assert a["rounds"] == a["rounds_equal"] == len(r.accepted_per_round)
        assert a["positions"] == a["positions_equal"] >= a["rounds"]
        assert a["differ"] == []


def _sparse_run(main_env, runs_root, *extra):
    """One tiny-pair DropMatch run (sparse top-4, 2 GSM8K items, 24 tokens) with ``extra`` overrides: its config,
    sample lines and summary."""
    p = run_main(
        main_env,
        "method=dropmatch",
        "L=4",
        "dataset=gsm8k",
        "dataset.limit=2",
        "decoding.max_new_tokens=24",
        "dropmatch.sparse_top_n=4",
        *extra,
        multirun=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    (run_dir,) = list(runs_root.iterdir())
    read = lambda name: json.loads((run_dir / name).read_text())  # noqa: E731
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    return read("config.json"), samples, read("summary.json")


@pytest.mark.subprocess
def test_audit_reaches_the_record_the_summary_and_the_footer(main_env, runs_root):
    """A run with the audit (tiny pair, sparse top-4 so that verdicts can differ): samples.jsonl carries each
    sample's counts, summary.json their sums, and the table footer the pooled agreement and its bound."""
    from analysis.footer import audit_lines, provenance_lines
    from analysis.load import load_runs
    from analysis.stats import clopper_pearson_lower

    cfg, samples, summary = _sparse_run(main_env, runs_root, "dropmatch.audit_share=0.5")
    assert (cfg["dropmatch"]["sparse_top_n"], cfg["dropmatch"]["audit_share"]) == (4, 0.5)
    assert all(set(s["audit"]) >= {"rounds", "positions_equal", "audited"} for s in samples)
    for k in ("rounds", "rounds_equal", "positions", "positions_equal"):
        assert summary[f"audit/{k}"] == sum(s["audit"][k] for s in samples)
    assert summary["audit/rounds_total"] == sum(len(s["accepted_per_round"]) for s in samples)
    assert 0 < summary["audit/rounds"] < summary["audit/rounds_total"]
    assert summary["speed/audit_s"] == pytest.approx(
        sum(s["speed"].get("audit_s", 0.0) for s in samples)
    )
    assert summary["speed/audit_s"] > 0
    runs = load_runs(runs_root)
    (line,) = audit_lines(runs)
    k, n = summary["audit/positions_equal"], summary["audit/positions"]
    assert f"{k}/{n} positions" in line
    assert f"lower bound {100 * clopper_pearson_lower(k, n):.2f}%" in line
    assert line in provenance_lines(runs)


@pytest.mark.subprocess
def test_the_decision_cost_and_the_escape_reach_the_record_and_the_footer(main_env, runs_root):
    """A run with the escape (tiny pair, sparse top-4): every sample carries ``rule_s`` (a part of its
    ``criterion_s``) and its positions per rung, the summary their sums, and the footer the share it makes."""
    from analysis.footer import decision_cost_lines, provenance_lines
    from analysis.load import load_runs

    _, samples, summary = _sparse_run(main_env, runs_root, "dropmatch.sparse_escape=true")
    for s in samples:
        assert 0 < s["speed"]["rule_s"] and 0 < s["speed"]["plain_s"]
        assert s["speed"]["rule_s"] + s["speed"]["plain_s"] < s["speed"]["criterion_s"]
    for part in ("plain_s", "rule_s"):
        assert summary[f"speed/{part}"] == pytest.approx(sum(s["speed"][part] for s in samples))
    reached = summary["escape/positions"]
    first = rung_name(TAIL_LADDER[0], 4)  # the run's sparse_top_n
    assert reached[first] == sum(s.get("escape", {}).get(first, 0) for s in samples) > 0
    assert set(reached) <= {rung_name(r, 4) for r in TAIL_LADDER}
    runs = load_runs(runs_root)
    (line,) = decision_cost_lines(runs)
    share = 100 * summary["speed/rule_s"] / (summary["speed/verify_s"] + summary["speed/plain_s"])
    assert f"gsm8k {share:.1f}%; pooled {share:.1f}% (the <= 3% target, on the gross share" in line
    assert f"{first} {reached[first]};" in line
    assert line in provenance_lines(runs)
