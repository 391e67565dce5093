"""Judging runs end to end: stored answers -> judge=api on a localhost server -> judgment records (no model)."""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from runners.judging import prompts as P
from runners.paths import REPO_ROOT
from runners.records.record import read_samples
from tests.helpers.judging import SDPAIR, decode_cfg, docs, write_decode
from tests.helpers.openai_server import Canned, OpenAIServer


def judge(*args: str, log=None) -> int:
    from runners.judging.cli import judge_selected

    sel = [a for a in args if "=" not in a]
    ovr = [a for a in args if "=" in a]
    return judge_selected(sel, ovr, None, log=log or (lambda m: None))


def judging_runs(results: Path) -> list[tuple[dict, dict, Path]]:
    out = []
    for d in sorted((results / "runs").iterdir()):
        if not (d / "config.json").is_file():
            continue  # a record being opened: its directory exists before its config
        c = json.loads((d / "config.json").read_text())
        if c["method"].get("measure") == "judge":
            s = (
                json.loads((d / "summary.json").read_text())
                if (d / "summary.json").exists()
                else {}
            )
            out.append((c, s, d))
    return out


def user_text(body: dict) -> str:
    return body["messages"][-1]["content"]


def test_single_grading_records_every_judgment(results, api_env):
    cfg = decode_cfg(
        "dropmatch_naive", "mt_bench", limit=4, offset=19
    )  # 100 roleplay, 101-103 reasoning
    items = docs(cfg)
    assert [d["question_id"] for _, d in items] == [100, 101, 102, 103]
    src = write_decode(results, cfg, {sid: f"answer to {d['question_id']}" for sid, d in items})

    def answer(
        body, n
    ):  # reference-guided prompts get a rating, the general one a reply without a verdict
        if "[The Start of Reference Answer]" in user_text(body):
            return Canned(f"Compared with the reference... Rating: [[{n + 5}]]")
        return Canned("A fine answer overall.", finish_reason="length")

    with OpenAIServer(answer) as srv:
        api_env(srv.url, model="judge-a")
        assert judge(src, "judge.concurrency=1") == 0
        ((c, s, d),) = judging_runs(results)
        lines = {x["question_id"]: x for x in read_samples(d / "samples.jsonl")}
        assert sorted(lines) == [100, 101, 102, 103]
        assert lines[100]["score"] is None and lines[100]["prompt"] == "single-v1"
        assert lines[100]["parse_error"] == "no [[rating]] in the reply (the reply hit max_tokens)"
        assert [lines[q]["score"] for q in (101, 102, 103)] == [7.0, 8.0, 9.0]  # requests 2..4
        assert all(lines[q]["prompt"] == "single-math-v1" for q in (101, 102, 103))
        assert lines[101]["reference_source"].startswith("FastChat")
        # the prompt sent, the raw reply and the judge's identity are in every line
        for q, line in lines.items():
            (call,) = line["calls"]
            sent = next(r for r in srv.requests if f"answer to {q}" in user_text(r["body"]))
            assert call["messages"] == sent["body"]["messages"] and call["reply"]
            assert line["judge"]["model"] == "judge-a" and line["judge"]["prompt"] == line["prompt"]
            assert (
                line["judge"]["prompt_files"]["judge_prompts.jsonl"] == P.FASTCHAT_PROMPTS["sha256"]
            )
        assert s["complete"] and s["judge/score"] == 8.0 and s["judge/num_scored"] == 3
        assert s["judge/num_parse_failures"] == 1 and s["judge/num_call_failures"] == 0
        assert s["judge/score_stderr"] == pytest.approx(statistics.stdev([7, 8, 9]) / math.sqrt(3))
        assert c["method"]["source_run_id"] == src and c["judge"]["identity"]["model"] == "judge-a"
        # the same judge again: finished, nothing asked; another judge model: another run (another id)
        n = len(srv.requests)
        assert judge(src, "judge.concurrency=1") == 0 and len(srv.requests) == n
        api_env(srv.url, model="judge-b")
        assert judge(src, "judge.concurrency=1") == 0 and len(srv.requests) == n + 4
    runs = judging_runs(results)
    assert len(runs) == 2 and len({d.name for _, _, d in runs}) == 2
    assert (results / "runs" / src / "samples.jsonl").read_text().count(
        "\n"
    ) == 4  # decode untouched


