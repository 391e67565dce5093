"""The bundled judge prompts and the messages built from them, against FastChat's and AlpacaEval's rules."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from runners.judging import prompts as P
from runners.paths import REPO_ROOT

SHARED = Path(os.environ.get("DROPMATCH_TEST_DATA") or REPO_ROOT.parent / "shared" / "data")


def _q(dataset: str, qid: int) -> P.Question:
    import yaml

    import runners.datasets  # noqa: F401
    from runners.registry import DATASETS, build

    cfg = yaml.safe_load((REPO_ROOT / "conf" / "dataset" / f"{dataset}.yaml").read_text())
    docs = dict(build(DATASETS, cfg).selected_docs())
    sid = f"{dataset}/test/{qid}"
    doc = docs[sid]
    ref, src = P.reference_for(qid, doc["category"], doc.get("reference"), dataset)
    return P.Question(sid, qid, doc["category"], doc["turns"][0], ref, src)


def test_bundled_files_are_fastchats():
    prompts = P.fastchat_prompts()
    assert {"single-v1", "single-math-v1", "pair-v2", "pair-math-v1"} <= set(prompts)
    assert prompts["single-v1"]["output_format"] == "[[rating]]"
    assert prompts["pair-v2"]["output_format"] == "[[A]]"
    assert sorted(P.fastchat_references()) == list(range(101, 131))
    for name in ("judge_prompts.jsonl", "reference_answer_gpt-4.jsonl"):
        ours = REPO_ROOT / "runners/datasets/data/mt_bench_judge" / name
        if (SHARED / "mt_bench" / name).is_file():
            assert ours.read_bytes() == (SHARED / "mt_bench" / name).read_bytes()
    for d in ("mt_bench_judge", "alpaca_eval"):
        assert "Apache License" in (REPO_ROOT / "runners/datasets/data" / d / "LICENSE").read_text()


def test_single_general_and_reference_guided():
    q = _q("mt_bench", 81)  # writing
    name, msgs = P.single_messages(q, "ANSWER")
    assert name == "single-v1" and q.reference is None
    p = P.fastchat_prompts()["single-v1"]
    assert msgs == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": p["prompt_template"].format(question=q.text, answer="ANSWER")},
    ]
    m = _q("mt_bench", 111)  # math: graded against GPT-4's reference answer
    name, msgs = P.single_messages(m, "ANSWER")
    assert name == "single-math-v1" and m.category == "math"
    assert P.fastchat_references()[111][0] in msgs[1]["content"]
    assert "[The Start of Reference Answer]" in msgs[1]["content"]


def test_pairwise_prompt_positions():
    q = _q("mt_bench", 121)  # coding
    name, msgs = P.pair_messages(q, "FIRST", "SECOND")
    assert name == "pair-math-v1"
    assert msgs[0]["content"] == P.fastchat_prompts()["pair-math-v1"]["system_prompt"]
    user = msgs[1]["content"]
    assert (
        user.index("FIRST") < user.index("[The End of Assistant A's Answer]") < user.index("SECOND")
    )
    assert P.pair_messages(_q("mt_bench", 82), "a", "b")[0] == "pair-v2"


def test_komt_references():
    q = _q("komt_bench", 101)
    assert q.reference_source == "komt_bench question file"
    assert any("\uac00" <= ch <= "\ud7a3" for ch in q.reference)  # Hangul: KoMT's own reference
    q123 = _q("komt_bench", 123)  # coding, no Korean reference in the file
    assert q123.reference == P.fastchat_references()[123][0]
    assert q123.reference_source.startswith("FastChat")
    assert _q("komt_bench", 81).reference is None


def test_alpaca_messages_and_order():
    msgs = P.alpaca_messages("Say hi.", "see {output_2} here", "hello")
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert user.endswith("## Best Model Identifier")
    assert '"instruction": """Say hi.""",' in user
    # output_1 is "m", output_2 "M"; a placeholder inside an answer is not filled
    assert user.index("see {output_2} here") < user.index('"M"') < user.index("hello")
    assert msgs[0]["content"].startswith("You are a highly efficient assistant")
    # AlpacaEval's per-instruction order switch: random.Random("is_switched_outputs" + instruction + "0")
    insts = [
        json.loads(x)["turns"][0]
        for x in (REPO_ROOT / "runners/datasets/data/alpaca/question.jsonl")
        .read_text()
        .splitlines()
    ]
    flags = [P.alpaca_switched(i) for i in insts]
    assert flags == [
        random.Random(f"is_switched_outputs{i}0").choices([False, True])[0] for i in insts
    ]
    assert 20 < sum(flags) < 60  # both orders occur
