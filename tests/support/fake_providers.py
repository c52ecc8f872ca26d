"""The fake model providers the tests talk to over HTTP on 127.0.0.1, as a deployment talks
to a hosted model: a server that plays scripted answers (`ScriptServer`), the OpenAI
chat-completions body every fake answers with (`chat_completion`), and `serving`, which runs
any of them for the length of a test. The `chat_server` fixture is registered for every test
(tests/conftest.py)."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

import pytest

Server = TypeVar("Server", bound=ThreadingHTTPServer)


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    """`server` answering on its own thread until the block ends (a short poll interval keeps
    shutdown from adding half a second to every test)."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        stop = getattr(server, "stop", None)
        if isinstance(stop, threading.Event):
            stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def chat_completion(
    content: str | None, *, model: str = "fake", finish_reason: str = "stop"
) -> dict[str, Any]:
    """An OpenAI-compatible chat completion whose one choice says `content`."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def send_json(handler: BaseHTTPRequestHandler, payload: Any, status: int = 200) -> None:
    body = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def request_json(handler: BaseHTTPRequestHandler) -> Any:
    return json.loads(handler.rfile.read(int(handler.headers.get("Content-Length", "0"))))


@dataclass
class Scripted:
    status: int = 200
    body: bytes | str | dict[str, Any] = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to stall before answering, to provoke client timeouts


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


class ScriptServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ScriptHandler)
        self.script: deque[Scripted] = deque()
        self.requests: list[Received] = []
        self.stop = threading.Event()  # cuts stalled handlers short at teardown

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1/"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Writes to a client that already timed out fail; that is the point of the test.
        pass


class ScriptHandler(BaseHTTPRequestHandler):
    server: ScriptServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        self.server.requests.append(
            Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        )
        if self.server.script:
            reply = self.server.script.popleft()
        else:
            reply = Scripted(500, "no scripted response left")
        if reply.delay and self.server.stop.wait(reply.delay):
            return
        payload = reply.body
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        if isinstance(payload, str):
            payload = payload.encode()
        try:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (timeout case)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output quiet


@pytest.fixture
def chat_server() -> Iterator[ScriptServer]:
    """A chat (or memory) model endpoint that plays the answers a test scripts."""
    with serving(ScriptServer()) as server:
        yield server


class CompletionServer(ThreadingHTTPServer):
    """Chat completions on 127.0.0.1 that a test's own rule answers: `answer` reads the
    request's user message (the batch a memory model is sent) and returns the JSON content of
    the one choice. Subclasses write the rule; `calls` counts the requests."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _CompletionHandler)
        self.calls = 0

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1/"

    def answer(self, user_message: str) -> dict[str, Any]:
        raise NotImplementedError

    def refusal(self, user_message: str) -> int | None:
        """An HTTP status to answer this request with instead (a provider that is down, or
        throttles); None: answer it."""
        return None

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _CompletionHandler(BaseHTTPRequestHandler):
    server: CompletionServer

    def do_POST(self) -> None:
        body = request_json(self)
        self.server.calls += 1
        user = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        status = self.server.refusal(user)
        if status is not None:
            send_json(self, {"error": {"message": "unavailable", "code": status}}, status)
            return
        content = json.dumps(self.server.answer(user))
        send_json(self, chat_completion(content, model=body.get("model", "fake")))

    def log_message(self, format: str, *args: Any) -> None:
        pass
