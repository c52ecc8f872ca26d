"""A local stand-in for the part of Discord's REST API the bot posts through, on 127.0.0.1.

`make demo` and `make dev` point AnswerFunction at it (DISCORD_API_BASE), so an answer runs
the real path (httpx, routes, bodies) and, instead of reaching Discord, is printed and kept:

    POST   /channels/{channel}/messages                  a message (a reply, with its reference)
    POST   /channels/{channel}/typing                    the typing indicator
    PATCH  /webhooks/{app}/{token}/messages/@original    the edit that finishes a deferred /ask

Each posted message is answered as Discord would, with a fresh snowflake id and the bot as
author, so the answer is recorded as an observation like any message of the bot.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

API_PREFIX = "/api/v10"
DISCORD_EPOCH_MS = 1_420_070_400_000
_MESSAGES = re.compile(r"^/channels/(\d+)/messages$")
_TYPING = re.compile(r"^/channels/(\d+)/typing$")
_ORIGINAL = re.compile(r"^/webhooks/(\d+)/([^/]+)/messages/@original$")


@dataclass(frozen=True)
class Posted:
    channel_id: str
    content: str
    reply_to: str | None


class DiscordSink:
    def __init__(self, bot_user_id: str, say: Callable[[str], None] = print) -> None:
        self.bot_user_id = bot_user_id
        self.posted: list[Posted] = []
        self._say = say
        self._sequence = itertools.count()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{API_PREFIX}"

    def start(self) -> DiscordSink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def message(self, channel_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """Keep and print a posted message; Discord's answer to it."""
        now_ms = int(time.time() * 1000)
        with self._lock:
            message_id = str(((now_ms - DISCORD_EPOCH_MS) << 22) | next(self._sequence) % 4096)
            reference = (body.get("message_reference") or {}).get("message_id")
            posted = Posted(channel_id, str(body.get("content") or ""), reference)
            self.posted.append(posted)
        where = f"in reply to {reference}" if reference else "in the channel"
        self._say(f"[bot -> channel {channel_id}, {where}] {posted.content}")
        return {
            "id": message_id,
            "channel_id": channel_id,
            "type": 19 if reference else 0,
            "content": posted.content,
            "author": {"id": self.bot_user_id, "username": "memorybot", "bot": True},
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now_ms / 1000)),
            "mentions": [],
            **({"message_reference": {"message_id": reference}} if reference else {}),
        }

    def respond(
        self, method: str, path: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any] | None]:
        """Discord's answer to one request (path below the API prefix)."""
        path = path.split("?", 1)[0].removeprefix(API_PREFIX)
        if method == "POST" and (match := _MESSAGES.match(path)):
            return 200, self.message(match.group(1), body)
        if method == "POST" and _TYPING.match(path):
            return 204, None
        if method == "PATCH" and _ORIGINAL.match(path):
            return 200, self.message(str(body.get("channel_id") or "0"), body)
        return 404, {"message": "Unknown route", "code": 0}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                status, body = sink.respond(self.command, self.path, read_json(self.rfile, length))
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_PATCH = _serve

        return Handler


def read_json(stream: Any, length: int) -> dict[str, Any]:
    """A request body as a JSON object; {} for anything else."""
    try:
        value = json.loads(stream.read(length) if length else b"{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
