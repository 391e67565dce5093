"""judge=local on the tiny random pair: batched greedy replies and first-token logprobs equal an unbatched
reference computation; every reply is recorded, unparsed ones are counted (the tiny model rarely rates)."""

from __future__ import annotations

import json
import re

import pytest

from runners.records.record import read_samples
from tests.helpers.judging import decode_cfg, docs, write_decode
from tests.helpers.openai_server import Canned, OpenAIServer


@pytest.fixture
def local_args(tiny_pair_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("DROPMATCH_CACHE", str(tmp_path / "cache"))
    for v in ("DROPMATCH_JUDGE_MODEL", "OPENAI_MODEL"):
        monkeypatch.delenv(v, raising=False)
    return [
        f"judge.local_path={tiny_pair_dir / 'target'}",
        "judge.dtype=float32",
        "judge.max_tokens=12",
        "judge.batch_size=2",
        "judge.no_repeat_ngram_size=0",  # plain greedy: compared with a reference loop below
    ]


def run_judging(*args: str) -> int:
    from runners.judging.cli import judge_selected

    return judge_selected(
        [a for a in args if "=" not in a], [a for a in args if "=" in a], None, log=lambda m: None
    )


def judging_dir(results, source):
    for d in (results / "runs").iterdir():
        c = json.loads((d / "config.json").read_text())
        if c["method"].get("source_run_id") == source:
            return c, json.loads((d / "summary.json").read_text()), d
    raise AssertionError("no judging run")


def reference_greedy(model, tok, ids, max_tokens, eos):
    import torch

    out = []
    with torch.inference_mode():
        for _ in range(max_tokens):
            logits = model(input_ids=torch.tensor([ids + out])).logits[0, -1]
            t = int(torch.argmax(logits))
            if t in eos:
                break
            out.append(t)
    return tok.decode(out, skip_special_tokens=True)


def test_local_single_grading_on_tiny(results, tiny_pair_dir, local_args):
    from runners.backends.output import end_of_sequence_ids
    from runners.datasets.base import prompt_token_ids
    from runners.models.identity import weights_sha256
    from runners.models.loader import load_pair

    cfg = decode_cfg(
        "sd", "mt_bench", limit=3, offset=28
    )  # 109, 110 reasoning (with reference), 111 math
    items = docs(cfg)
    src = write_decode(
        results, cfg, {sid: f"The answer is {i}." for i, (sid, _) in enumerate(items)}
    )
    assert run_judging(src, *local_args) == 0
    c, s, d = judging_dir(results, src)
    ident = c["judge"]["identity"]
    assert ident["judge"] == "local" and ident["dtype"] == "float32"
    assert ident["weights_sha256"] == weights_sha256(tiny_pair_dir / "target")
    assert s["judge/label"].startswith("WEAK JUDGE") and s["judge/weak"] is True
    lines = read_samples(d / "samples.jsonl")
    assert len(lines) == 3 and s["complete"]
    spec = {"name": "t", "local_path": str(tiny_pair_dir / "target"), "order": ["local"]}
    pair = load_pair(
        {"name": "tiny", "target": spec, "draft": spec, "dtype": "float32"}, need_draft=False
    )
    eos = end_of_sequence_ids(pair.tokenizer, pair.target.generation_config.eos_token_id)
    unparsed = 0
    for line in lines:
        (call,) = line["calls"]
        assert line["judge"]["weights_sha256"] == ident["weights_sha256"]
        ids = prompt_token_ids(pair.tokenizer, call["messages"])
        # batched, left-padded generate == one prompt at a time, greedy, same cap
        assert call["reply"] == reference_greedy(pair.target, pair.tokenizer, ids, 12, eos)
        assert (
            call["finish_reason"] in ("stop", "length") and call["extra"]["num_reply_tokens"] <= 12
        )
        has = re.search(r"\[\[\d+\.?\d*\]\]|\[\d+\.?\d*\]", call["reply"]) is not None
        assert (line["score"] is not None) == has and (line["parse_error"] is None) == has
        unparsed += not has
    assert s["judge/num_parse_failures"] == unparsed


def test_local_alpaca_logprobs_on_tiny(results, tiny_pair_dir, local_args):
    import torch

    from runners.datasets.base import prompt_token_ids
    from runners.models.loader import load_pair

    base_cfg = decode_cfg("sd", "alpaca", limit=3)
    items = docs(base_cfg)
    write_decode(results, base_cfg, {sid: f"base {i}" for i, (sid, _) in enumerate(items)})
    dm = write_decode(
        results,
        decode_cfg("dropmatch_naive", "alpaca", limit=3),
        {sid: f"other answer number {i}" for i, (sid, _) in enumerate(items)},
    )
    assert run_judging(dm, *local_args) == 0
    _, s, d = judging_dir(results, dm)
    spec = {"name": "t", "local_path": str(tiny_pair_dir / "target"), "order": ["local"]}
    pair = load_pair(
        {"name": "tiny", "target": spec, "draft": spec, "dtype": "float32"}, need_draft=False
    )
    lines = read_samples(d / "samples.jsonl")
    assert len(lines) == 3 and s["judge/num_calls"] == 3
    for line in lines:
        (call,) = line["calls"]
        top = call["top_logprobs"]
        ids = prompt_token_ids(pair.tokenizer, call["messages"])
        with torch.inference_mode():
            ref = torch.log_softmax(pair.target(input_ids=torch.tensor([ids])).logits[0, -1], -1)
        vals, toks = torch.topk(ref, 5)
        assert [t["token"] for t in top] == [pair.tokenizer.decode([int(t)]) for t in toks]
        assert [t["logprob"] for t in top] == pytest.approx(vals.tolist(), abs=1e-4)
        p = line["preference"]
        assert (p is None) == (line["parse_error"] is not None)
        assert p is None or 1.0 <= p <= 2.0


def test_calibrate_with_a_second_judge(results, local_args, api_env):
    from runners.judging.cli import judge_selected

    cfg = decode_cfg("sd", "mt_bench", limit=4)
    src = write_decode(results, cfg, {sid: f"ans {i}" for i, (sid, _) in enumerate(docs(cfg))})
    logs: list[str] = []
    with OpenAIServer(lambda b, n: Canned("[[7]]")) as srv:
        api_env(srv.url, model="strong-judge")
        rc = judge_selected(
            [src], ["judge=local", *local_args, "calibration_n=2"], None, logs.append, "api"
        )
        assert len(srv.requests) == 2  # the api judge judged only the calibration subset
    assert rc == 0
    subsets = sorted(
        json.loads((d / "config.json").read_text())["method"]["subset"]
        for d in (results / "runs").iterdir()
        if d.name != src
    )
    assert subsets == ["all", "calibration"]
    (line,) = [x for x in logs if "agreement on the calibration subset" in x]
    assert "WEAK JUDGE" in line and "strong-judge" in line
    local = next(
        d
        for d in (results / "runs").iterdir()
        if json.loads((d / "config.json").read_text())["method"].get("subset") == "all"
    )
    scored = [x for x in read_samples(local / "samples.jsonl") if x["question_id"] in (81, 82)]
    n = sum(x["score"] is not None for x in scored)  # the api judge rated both
    assert (f"n={n}," in line) if n else line.endswith("no question scored by both")


def test_ngram_blocking_reaches_generate_and_the_identity(results, tiny_pair_dir, local_args):
    """judge.no_repeat_ngram_size=N: the reply is transformers' greedy generate with that N-gram blocking (one
    prompt at a time), not the plain greedy reply, and N is in the judge's identity (so the plain judge's replies
    are not reused for it)."""
    import torch
    from transformers import GenerationConfig

    from runners.datasets.base import prompt_token_ids
    from runners.judging.judges import build_judge

    cfg = decode_cfg("sd", "mt_bench", limit=2)
    items = docs(cfg)
    src = write_decode(results, cfg, {sid: "fine fine fine fine" for sid, _ in items})
    args = [a for a in local_args if "no_repeat_ngram_size" not in a and "batch_size" not in a]
    extra = ["judge.no_repeat_ngram_size=2", "judge.max_tokens=24", "judge.batch_size=1"]
    assert run_judging(src, *args, *extra) == 0
    c, s, d = judging_dir(results, src)
    assert c["judge"]["identity"]["no_repeat_ngram_size"] == 2
    judge = build_judge(
        {"name": "local", "local_path": str(tiny_pair_dir / "target"), "dtype": "float32"}
    )
    judge.load()
    plain_differs = 0
    for line in read_samples(d / "samples.jsonl"):
        (call,) = line["calls"]
        assert call["cached_from"] is None
        ids = torch.tensor([prompt_token_ids(judge._tokenizer, call["messages"])])
        replies = []
        for n in (2, 0):
            gen = GenerationConfig(
                max_new_tokens=24,
                do_sample=False,
                eos_token_id=sorted(judge._eos),
                pad_token_id=judge._pad,
                no_repeat_ngram_size=n,
            )
            with torch.inference_mode():
                out = judge._model.generate(input_ids=ids, generation_config=gen)[0, ids.shape[1] :]
            toks = [t for t in out.tolist()]
            end = next((k for k, t in enumerate(toks) if t in judge._eos), None)
            replies.append(judge._tokenizer.decode(toks[:end], skip_special_tokens=True))
        assert call["reply"] == replies[0]
        plain_differs += replies[0] != replies[1]
    assert plain_differs >= 1  # the knob changed what the judge wrote