def test_failed_calls_are_counted_and_retried_on_the_next_run(results, api_env):
    cfg = decode_cfg("sd", "mt_bench", limit=3)
    src = write_decode(results, cfg, {sid: f"ans {d['question_id']}" for sid, d in docs(cfg)})
    down = {"on": True}

    def answer(body, n):
        if down["on"] and "ans 82" in user_text(body):
            return Canned(status=500)
        return Canned("[[6]]")

    with OpenAIServer(answer) as srv:
        api_env(srv.url)
        assert judge(src, "judge.max_retries=1", "judge.concurrency=1") == 1
        ((_, s, d),) = judging_runs(results)
        assert not s["complete"] and s["judge/num_call_failures"] == 1
        assert s["judge/call_failures"][0]["sample_id"] == "mt_bench/test/82"
        assert "InternalServerError" in s["judge/call_failures"][0]["error"]
        assert {x["sample_id"] for x in read_samples(d / "samples.jsonl")} == {
            "mt_bench/test/81",
            "mt_bench/test/83",
        }
        assert (
            sum("ans 82" in user_text(r["body"]) for r in srv.requests) == 2
        )  # first try + 1 retry
        down["on"] = False
        n = len(srv.requests)
        assert judge(src, "judge.max_retries=1", "judge.concurrency=1") == 0
        assert len(srv.requests) == n + 1  # only the failed question is asked again
    ((_, s, d),) = judging_runs(results)
    assert s["complete"] and s["judge/num_call_failures"] == 0 and s["judge/score"] == 6.0
    ids = [x["sample_id"] for x in read_samples(d / "samples.jsonl")]
    assert len(ids) == 3 == len(set(ids))


