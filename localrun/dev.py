"""`make dev`: the local stack left running, with HTTP endpoints on 127.0.0.1.

  POST /interactions  Discord's interactions (signatures checked against DISCORD_PUBLIC_KEY)
  POST /ingest        the relay's {"events": [...]} batches
  POST /recall        a recall request, answered as RecallFunction answers it
  GET  /health        200 while everything runs

The table's stream feeds ConsolidateFunction (the template's filter, batch size and
window) and SweepFunction runs on the template's schedule. Ctrl-C stops everything.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from localrun.motoserver import LocalRunError, MotoServer, port_is_free
from localrun.stack import LocalStack

# The public half of the documented test key (events/README.md): used when no real key is set.
TEST_PUBLIC_KEY = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
SAMPLE_ENV = Path(__file__).resolve().parent.parent / "events" / "env.json"
TOLERANCE_ENV = "DISCORD_TIMESTAMP_TOLERANCE_SECONDS"
MAX_BODY = 1_000_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make dev", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--http-port", type=int, default=8787, help="port for the endpoints (default 8787)"
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port for the local DynamoDB (default: a free one)"
    )
    return parser.parse_args(argv)


def function_url_event(path: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """The Function URL (payload 2.0) event Lambda would build for this request."""
    try:
        text, encoded = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {k.lower(): v for k, v in headers.items()},
        "requestContext": {
            "http": {
                "method": "POST",
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "timeEpoch": int(time.time() * 1000),
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


class Endpoints(BaseHTTPRequestHandler):
    stack: LocalStack  # set on the class before serving

    def log_message(self, format: str, *args: Any) -> None:
        print(f"  {self.command} {self.path} -> {args[1] if len(args) > 1 else ''}", flush=True)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._reply(200, {"ok": True})
        else:
            self._reply(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length > MAX_BODY:
            self._reply(413, {"error": "body too large"})
            return
        body = self.rfile.read(length)
        if self.path == "/interactions":
            event = function_url_event("/", dict(self.headers.items()), body)
            response = self.stack.invoke("InteractionsFunction", event)
            self._send(
                response.get("statusCode", 200),
                response.get("headers", {}),
                response.get("body", ""),
            )
            return
        if self.path not in ("/ingest", "/recall"):
            self._reply(404, {"error": "not found"})
            return
        try:
            payload = json.loads(body)
        except ValueError:
            self._reply(400, {"error": "the body must be JSON"})
            return
        if self.path == "/ingest":
            answer = self.stack.invoke("IngestFunction", payload)
        else:
            answer = self.stack.invoke("RecallFunction", payload)
        self._reply(400 if "error" in answer else 200, answer)

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, {"content-type": "application/json"}, json.dumps(body))

    def _send(self, status: int, headers: dict[str, str], body: str) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def background(stack: LocalStack, stop: threading.Event) -> list[threading.Thread]:
    def pump() -> None:
        while not stop.wait(1.0):
            try:
                stack.pump_stream()
            except Exception as error:  # keep serving; the next tick retries
                print(f"  stream: {error!r}", flush=True)

    def schedule() -> None:
        every = stack.schedule_seconds()
        while not stop.wait(every):
            try:
                stack.run_schedule()
            except Exception as error:
                print(f"  schedule: {error!r}", flush=True)

    threads = [
        threading.Thread(target=pump, daemon=True),
        threading.Thread(target=schedule, daemon=True),
    ]
    for thread in threads:
        thread.start()
    return threads


def sample_signing_environment() -> dict[str, str]:
    """With the test key, the signed samples must pass as under `sam local invoke --env-vars
    events/env.json`: their timestamps are fixed, so take the tolerance that file sets."""
    sample: dict[str, str] = json.loads(SAMPLE_ENV.read_text())["InteractionsFunction"]
    return {TOLERANCE_ENV: sample[TOLERANCE_ENV]}


def search_environment() -> dict[str, str]:
    """The embedded search index (SQLite FTS5, in this process), plus the vector leg when
    EMBEDDING_MODEL is set here (e.g. `openai:text-embedding-3-small` with its key)."""
    environment = {"MEMORY_SEARCH_INDEX": "sqlite::memory:"}
    for name in ("EMBEDDING_MODEL", "EMBEDDING_MODEL_BASE_URL", "EMBEDDING_MODEL_API_KEY"):
        if os.environ.get(name):
            environment[name] = os.environ[name]
    return environment


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not port_is_free(args.http_port):
        print(
            f"make dev: port {args.http_port} is already taken; pass ARGS='--http-port N'",
            file=sys.stderr,
        )
        return 2
    public_key = os.environ.get("DISCORD_PUBLIC_KEY") or TEST_PUBLIC_KEY
    server: MotoServer | None = None
    stop = threading.Event()
    try:
        server = MotoServer(args.port).start()
        stack = LocalStack(
            server.url,
            parameters={
                "MemoryModel": os.environ.get("MEMORY_MODEL", "rules"),
                "MemoryModelBaseUrl": os.environ.get("MEMORY_MODEL_BASE_URL", ""),
                "MemoryModelApiKey": os.environ.get("MEMORY_MODEL_API_KEY", ""),
                "DiscordPublicKey": public_key,
                "DiscordApplicationId": os.environ.get(
                    "DISCORD_APPLICATION_ID", "1399999999999999999"
                ),
            },
            environment={
                **(sample_signing_environment() if public_key == TEST_PUBLIC_KEY else {}),
                **search_environment(),
            },
            echo=True,
        ).start()
        Endpoints.stack = stack
        http = ThreadingHTTPServer(("127.0.0.1", args.http_port), Endpoints)
        background(stack, stop)

        def shut_down(*_: object) -> None:
            # serve_forever must be stopped from another thread.
            threading.Thread(target=http.shutdown, daemon=True).start()

        signal.signal(signal.SIGINT, shut_down)
        signal.signal(signal.SIGTERM, shut_down)
        base = f"http://127.0.0.1:{args.http_port}"
        print(f"Local DynamoDB: {server.url} (moto server, pid {server.pid})")
        print(f"Memory model: {os.environ.get('MEMORY_MODEL', 'rules')}")
        if public_key == TEST_PUBLIC_KEY:
            print(
                "DISCORD_PUBLIC_KEY is not set: interactions are checked against the TEST key of events/README.md"
            )
        print(
            f"Ready: {base}/interactions  {base}/ingest  {base}/recall  (Ctrl-C stops everything)",
            flush=True,
        )
        http.serve_forever(poll_interval=0.2)
        http.server_close()
        print("Stopping.", flush=True)
        return 0
    except LocalRunError as error:
        print(f"make dev: {error}", file=sys.stderr)
        return 2
    finally:
        stop.set()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
