"""Loopback stand-ins for the Gemini and OpenAI HTTP APIs, so the real SDK clients can be tested
without a network.

Each server listens on 127.0.0.1 (a free port) in a background thread, answers each request with
the next behaviour of its script, and records what it received:

    with FakeGemini([Status(429, retry_delay="1s"), Reply('{"plan": "tile"}')]) as server:
        llm = make_llm("gemini:gemini-2.5-pro", base_url=server.base_url)
        ...
        server.received[1].body["generationConfig"]["responseJsonSchema"]
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union
from urllib.parse import urlsplit


@dataclass
class Reply:
    """A successful answer carrying `text`, with realistic usage numbers."""

    text: str
    input_tokens: int = 1200
    output_tokens: int = 300
    thoughts_tokens: int = 0  # Gemini reports thinking separately; billed as output
    finish: str | None = None  # the provider's stop reason; its usual value when None


@dataclass
class Status:
    """An error answer in the provider's own error format."""

    code: int
    message: str = "simulated failure"
    retry_after: float | None = None  # sent as the Retry-After header, in seconds
    retry_delay: str | None = None  # sent as Gemini's google.rpc.RetryInfo.retryDelay in the body, e.g. "1s"


@dataclass
class Slow:
    """Wait `seconds` before answering with `then` (the client may give up first)."""

    seconds: float
    then: Reply = field(default_factory=lambda: Reply('{"late": true}'))


@dataclass
class Garbage:
    """HTTP 200 with a body that is not JSON, as a misconfigured proxy might send."""

    body: bytes = b"<html><body>upstream says hello</body></html>"
    content_type: str = "text/html"


@dataclass
class Respond:
    """Decide the behaviour from the request itself, e.g. a scripted model that answers by role."""

    decide: Callable[["Received"], "Behaviour"]


Behaviour = Union[Reply, Status, Slow, Garbage, Respond]


@dataclass
class Received:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names
    raw: bytes
    body: Any  # the decoded JSON body, or None
    at: float  # time.monotonic() on arrival


class LoopbackServer(ABC):
    """Plays `script` one behaviour per request; a request past its end gets HTTP 500, so
    an unexpected extra request shows up as a failure rather than hanging."""

    def __init__(self, script: list[Behaviour]):
        self.script = list(script)
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None

    # -- provider specifics -------------------------------------------------------------
    @abstractmethod
    def route(self, method: str, path: str) -> dict | None:
        """Path parameters when `path` is this API's endpoint, else None."""

    @abstractmethod
    def reply_body(self, reply: Reply, params: dict, request: Received) -> dict:
        """The provider's JSON for a successful answer to `request`."""

    @abstractmethod
    def error_body(self, status: Status) -> dict:
        """The provider's JSON for an error answer."""

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """What to give the SDK as its base URL."""
        return self.url

    def start(self) -> "LoopbackServer":
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real APIs and SDK pools expect

            def do_POST(self) -> None:
                owner._handle(self)

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll keeps stop() quick; the default half second adds up over a test file.
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes Slow behaviours still waiting
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def __enter__(self) -> "LoopbackServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- request handling ---------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = urlsplit(handler.path)
        params = self.route(handler.command, parts.path)
        request = Received(handler.command, parts.path, parts.query,
                           {k.lower(): v for k, v in handler.headers.items()}, raw, body, time.monotonic())
        with self._lock:
            self.received.append(request)
            behaviour = self.script.pop(0) if self.script and params is not None else None
        if params is None:
            self._send_json(handler, 404, self.error_body(Status(404, f"no route for {handler.path}")))
            return
        if behaviour is None:
            behaviour = Status(500, "loopback script exhausted")
        if isinstance(behaviour, Respond):
            behaviour = behaviour.decide(request)
        if isinstance(behaviour, Slow):
            if self._stopping.wait(behaviour.seconds):
                return
            behaviour = behaviour.then
        if isinstance(behaviour, Reply):
            self._send_json(handler, 200, self.reply_body(behaviour, params, request))
        elif isinstance(behaviour, Status):
            headers = {"Retry-After": f"{behaviour.retry_after:g}"} if behaviour.retry_after is not None else {}
            self._send_json(handler, behaviour.code, self.error_body(behaviour), headers)
        else:
            self._send(handler, 200, behaviour.body, behaviour.content_type, {})

    def _send_json(self, handler: BaseHTTPRequestHandler, code: int, payload: dict,
                   headers: dict[str, str] | None = None) -> None:
        self._send(handler, code, json.dumps(payload).encode(), "application/json", headers or {})

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, code: int, data: bytes, content_type: str,
              headers: dict[str, str]) -> None:
        try:
            handler.send_response(code)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing left to tell it


class FakeGemini(LoopbackServer):
    """`POST /{version}/models/{model}:generateContent`, the Gemini Developer API's REST shape."""

    _ENDPOINT = re.compile(r"^/(v1|v1beta|v1alpha)/models/([^/:]+):generateContent$")

    def route(self, method: str, path: str) -> dict | None:
        match = self._ENDPOINT.match(path)
        return {"version": match.group(1), "model": match.group(2)} if method == "POST" and match else None

    def reply_body(self, reply: Reply, params: dict, request: Received) -> dict:
        usage = {
            "promptTokenCount": reply.input_tokens,
            "candidatesTokenCount": reply.output_tokens,
            "totalTokenCount": reply.input_tokens + reply.output_tokens + reply.thoughts_tokens,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": reply.input_tokens}],
        }
        if reply.thoughts_tokens:
            usage["thoughtsTokenCount"] = reply.thoughts_tokens
        return {
            "candidates": [{
                "content": {"parts": [{"text": reply.text}], "role": "model"},
                "finishReason": reply.finish or "STOP",
                "index": 0,
            }],
            "usageMetadata": usage,
            "modelVersion": params["model"],
            "responseId": uuid.uuid4().hex[:20],
        }

    def error_body(self, status: Status) -> dict:
        names = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED",
                 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
        error: dict[str, Any] = {"code": status.code, "message": status.message,
                                 "status": names.get(status.code, "UNKNOWN")}
        if status.retry_delay is not None:
            error["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo",
                                 "retryDelay": status.retry_delay}]
        return {"error": error}


class FakeOpenAI(LoopbackServer):
    """`POST /v1/chat/completions`, the OpenAI chat-completions REST shape."""

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def route(self, method: str, path: str) -> dict | None:
        return {} if method == "POST" and path == "/v1/chat/completions" else None

    def reply_body(self, reply: Reply, params: dict, request: Received) -> dict:
        model = (request.body or {}).get("model", "unknown")
        return {
            "id": "chatcmpl-" + uuid.uuid4().hex[:24],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": reply.text, "refusal": None},
                "logprobs": None,
                "finish_reason": reply.finish or "stop",
            }],
            "usage": {
                "prompt_tokens": reply.input_tokens,
                "completion_tokens": reply.output_tokens,
                "total_tokens": reply.input_tokens + reply.output_tokens,
            },
        }

    def error_body(self, status: Status) -> dict:
        kinds = {400: "invalid_request_error", 401: "invalid_request_error", 429: "rate_limit_error"}
        return {"error": {"message": status.message, "type": kinds.get(status.code, "server_error"),
                          "param": None, "code": None}}
