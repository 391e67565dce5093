"""judge=api against a real OpenAI-compatible HTTP server on localhost (canned answers, no mocked client)."""

from __future__ import annotations

import time

import pytest

from runners.config.errors import ConfigError
from runners.judging.judges import ApiJudge, JudgeRequest, judge_identity
from tests.helpers.openai_server import Canned, OpenAIServer

MSGS = [{"role": "system", "content": "sys"}, {"role": "user", "content": "rate it"}]


def judge(**kw) -> ApiJudge:
    cfg = {
        "name": "api",
        "model": "judge-model",
        "max_tokens": 2048,
        "timeout_s": 5.0,
        "max_retries": 2,
        "concurrency": 1,
    }
    cfg.update(kw)
    return ApiJudge(cfg)


def test_request_as_fastchat_sends_it(api_env):
    with OpenAIServer(
        lambda body, n: Canned("Good. Rating: [[7]]", model="judge-model-0613")
    ) as srv:
        api_env(srv.url, key="sk-secret")
        (rep,) = judge().complete([JudgeRequest.of(MSGS, max_tokens=2048, temperature=0.0)])
    assert rep.text == "Good. Rating: [[7]]" and rep.error is None and rep.retries == 0
    assert rep.served_model == "judge-model-0613" and rep.finish_reason == "stop"
    (req,) = srv.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["authorization"] == "Bearer sk-secret"
    body = req["body"]
    assert body["model"] == "judge-model" and body["messages"] == MSGS
    assert body["temperature"] == 0.0 and body["max_tokens"] == 2048 and body["n"] == 1
    assert "logprobs" not in body


def test_429_is_retried_with_backoff(api_env):
    def answer(body, n):
        return Canned(status=429, headers={"retry-after-ms": "20"}) if n <= 2 else Canned("[[4]]")

    with OpenAIServer(answer) as srv:
        api_env(srv.url)
        (rep,) = judge(max_retries=3).complete([JudgeRequest.of(MSGS, max_tokens=16)])
    assert rep.text == "[[4]]" and rep.retries == 2 and len(srv.requests) == 3


def test_429_without_end_is_a_counted_failure(api_env):
    with OpenAIServer(lambda b, n: Canned(status=429, headers={"retry-after-ms": "10"})) as srv:
        api_env(srv.url)
        (rep,) = judge(max_retries=2).complete([JudgeRequest.of(MSGS, max_tokens=16)])
    assert rep.text is None and rep.error.startswith("RateLimitError") and rep.retries == 2
    assert len(srv.requests) == 3  # first try + max_retries, then it stops


def test_timeout_is_retried_then_a_counted_failure(api_env):
    with OpenAIServer(lambda b, n: Canned("[[9]]", delay_s=1.5)) as srv:
        api_env(srv.url)
        t0 = time.perf_counter()
        (rep,) = judge(timeout_s=0.3, max_retries=1).complete(
            [JudgeRequest.of(MSGS, max_tokens=16)]
        )
        took = time.perf_counter() - t0
    assert rep.text is None and rep.error.startswith("APITimeoutError") and rep.retries == 1
    assert len(srv.requests) == 2 and took < 3.0


def test_malformed_response_is_a_counted_failure(api_env):
    with OpenAIServer(lambda b, n: Canned(raw=b"<html>gateway</html>")) as srv:
        api_env(srv.url)
        (rep,) = judge().complete([JudgeRequest.of(MSGS, max_tokens=16)])
    assert rep.text is None and rep.error is not None


def test_logprobs_request_and_reply(api_env):
    top = [("M", -0.1), ("m", -2.4), ("The", -5.0)]
    with OpenAIServer(lambda b, n: Canned("M", top_logprobs=top)) as srv:
        api_env(srv.url)
        (rep,) = judge(concurrency=3).complete(
            [JudgeRequest.of(MSGS, max_tokens=1, temperature=1.0, top_logprobs=5)]
        )
    body = srv.requests[0]["body"]
    assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["max_tokens"] == 1
    assert body["temperature"] == 1.0
    assert rep.top_logprobs == [{"token": t, "logprob": lp} for t, lp in top]


def test_concurrent_replies_keep_their_order(api_env):
    def answer(body, n):
        k = int(body["messages"][-1]["content"])
        return Canned(f"[[{k}]]", delay_s=0.05 * (5 - k))

    with OpenAIServer(answer) as srv:
        api_env(srv.url)
        reqs = [
            JudgeRequest.of([{"role": "user", "content": str(k)}], max_tokens=8) for k in range(5)
        ]
        reps = judge(concurrency=4).complete(reqs)
    assert [r.text for r in reps] == [f"[[{k}]]" for k in range(5)]


def test_identity_and_refusals(api_env, monkeypatch):
    api_env("http://127.0.0.1:9/v1", model="gpt-4")
    assert judge_identity({**judge().cfg, "model": "gpt-4"}) == {"judge": "api", "model": "gpt-4"}
    with pytest.raises(ConfigError, match="DROPMATCH_JUDGE_MODEL"):
        ApiJudge.check({**judge().cfg, "model": None})
    with pytest.raises(ConfigError, match="judge.max_retries"):
        ApiJudge.check({**judge().cfg, "max_retries": -1})
    monkeypatch.delenv("DROPMATCH_JUDGE_BASE_URL")
    monkeypatch.delenv("DROPMATCH_JUDGE_API_KEY")
    with pytest.raises(ConfigError, match="needs a key"):
        ApiJudge.check(judge().cfg)


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("max_tokens", "abc", "an integer >= 1"),
        ("max_tokens", 0, "an integer >= 1"),
        ("max_tokens", 2.5, "an integer >= 1"),
        ("max_tokens", True, "an integer >= 1"),
        ("timeout_s", 0, "a number > 0"),
        ("timeout_s", "soon", "a number > 0"),
        ("max_retries", -1, "an integer >= 0"),
        ("max_retries", 1.5, "an integer >= 0"),
        ("concurrency", 0, "an integer >= 1"),
        ("concurrency", 2.5, "an integer >= 1"),
    ],
)
def test_numeric_fields_are_refused_by_name_before_any_request(api_env, field, value, allowed):
    with OpenAIServer(lambda b, n: Canned("[[5]]")) as srv:
        api_env(srv.url)
        bad = judge(**{field: value})
        with pytest.raises(
            ConfigError, match=rf"^judge\.{field}={value!r} is invalid; allowed: {allowed}"
        ):
            judge_identity(bad.cfg)
    assert srv.requests == []
