"""Peers for the relay's tests: a real HTTP ingest endpoint, a fake Lambda client, a clock."""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError, EndpointConnectionError

from botmemory.clock import ManualClock
from botmemory.ingest.observe import Ignored, ObservationRecorder, events_from
from botmemory.settings.config import Settings
from localrun import gateway as gw
from relay.backoff import Backoff
from relay.batch import BatchLimits
from relay.forwarder import Forwarder
from relay.sinks import Outcome, SendResult, Sink
from relay.spool import Spool


class Clock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def recorder() -> ObservationRecorder:
    """IngestFunction's parser. `parse` reads only settings and the clock, so every other
    collaborator (the table, the opt-out list) is left out, by name."""
    # The clock at the relay tests' T0: events made after it are refused as from the future.
    clock = ManualClock(1_767_225_600_000)
    known = {"settings": Settings(memory_model="rules", bot_user_id=gw.BOT), "clock": clock}
    names = list(inspect.signature(ObservationRecorder).parameters)
    build: Any = ObservationRecorder
    built: ObservationRecorder = build(**{name: known.get(name) for name in names})
    return built


class IngestServer:
    """A real HTTP endpoint on 127.0.0.1 answering like `make dev`'s POST /ingest.

    `down()` closes the listening socket (connections are refused), `up()` listens again on
    the same port; `mode` switches the answer: "ok", "reject" (400) or "unwell" (503).
    """

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.requests = 0
        self.mode = "ok"
        self._recorder = recorder()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/ingest"

    @property
    def events(self) -> list[dict[str, Any]]:
        return [event for batch in self.batches for event in batch]

    def up(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                status, answer = owner.answer(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def answer(self, body: bytes) -> tuple[int, dict[str, Any]]:
        self.requests += 1
        if self.mode == "unwell":
            return 503, {"error": "try later"}
        if self.mode == "reject":
            return 400, {"error": "the body must be JSON"}
        try:
            events = events_from(json.loads(body))
        except ValueError as error:
            return 400, {"error": str(error)}
        self.batches.append(events)
        stored, ignored, rejected = 0, [], []
        for index, event in enumerate(events):
            try:
                self._recorder.parse(event)
                stored += 1
            except Ignored as why:
                ignored.append({"index": index, "event": event.get("t"), "reason": str(why)})
            except (ValueError, TypeError) as why:
                rejected.append({"index": index, "event": event.get("t"), "reason": str(why)[:300]})
        return 200, {"stored": stored, "duplicates": 0, "ignored": ignored, "rejected": rejected}


class FakeLambda:
    """Records invoke calls; answers 202, or raises what the test queues, in order."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.accepted: list[dict[str, Any]] = []
        self.failures: list[Exception | None] = []  # None: that call succeeds

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            raise failure
        self.accepted.append(kwargs)
        return {"StatusCode": 202, "Payload": b""}

    @property
    def events(self) -> list[dict[str, Any]]:
        """Events of the accepted invocations, in order."""
        return [e for call in self.accepted for e in json.loads(call["Payload"])["events"]]


def throttled() -> ClientError:
    return ClientError(
        {"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}}, "Invoke"
    )


def unreachable() -> EndpointConnectionError:
    return EndpointConnectionError(endpoint_url="https://lambda.us-east-1.example")


class RecordingSink:
    """Answers from a script of outcomes (then DELIVERED) and keeps every body it saw."""

    description = "recording"

    def __init__(self, *script: SendResult) -> None:
        self.script = list(script)
        self.bodies: list[bytes] = []
        self.closed = False

    def send(self, body: bytes) -> SendResult:
        self.bodies.append(body)
        return self.script.pop(0) if self.script else SendResult(Outcome.DELIVERED)

    def close(self) -> None:
        self.closed = True

    @property
    def batches(self) -> list[list[dict[str, Any]]]:
        return [json.loads(body)["events"] for body in self.bodies]

    @property
    def events(self) -> list[dict[str, Any]]:
        return [event for batch in self.batches for event in batch]


def make_forwarder(
    sink: Sink,
    spool_dir: Path,
    clock: Clock | Callable[[], float],
    *,
    max_events: int = 100,
    max_bytes: int = 200_000,
    max_seconds: float = 2.0,
    attempts: int = 3,
    spool_bytes: int = 10_000_000,
    sleeps: list[float] | None = None,
) -> Forwarder:
    waits = sleeps if sleeps is not None else []

    def sleep(seconds: float) -> bool:
        waits.append(seconds)
        if isinstance(clock, Clock):
            clock.advance(seconds)  # waiting moves time on; nothing sleeps
        return False

    return Forwarder(
        sink,
        Spool(spool_dir, spool_bytes),
        BatchLimits(max_events=max_events, max_bytes=max_bytes, max_seconds=max_seconds),
        attempts=attempts,
        backoff=Backoff(base=0.5, cap=8.0, random=lambda: 0.5),
        clock=clock,
        sleep=sleep,
    )
