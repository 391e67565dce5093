"""A real HTTP server on localhost speaking the OpenAI chat-completions API, with canned answers (tests only).

``OpenAIServer(answer)`` serves ``POST /v1/chat/completions`` from a thread (``http.server``); ``answer(body, n)``
gets the decoded request body and the request's number (1-based) and returns a :class:`Canned`: the reply text,
optional first-token ``top_logprobs``, an HTTP status other than 200 (with headers, e.g. ``retry-after-ms``), a
delay before answering (a client timeout), or a raw body (a malformed response). Every request is kept in
``requests`` (path, headers, body).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Canned:
    text: str = ""
    top_logprobs: list[tuple[str, float]] | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None
    model: str | None = None
    finish_reason: str = "stop"


def completion(body: dict, c: Canned) -> dict:
    """An OpenAI ``chat.completion`` object for ``c``."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": c.text},
        "finish_reason": c.finish_reason,
        "logprobs": None,
    }
    if c.top_logprobs is not None:
        tops = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in c.top_logprobs]
        choice["logprobs"] = {"content": [{**tops[0], "top_logprobs": tops}]}
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": c.model or body.get("model", "?"),
        "choices": [choice],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class OpenAIServer:
    def __init__(self, answer: Callable[[dict, int], Canned]) -> None:
        self.answer = answer
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                with server._lock:
                    server.requests.append(
                        {
                            "path": self.path,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "body": body,
                        }
                    )
                    k = len(server.requests)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_response(404)
                    self.end_headers()
                    return
                c = server.answer(body, k)
                if c.delay_s:
                    time.sleep(c.delay_s)
                payload = (
                    c.raw
                    if c.raw is not None
                    else json.dumps(
                        completion(body, c)
                        if c.status == 200
                        else {"error": {"message": "canned error"}}
                    ).encode()
                )
                try:
                    self.send_response(c.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for h, v in c.headers.items():
                        self.send_header(h, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> OpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