@pytest.mark.slow  # two subprocesses (imports) and 8 delayed judge replies: ~20 s
@pytest.mark.subprocess
def test_killed_judging_resumes_without_redoing(results, api_env, tmp_path):
    cfg = decode_cfg("sd", "mt_bench", limit=8)
    src = write_decode(results, cfg, {sid: f"ans {d['question_id']}" for sid, d in docs(cfg)})
    with OpenAIServer(lambda b, n: Canned("[[5]]", delay_s=0.4)) as srv:
        api_env(srv.url)
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        cmd = [sys.executable, "-m", "runners.judging", src, "judge.concurrency=1"]
        proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.time() + 120
        recorded: list[str] = []
        while time.time() < deadline and proc.poll() is None:
            runs = judging_runs(results)
            if runs and (runs[0][2] / "samples.jsonl").exists():
                recorded = [x["sample_id"] for x in read_samples(runs[0][2] / "samples.jsonl")]
                if len(recorded) >= 4:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = Counter(q for r in srv.requests for q in [user_text(r["body"])])
        assert 4 <= len(recorded) < 8
        rc = subprocess.run(
            cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert rc.returncode == 0, rc.stderr[-2000:]
    ((_, s, d),) = judging_runs(results)
    ids = [x["sample_id"] for x in read_samples(d / "samples.jsonl")]
    assert s["complete"] and len(ids) == 8 == len(set(ids))
    asked = Counter(user_text(r["body"]) for r in srv.requests)
    for sid in recorded:  # judgments recorded before the kill were not asked again
        qid = sid.rsplit("/", 1)[1]
        (prompt,) = [p for p in asked if f"ans {qid}\n" in p]
        assert asked[prompt] == before[prompt] == 1


def test_alpaca_eval_win_rate_against_standard_decoding(results, api_env):
    base_cfg = decode_cfg("sd", "alpaca", limit=6)
    items = docs(base_cfg)
    base = {sid: f"baseline {i}" for i, (sid, _) in enumerate(items)}
    mine = {sid: (base[sid] if i < 2 else f"dropmatch {i}") for i, (sid, _) in enumerate(items)}
    sd = write_decode(results, base_cfg, base)
    dm = write_decode(results, decode_cfg("dropmatch_naive", "alpaca", limit=6), mine)
    top = [("m", -0.05), ("M", -3.0), ("The", -6.0)]
    with OpenAIServer(lambda b, n: Canned("m", top_logprobs=top)) as srv:
        api_env(srv.url)
        assert judge(sd, dm) == 0
    by_src = {c["method"]["source_run_id"]: (c, s, d) for c, s, d in judging_runs(results)}
    c, s, d = by_src[dm]
    assert c["method"]["baseline"] == {"method": "sd", "run_id": sd}
    lines = {x["sample_id"]: x for x in read_samples(d / "samples.jsonl")}
    pm, pM = math.exp(-0.05), math.exp(-3.0)
    shown = 2 - pm / (pm + pM)  # "m" (output_1) is preferred whatever it shows
    expected = []
    for i, (sid, doc) in enumerate(items):
        sw = P.alpaca_switched(doc["turns"][0])
        assert lines[sid]["switched"] == sw
        if i < 2:
            assert (
                lines[sid]["identical"]
                and lines[sid]["calls"] == []
                and lines[sid]["preference"] == 1.5
            )
            expected.append(0.5)
            continue
        # output_1 is the baseline unless the order is switched
        user = lines[sid]["calls"][0]["messages"][1]["content"]
        first, second = (mine[sid], base[sid]) if sw else (base[sid], mine[sid])
        assert user.index(first) < user.index('"M"') < user.index(second)
        assert lines[sid]["preference"] == pytest.approx(3 - shown if sw else shown)
        expected.append((3 - shown if sw else shown) - 1)
    assert s["judge/win_rate"] == pytest.approx(100 * statistics.mean(expected))
    assert s["judge/standard_error"] == pytest.approx(
        100 * statistics.stdev(expected) / math.sqrt(6)
    )
    assert s["judge/num_identical"] == 2 and s["judge/num_calls"] == 4
    assert len(srv.requests) == 4
    for r in srv.requests:
        assert r["body"]["logprobs"] is True and r["body"]["top_logprobs"] == 5
    # the baseline judged against itself: all draws, 50 %, no call
    _, s_sd, _ = by_src[sd]
    assert s_sd["judge/win_rate"] == 50.0 and s_sd["judge/num_calls"] == 0


def test_missing_baseline_is_refused_with_the_command(results, api_env, caplog):
    cfg = decode_cfg("dropmatch_naive", "alpaca", limit=2)
    dm = write_decode(results, cfg, {sid: "x" for sid, _ in docs(cfg)})
    api_env("http://127.0.0.1:9/v1")
    with caplog.at_level("ERROR"):
        assert judge(dm) == 1
    assert "no complete method=sd run with the same setting" in caplog.text
    assert judging_runs(results) == []


def test_fastchat_pairwise_both_orders(results, api_env):
    cfg = decode_cfg("sd", "mt_bench", limit=3, pair=SDPAIR)
    items = docs(cfg)
    sids = [sid for sid, _ in items]
    write_decode(results, cfg, {sids[0]: "plain", sids[1]: "GOOD one", sids[2]: "same"})
    dm = write_decode(
        results,
        decode_cfg("dropmatch_naive", "mt_bench", limit=3, pair=SDPAIR),
        {sids[0]: "GOOD answer", sids[1]: "plain", sids[2]: "same"},
    )

    def answer(body, n):
        u = user_text(body)
        a = u.split("[The Start of Assistant A's Answer]")[1].split("[The End")[0]
        b = u.split("[The Start of Assistant B's Answer]")[1].split("[The End")[0]
        return Canned("[[A]]" if "GOOD" in a or "GOOD" not in b else "[[B]]")  # ties go to A

    with OpenAIServer(answer) as srv:
        api_env(srv.url)
        assert judge(dm, "protocol.mt_bench=pairwise") == 0
    ((c, s, d),) = judging_runs(results)
    assert c["method"]["protocol"] == "pairwise"
    lines = {x["sample_id"]: x for x in read_samples(d / "samples.jsonl")}
    assert [lines[x]["winner"] for x in sids] == ["model", "baseline", "tie"]
    assert lines[sids[2]]["inconsistent"] and (lines[sids[2]]["g1"], lines[sids[2]]["g2"]) == (
        "A",
        "A",
    )
    assert [len(lines[x]["calls"]) for x in sids] == [2, 2, 2]
    assert s["judge/win_rate"] == pytest.approx(100 * 1.5 / 3)
    assert (s["judge/num_wins"], s["judge/num_losses"], s["judge/num_ties"]) == (1, 1, 1)
    assert lines[sids[0]]["prompt"] == "pair-v2"
    assert len(srv.requests) == 5  # identical answers: both games send the same request, asked once


def test_identical_requests_reuse_the_recorded_reply(results, api_env):
    cfg = decode_cfg("sd", "mt_bench", limit=3)
    items = docs(cfg)
    a = {sid: f"ans {d['question_id']}" for sid, d in items}
    b = {**a, items[2][0]: "something else"}
    sd = write_decode(results, cfg, a)
    dm = write_decode(results, decode_cfg("dropmatch_naive", "mt_bench", limit=3), b)
    with OpenAIServer(lambda body, n: Canned(f"[[{n}]]")) as srv:
        api_env(srv.url)
        assert judge(sd, "judge.concurrency=1") == 0
        assert judge(dm, "judge.concurrency=1") == 0
        assert len(srv.requests) == 4  # 3 + the one answer that differs
    by_src = {c["method"]["source_run_id"]: (s, d) for c, s, d in judging_runs(results)}
    sd_lines = {x["sample_id"]: x for x in read_samples(by_src[sd][1] / "samples.jsonl")}
    dm_lines = {x["sample_id"]: x for x in read_samples(by_src[dm][1] / "samples.jsonl")}
    for sid, _ in items[:2]:
        assert dm_lines[sid]["calls"][0]["cached_from"] == by_src[sd][1].name
        assert dm_lines[sid]["score"] == sd_lines[sid]["score"]
    assert dm_lines[items[2][0]]["calls"][0]["cached_from"] is None
    assert by_src[dm][0]["judge/num_reused_calls"] == 2 and by_src[dm][0]["judge/num_calls"] == 1


def test_two_judges_agreement_on_the_calibration_subset(results, api_env):
    cfg = decode_cfg("sd", "mt_bench", limit=5)
    src = write_decode(results, cfg, {sid: f"ans {d['question_id']}" for sid, d in docs(cfg)})

    def answer(body, n):
        qid = int(user_text(body).split("ans ")[1].split("\n")[0])
        bump = 1 if body["model"] == "judge-b" else 0
        return Canned(f"[[{qid % 10 + bump}]]")  # judge-b: one point above judge-a everywhere

    logs: list[str] = []
    with OpenAIServer(answer) as srv:
        api_env(srv.url, model="judge-a")
        assert judge(src) == 0
        api_env(srv.url, model="judge-b")
        assert judge(src, "subset=calibration", "calibration_n=3", log=logs.append) == 0
    (line,) = [x for x in logs if "agreement on the calibration subset" in x]
    assert "judge-a (OpenAI-compatible API) vs judge-b" in line
    assert (
        "n=3" in line
        and "Pearson r 1.00" in line
        and "mean |diff| 1.00" in line
        and "equal 0%" in line
    )
    cal = [d for c, _, d in judging_runs(results) if c["method"]["subset"] == "calibration"]
    assert [x["question_id"] for x in read_samples(cal[0] / "samples.jsonl")] == [81, 82, 83]


def test_invalid_judging_settings_are_refused(results, api_env, caplog):
    cfg = decode_cfg("sd", "mt_bench", limit=1)
    src = write_decode(results, cfg, {sid: "x" for sid, _ in docs(cfg)})
    api_env("http://127.0.0.1:9/v1")
    with caplog.at_level("ERROR"):
        assert judge(src, "protocol.mt_bench=nope") == 2
        assert (
            "protocol.mt_bench='nope' is unknown; allowed: alpaca_eval, pairwise, single"
            in caplog.text
        )
        assert judge(src, "baseline=") == 2
        assert "baseline='' is invalid" in caplog.text
        assert judge(src, "judge=nope") == 2
        assert "judge='nope' is unknown; allowed: api, local" in caplog.text
        assert judge("no_such_run") == 2
    assert judging_runs(results) == []
