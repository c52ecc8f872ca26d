"""`make dev`: the local stack left running, with HTTP endpoints on 127.0.0.1.

  POST /interactions  Discord's interactions (signatures checked against DISCORD_PUBLIC_KEY)
  POST /ingest        the relay's {"events": [...]} batches
  POST /recall        a recall request, answered as RecallFunction answers it
  GET  /health        200 while everything runs

The table's stream feeds ConsolidateFunction (the template's filter, batch size and
window) and SweepFunction runs on the template's schedule. Ctrl-C stops everything.
A setting the template declares, given in the shell, wins over the template's value
(`MEMORY_CONSOLIDATE_EVERY=3 make dev`), except what the stack wires itself
(localrun.stack.STACK_WIRED: the table, its DynamoDB, the two secrets given directly).

The local DynamoDB listens on a fixed port (8000) so that `sam local invoke --env-vars
events/env.json` finds it at http://host.docker.internal:8000, with the same table and the
same person hash key.
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

from localrun.discord_sink import API_PREFIX, read_json
from localrun.motoserver import LOOPBACK, LocalRunError, MotoServer, port_is_free
from localrun.stack import TEST_PUBLIC_KEY, LocalStack

SAMPLE_ENV = Path(__file__).resolve().parent.parent / "events" / "env.json"
TOLERANCE_ENV = "DISCORD_TIMESTAMP_TOLERANCE_SECONDS"
MAX_BODY = 1_000_000
# What events/env.json points `sam local invoke` at (tests/stack/test_sam_local.py checks both).
DYNAMODB_PORT = 8000
TABLE_NAME = "MemoryTable"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="make dev", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--http-port", type=int, default=8787, help="port for the endpoints (default 8787)"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DYNAMODB_PORT,
        help=f"port for the local DynamoDB (default {DYNAMODB_PORT}, the one events/env.json "
        "names; 0: any free port)",
    )
    parser.add_argument(
        "--dynamodb-host",
        default=LOOPBACK,
        help="address the local DynamoDB listens on (default 127.0.0.1; for `sam local "
        "invoke` on Linux, the Docker bridge's address, e.g. 172.17.0.1: see docs/operations.md)",
    )
    parser.add_argument(
        "--batch-window",
        type=float,
        metavar="SECONDS",
        help="how long the stream's records wait to fill a batch, for every function it "
        "feeds (default: each event source's MaximumBatchingWindowInSeconds in template.yaml, "
        "10 for ConsolidateFunction; 0 delivers at the next read, once a second)",
    )
    args = parser.parse_args(argv)
    if args.batch_window is not None and not 0 <= args.batch_window <= 300:
        # Lambda's own bounds for a stream's MaximumBatchingWindowInSeconds.
        parser.error("--batch-window: between 0 and 300 seconds")
    return args


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
        if self.path.startswith(API_PREFIX) and self.stack.discord is not None:
            self._discord(length)
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

    def do_PATCH(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if self.path.startswith(API_PREFIX) and self.stack.discord is not None:
            self._discord(length)
        else:
            self._reply(404, {"error": "not found"})

    def _discord(self, length: int) -> None:
        """The stand-in for Discord's REST API (`sam local invoke AnswerFunction` posts here):
        the answer is printed, as the in-process AnswerFunction's are."""
        assert self.stack.discord is not None  # nosec B101 # narrows the type for mypy: make dev always starts a fake Discord
        status, body = self.stack.discord.respond(
            self.command, self.path, read_json(self.rfile, min(length, MAX_BODY))
        )
        self._send(status, {"content-type": "application/json"}, json.dumps(body) if body else "")

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


def sample_hash_key() -> str:
    """The person hash key events/env.json gives the functions under `sam local invoke`:
    the in-process functions use it too, so both hash a person alike (opt-outs agree)."""
    sample: dict[str, dict[str, str]] = json.loads(SAMPLE_ENV.read_text())
    return next(v["MEMORY_HASH_KEY"] for v in sample.values() if "MEMORY_HASH_KEY" in v)


def taken_port(args: argparse.Namespace) -> str | None:
    """One line saying which port is taken and what to do, or None."""
    if not port_is_free(args.http_port):
        return f"port {args.http_port} is already taken; pass ARGS='--http-port N'"
    if args.port and not port_is_free(args.port, args.dynamodb_host):
        return (
            f"port {args.port} on {args.dynamodb_host} for the local DynamoDB is already taken "
            "(another make dev, or DynamoDB Local?); stop it, or pass ARGS='--port N' "
            f"(events/env.json expects {DYNAMODB_PORT})"
        )
    return None


def settings_lines(stack: LocalStack, args: argparse.Namespace) -> list[str]:
    """What the banner says of settings that differ from template.yaml's."""
    lines = []
    if args.batch_window is not None:
        lines.append(
            f"Stream batching window: {args.batch_window:g} s for every function "
            f"(template.yaml: {stack.template_batching_window():g} s for ConsolidateFunction)"
        )
    honoured, ignored = stack.shell_settings(), stack.shell_ignored()
    if honoured:
        lines.append(f"From your shell, over template.yaml: {', '.join(honoured)}")
    if ignored:
        lines.append(f"Ignored from your shell (make dev wires them itself): {', '.join(ignored)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    problem = taken_port(args)
    if problem:
        print(f"make dev: {problem}", file=sys.stderr)
        return 2
    shell = dict(os.environ)  # before the stack sets the functions' environment
    public_key = os.environ.get("DISCORD_PUBLIC_KEY") or TEST_PUBLIC_KEY
    server: MotoServer | None = None
    stack: LocalStack | None = None
    stop = threading.Event()
    try:
        server = MotoServer(args.port, host=args.dynamodb_host).start()
        stack = LocalStack(
            server.url,
            table_name=TABLE_NAME,
            parameters={
                "MemoryModel": os.environ.get("MEMORY_MODEL", "rules"),
                "ChatModel": os.environ.get("CHAT_MODEL", "rules"),
                "MemoryModelBaseUrl": os.environ.get("MEMORY_MODEL_BASE_URL", ""),
                "DiscordPublicKey": public_key,
                "DiscordApplicationId": os.environ.get(
                    "DISCORD_APPLICATION_ID", "1399999999999999999"
                ),
            },
            environment={
                **(sample_signing_environment() if public_key == TEST_PUBLIC_KEY else {}),
                **search_environment(),
                "MEMORY_HASH_KEY": os.environ.get("MEMORY_HASH_KEY") or sample_hash_key(),
                # Deployed, the key is a secret; locally it is given directly.
                "MEMORY_MODEL_API_KEY": os.environ.get("MEMORY_MODEL_API_KEY", ""),
            },
            shell=shell,  # nosec B604 # a copy of os.environ passed as settings, not subprocess shell=True
            echo=True,
            batching_window=args.batch_window,
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
        print(
            f"Local DynamoDB: {server.url} (moto server on {args.dynamodb_host}, "
            f"pid {server.pid}), table {TABLE_NAME}"
        )
        if args.port != DYNAMODB_PORT:
            print(
                f"events/env.json expects port {DYNAMODB_PORT}: sam local invoke will not find it"
            )
        print(
            f"Memory model: {os.environ.get('MEMORY_MODEL', 'rules')}; chat model: "
            f"{os.environ.get('CHAT_MODEL', 'rules')} (mention the bot in a message sent to "
            f"{base}/ingest: the reply it would post is printed; "
            f"sam local invoke AnswerFunction posts to {base}{API_PREFIX})"
        )
        for line in settings_lines(stack, args):
            print(line)
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
        if stack is not None:
            stack.stop()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
