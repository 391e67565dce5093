"""Cost and parse rate of judge=local on the real embedded target (manual measurement, not a test).

Judges MT-Bench answers (FastChat's GPT-4 reference answers of the first ``--n`` math/reasoning/coding questions
and the same number of general ones, as stand-ins for decoded answers) with FastChat's single grading, and Alpaca
pairs with AlpacaEval's annotator, on the pinned Qwen2.5-Coder-1.5B-Instruct. Prints seconds per judgment, reply
tokens and the share of replies with a parseable verdict. Loads the real pair: run under the real-pair lock.

    flock /tmp/dropmatch-realpair.lock env PYTHONPATH=$PWD \\
        .venv/bin/python scripts/realpair_judge.py --n 4 --max-tokens 512 --batch 4
"""

from __future__ import annotations

import argparse
import json
import time

from runners.judging import prompts as P
from runners.judging.judges import JudgeRequest, LocalJudge
from runners.judging.parse import alpaca_preference, parse_rating
from runners.paths import REPO_ROOT


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--skip-single", action="store_true", help="only the AlpacaEval judgments")
    a = ap.parse_args()
    judge = LocalJudge(
        {
            "name": "local",
            "pair": "qwen25coder_0.5b_1.5b",
            "local_path": None,
            "dtype": a.dtype,
            "device": "cpu",
            "max_tokens": a.max_tokens,
            "batch_size": a.batch,
            "weak": True,
        }
    )
    t0 = time.perf_counter()
    judge.load()
    print(f"load {time.perf_counter() - t0:.1f} s; judge {judge.label()}")
    rows = [
        json.loads(x)
        for x in (REPO_ROOT / "runners/datasets/data/mt_bench/question.jsonl")
        .read_text()
        .splitlines()
    ]
    refs = P.fastchat_references()
    general = [r for r in rows if r["category"] not in P.NEED_REF_CATS][: a.n]
    graded = [r for r in rows if r["category"] in P.NEED_REF_CATS][: a.n]
    reqs = []
    for r in general + graded:
        q = P.Question(
            str(r["question_id"]),
            r["question_id"],
            r["category"],
            r["turns"][0],
            *P.reference_for(r["question_id"], r["category"], None, "mt_bench"),
        )
        answer = refs.get(r["question_id"], refs[101])[
            0
        ]  # a GPT-4 answer (of another question for general ones)
        reqs.append(JudgeRequest.of(P.single_messages(q, answer)[1], max_tokens=a.max_tokens))
    reps = []
    if not a.skip_single:
        t0 = time.perf_counter()
        reps = judge.complete(reqs)
        dt = time.perf_counter() - t0
        toks = [r.extra.get("num_reply_tokens", 0) for r in reps]
        ratings = [parse_rating(r.text or "") for r in reps]
        cut = sum(r.finish_reason == "length" for r in reps)
        print(
            f"single: {len(reps)} judgments in {dt:.1f} s ({dt / len(reps):.1f} s each), reply tokens "
            f"{toks}, ratings {ratings}, cut at max_tokens {cut}"
        )
        for r in reps:
            print("reply:", (r.text or "")[:400].replace("\n", " | "))
    alp = [
        json.loads(x)
        for x in (REPO_ROOT / "runners/datasets/data/alpaca/question.jsonl")
        .read_text()
        .splitlines()
    ][: 2 * a.n]
    areqs = [
        JudgeRequest.of(
            P.alpaca_messages(r["turns"][0], r["reference"][0], "I am not sure."),
            max_tokens=1,
            temperature=1.0,
            top_logprobs=5,
        )
        for r in alp
    ]
    t0 = time.perf_counter()
    areps = judge.complete(areqs)
    dt = time.perf_counter() - t0
    prefs = [alpaca_preference(r.top_logprobs) for r in areps]
    print(
        f"alpaca_eval: {len(areps)} judgments in {dt:.1f} s ({dt / len(areps):.2f} s each), preferences {prefs}"
    )


if __name__ == "__main__":
    main()
