"""A fake of Discord's REST API on 127.0.0.1, for tests that talk HTTP to "Discord".

It serves what the bot uses, under the same paths as `https://discord.com/api/v10`:

    GET|PUT  /applications/{app}/commands                  needs `Authorization: Bot <token>`
    GET|PUT  /applications/{app}/guilds/{guild}/commands   needs `Authorization: Bot <token>`
    PATCH    /webhooks/{app}/{token}/messages/@original    no bot token (the path holds one)
    POST     /webhooks/{app}/{token}                       a follow-up message
    POST     /channels/{channel}/messages                  needs the bot token; a message
    POST     /channels/{channel}/typing                    needs the bot token; 204
    GET      /channels/{channel}/messages?after=           a channel's past (`history`:
                                                           tests/support/fake_history.py)

Commands are stored per application and guild, so GET answers what the last PUT stored,
with the server-side fields a real answer carries (ids kept across overwrites by name
and type, a version, defaults filled in). Channel messages are kept per channel
(`channel_messages`) and answered as Discord's message object, written by the bot
(`BOT_USER_ID`); a nonce sent with `enforce_nonce` is honoured (the same nonce again returns
the message it created, and creates none). Every request is recorded; a test can script
the next answers (`rate_limit_once`, `fail_once`, `script`), refuse every post to a channel
(`forbid`), and wait for a request that a background thread makes (`wait_for`).

Off by default, `enforce_buckets(limit, window)` makes channel posts and history reads obey
a rate limit as Discord's do: each channel's `POST` (and, apart, `GET`)
`/channels/{id}/messages` allows `limit` requests a `window`, answers carry
`X-RateLimit-*` headers, and a request over the limit gets a 429 (counted in
`rate_limited`).

Use the `fake_discord` fixture and point the code at `fake_discord.url` (for instance
through `DISCORD_API_BASE`). To make the fixture visible in a test module, import it under
its function name, which keeps ruff from reading the test parameter as a redefinition:

    from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401

    def test_something(fake_discord: FakeDiscordRest) -> None: ...

(or list "tests.support.fake_discord" in `pytest_plugins` of tests/conftest.py). Outside pytest,
`with FakeDiscordRest.running() as fake:` does the same.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest

from tests.support.fake_history import ChannelHistory

API_PREFIX = "/api/v10"
BOT_TOKEN = "fake-bot-token.Xy9.secret-part"
APPLICATION_ID = "500000000000000001"
# The bot's user id (the same as localrun/gateway.py's BOT): the author of the messages it posts.
BOT_USER_ID = "399999999999999999"
_DISCORD_EPOCH_MS = 1_420_070_400_000

_COMMANDS = re.compile(r"^/applications/(\d+)(?:/guilds/(\d+))?/commands$")
_ORIGINAL = re.compile(r"^/webhooks/(\d+)/([^/]+)/messages/@original$")
_FOLLOWUP = re.compile(r"^/webhooks/(\d+)/([^/]+)$")
_CHANNEL_MESSAGES = re.compile(r"^/channels/(\d+)/messages$")
_TYPING = re.compile(r"^/channels/(\d+)/typing$")
_DM_CHANNELS = "/users/@me/channels"
_MY_GUILDS = "/users/@me/guilds"
_MEMBER = re.compile(r"^/guilds/(\d+)/members/(\d+)$")
_NAME = re.compile(r"^[-_\w]{1,32}$")
# The bucket hash the channel messages route answers with (any opaque string, as Discord's).
MESSAGES_BUCKET = "80c17d2f203122d936070c88c8d10f33"
HISTORY_BUCKET = "2f8a1d6c7e0b4a5f9c3d8e1b6a7f0c21"


@dataclass
class RecordedRequest:
    method: str
    path: str  # below the API prefix, URL-decoded, without the query
    query: str
    authorization: str | None
    headers: dict[str, str]
    body: Any  # parsed JSON, or the raw bytes when it was not JSON, or None


@dataclass
class ScriptedReply:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    method: str | None = None  # only for requests with this method
    path_contains: str | None = None  # only for requests whose path contains this


class FakeDiscordRest:
    """The server's state and the test's handle on it; `url` is the API base URL."""

    def __init__(self, bot_token: str = BOT_TOKEN) -> None:
        self.bot_token = bot_token
        self.requests: list[RecordedRequest] = []
        # (application id, guild id or None) -> commands as stored
        self.commands: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
        # (application id, interaction token) -> the original response's message
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.followups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        # channel id -> the messages posted there, oldest first
        self.channel_messages: dict[str, list[dict[str, Any]]] = {}
        # channel id -> the JSON error code every post there is refused with (403)
        self.forbidden: dict[str, int] = {}
        # user id -> the bot's DM channel with them (POST /users/@me/channels)
        self.dm_channels: dict[str, str] = {}
        # channel id -> its messages as they stand now (GET /channels/{id}/messages)
        self.history = ChannelHistory()
        # guild id -> its members' ids (GET /guilds/{guild}/members/{user}); a guild not here
        # is one the bot is not in (404 Unknown Guild)
        self.members: dict[str, set[str]] = {}
        self._script: list[ScriptedReply] = []
        self._buckets: _Buckets | None = None
        # the channel posts refused with a 429 by `enforce_buckets`
        self.rate_limited: list[RecordedRequest] = []
        self._ids = count(900000000000000001)
        self._changed = threading.Condition()
        self._server = _Server(self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}{API_PREFIX}"

    @classmethod
    @contextmanager
    def running(cls, bot_token: str = BOT_TOKEN) -> Iterator[FakeDiscordRest]:
        """A started server, stopped on exit."""
        fake = cls(bot_token).start()
        try:
            yield fake
        finally:
            fake.stop()

    def start(self) -> FakeDiscordRest:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- scripting -----------------------------------------------------------------------------

    def script(
        self,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        *,
        method: str | None = None,
        path_contains: str | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next `times` matching requests with this instead of the normal answer."""
        with self._changed:
            for _ in range(times):
                self._script.append(
                    ScriptedReply(status, body, dict(headers or {}), method, path_contains)
                )

    def rate_limit_once(
        self, retry_after: float = 0.05, *, method: str | None = None, header: bool = True
    ) -> None:
        """The next (matching) request gets a 429 shaped as Discord sends it."""
        headers = {"Retry-After": str(max(1, round(retry_after)))} if header else {}
        headers.update({"X-RateLimit-Scope": "user", "X-RateLimit-Limit": "1"})
        self.script(
            429,
            {"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
            headers,
            method=method,
        )

    def fail_once(self, status: int = 500, *, method: str | None = None) -> None:
        self.script(status, {"message": "500: Internal Server Error", "code": 0}, method=method)

    def enforce_buckets(
        self, limit: int = 5, window: float = 0.2, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """From now on each channel's message posts obey `limit` a `window` seconds (of
        `clock`: a test may move its own)."""
        with self._changed:
            self._buckets = _Buckets(limit, window, clock)

    def close_dms(self, user_id: str) -> None:
        """The user's DMs are closed to the bot: posts there are refused (403, 50007)."""
        self.forbidden[self._dm_channel(user_id)] = 50007

    def _dm_channel(self, user_id: str) -> str:
        return self.dm_channels.setdefault(user_id, str(next(self._ids)))

    def forbid(self, channel_id: str, code: int = 50013) -> None:
        """Every post to the channel (messages, typing) gets 403, as when the bot lacks
        access (50001) or permission (50013) there."""
        with self._changed:
            self.forbidden[channel_id] = code

    # -- inspection ----------------------------------------------------------------------------

    def requests_matching(
        self, method: str | None = None, path_contains: str | None = None
    ) -> list[RecordedRequest]:
        with self._changed:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method)
                and (path_contains is None or path_contains in r.path)
            ]

    def wait_for(
        self, predicate: Callable[[RecordedRequest], bool], timeout: float = 2.0
    ) -> RecordedRequest:
        """The first recorded request matching `predicate`, waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for request in self.requests:
                    if predicate(request):
                        return request
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [f"{r.method} {r.path}" for r in self.requests]
                    raise AssertionError(f"no matching request within {timeout} s; saw {seen}")
                self._changed.wait(left)

    # -- request handling (called from the server's threads) -----------------------------------

    def _handle(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        with self._changed:
            self.requests.append(request)
            self._changed.notify_all()
            for i, reply in enumerate(self._script):
                if (reply.method is None or reply.method == request.method) and (
                    reply.path_contains is None or reply.path_contains in request.path
                ):
                    del self._script[i]
                    return reply.status, reply.body, reply.headers
            limited = _CHANNEL_MESSAGES.match(request.path) and request.method in ("POST", "GET")
            if self._buckets is None or not limited:
                return self._route(request)
            # A channel's posts and its history reads are two buckets, as Discord's.
            bucket = f"{request.method} {request.path.split('/')[2]}"
            left = self._buckets.take(bucket)
            headers = self._buckets.headers(bucket)
            if left is None:
                self.rate_limited.append(request)
                refusal = self._buckets.refusal(bucket)
                retry = str(math.ceil(refusal["retry_after"]))
                headers.update({"Retry-After": retry, "X-RateLimit-Scope": "user"})
                return 429, refusal, headers
            status, body, own = self._route(request)
            return status, body, {**own, **headers}

    def _route(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        if match := _COMMANDS.match(request.path):
            if request.authorization != f"Bot {self.bot_token}":
                return 401, {"message": "401: Unauthorized", "code": 0}, {}
            key = (match.group(1), match.group(2))
            if request.method == "GET":
                return 200, self.commands.get(key, []), {}
            if request.method == "PUT":
                return self._overwrite(key, request.body)
            return 405, {"message": "405: Method Not Allowed", "code": 0}, {}
        if match := _ORIGINAL.match(request.path):
            if request.method != "PATCH":
                return 405, {"message": "405: Method Not Allowed", "code": 0}, {}
            message = {
                "id": str(next(self._ids)),
                "type": 20,
                "application_id": match.group(1),
                # The reply to an interaction is the application's bot user's message.
                "author": {"id": match.group(1), "username": "memorybot", "bot": True},
                "timestamp": "2026-01-01T00:00:00+00:00",
                **(request.body if isinstance(request.body, dict) else {}),
            }
            self.messages[(match.group(1), match.group(2))] = message
            return 200, message, {}
        if (match := _FOLLOWUP.match(request.path)) and request.method == "POST":
            message = {
                "id": str(next(self._ids)),
                "type": 0,
                **(request.body if isinstance(request.body, dict) else {}),
            }
            self.followups.setdefault((match.group(1), match.group(2)), []).append(message)
            return 200, message, {}
        if request.path == _DM_CHANNELS and request.method == "POST":
            return self._open_dm(request)
        return self._channel(request)

    def _channel(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        if (member := _MEMBER.match(request.path)) and request.method == "GET":
            return self._member(request, member.group(1), member.group(2))
        if request.path == _MY_GUILDS and request.method == "GET":
            return self._my_guilds(request)
        if match := _CHANNEL_MESSAGES.match(request.path) or _TYPING.match(request.path):
            return self._channel_post(request, match.group(1))
        return 404, {"message": "404: Not Found", "code": 0}, {}

    def _member(
        self, request: RecordedRequest, guild_id: str, user_id: str
    ) -> tuple[int, Any, dict[str, str]]:
        if request.authorization != f"Bot {self.bot_token}":
            return 401, {"message": "401: Unauthorized", "code": 0}, {}
        if guild_id not in self.members:
            return 404, {"message": "Unknown Guild", "code": 10004}, {}
        if user_id not in self.members[guild_id]:
            return 404, {"message": "Unknown Member", "code": 10007}, {}
        return 200, {"user": {"id": user_id}, "roles": [], "joined_at": "2026-01-01T00:00:00"}, {}

    def _my_guilds(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        """The guilds the bot is in (those `members` names), by id above `after`."""
        if request.authorization != f"Bot {self.bot_token}":
            return 401, {"message": "401: Unauthorized", "code": 0}, {}
        asked = dict(parse_qsl(request.query))
        after, limit = int(asked.get("after", "0")), min(int(asked.get("limit", "200")), 200)
        ids = sorted(int(g) for g in self.members if int(g) > after)[:limit]
        return 200, [{"id": str(g), "name": f"guild {g}"} for g in ids], {}

    def _open_dm(self, request: RecordedRequest) -> tuple[int, Any, dict[str, str]]:
        recipient = (request.body or {}).get("recipient_id")
        if request.authorization != f"Bot {self.bot_token}" or not isinstance(recipient, str):
            return 400, {"message": "Invalid Form Body", "code": 50035}, {}
        return 200, {"id": self._dm_channel(recipient), "type": 1}, {}

    def _channel_post(
        self, request: RecordedRequest, channel_id: str
    ) -> tuple[int, Any, dict[str, str]]:
        reading = request.method == "GET" and not request.path.endswith("/typing")
        if request.method != "POST" and not reading:
            return 405, {"message": "405: Method Not Allowed", "code": 0}, {}
        if request.authorization != f"Bot {self.bot_token}":
            return 401, {"message": "401: Unauthorized", "code": 0}, {}
        if reading:
            status, answer = self.history.answer(channel_id, request.query)
            return status, answer, {}
        if channel_id in self.forbidden:
            code = self.forbidden[channel_id]
            text = {50001: "Missing Access", 50007: "Cannot send messages to this user"}.get(
                code, "Missing Permissions"
            )
            return 403, {"message": text, "code": code}, {}
        if request.path.endswith("/typing"):
            return 204, None, {}
        body = request.body if isinstance(request.body, dict) else {}
        content = body.get("content")
        if not isinstance(content, str) or not 1 <= len(content) <= 2000:
            return _invalid({"content": _error("BASE_TYPE_BAD_LENGTH", "Must be 2000 or fewer")})
        posted = self.channel_messages.setdefault(channel_id, [])
        nonce = body.get("nonce")
        if body.get("enforce_nonce") and nonce is not None:
            for message in posted:
                if message.get("nonce") == nonce:
                    return 200, message, {}
        message = self._message(channel_id, body)
        posted.append(message)
        return 200, message, {}

    def _message(self, channel_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """A message object as Discord answers a post, written by the bot."""
        message_id = next(self._ids)
        at = datetime.fromtimestamp(((message_id >> 22) + _DISCORD_EPOCH_MS) / 1000, tz=UTC)
        reference = body.get("message_reference")
        message: dict[str, Any] = {
            "id": str(message_id),
            "channel_id": channel_id,
            "author": {
                "id": BOT_USER_ID,
                "username": "memorybot",
                "global_name": None,
                "bot": True,
            },
            "content": body["content"],
            "timestamp": at.isoformat(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "type": 19 if isinstance(reference, dict) else 0,
        }
        if isinstance(reference, dict):
            message["message_reference"] = {
                "type": 0,
                "channel_id": channel_id,
                "message_id": reference.get("message_id"),
            }
        if body.get("nonce") is not None:
            message["nonce"] = body["nonce"]
        return message

    def _overwrite(self, key: tuple[str, str | None], body: Any) -> tuple[int, Any, dict[str, str]]:
        if not isinstance(body, list):
            return _invalid(
                {"_errors": [{"code": "BASE_TYPE_ARRAY", "message": "Must be an array"}]}
            )
        errors: dict[str, Any] = {}
        for i, command in enumerate(body):
            problems: dict[str, Any] = {}
            if not isinstance(command, dict) or not _NAME.match(str(command.get("name", ""))):
                problems["name"] = _error("APPLICATION_COMMAND_INVALID_NAME", "Invalid name")
            elif not 1 <= len(str(command.get("description", ""))) <= 100:
                problems["description"] = _error(
                    "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length."
                )
            if problems:
                errors[str(i)] = problems
        if errors:
            return _invalid(errors)
        held = {(c["type"], c["name"]): c for c in self.commands.get(key, [])}
        stored = []
        for command in body:
            kind = command.get("type") or 1
            previous = held.get((kind, command["name"]))
            item = {
                "id": previous["id"] if previous else str(next(self._ids)),
                "application_id": key[0],
                "version": str(next(self._ids)),
                "type": kind,
                "default_member_permissions": None,
                "nsfw": False,
                **command,
            }
            if key[1] is None:
                item.setdefault("integration_types", [0])
                item.setdefault("contexts", None)
            else:
                item["guild_id"] = key[1]
            if "options" in item:
                item["options"] = [_stored_option(o) for o in item["options"]]
            stored.append(item)
        self.commands[key] = stored
        return 200, stored, {}


class _Buckets:
    """Per channel, a fixed window of `limit` posts, as Discord's per-route buckets count."""

    def __init__(self, limit: int, window: float, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}  # channel -> (start, posts taken)

    def take(self, channel_id: str) -> int | None:
        """The posts left after this one, or None when this one is over the limit."""
        now = self._clock()
        start, taken = self._windows.get(channel_id, (now, 0))
        if now >= start + self.window:
            start, taken = now, 0
        if taken >= self.limit:
            self._windows[channel_id] = (start, taken)
            return None
        self._windows[channel_id] = (start, taken + 1)
        return self.limit - taken - 1

    def reset_after(self, channel_id: str) -> float:
        start, _ = self._windows[channel_id]
        # Rounded up to the millisecond: a client waiting this long is never early.
        return math.ceil(max(start + self.window - self._clock(), 0.0) * 1000) / 1000

    def headers(self, channel_id: str) -> dict[str, str]:
        _, taken = self._windows[channel_id]
        reset_after = self.reset_after(channel_id)
        return {
            "X-RateLimit-Limit": str(self.limit),
            "X-RateLimit-Remaining": str(max(self.limit - taken, 0)),
            "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": HISTORY_BUCKET
            if channel_id.startswith("GET")
            else MESSAGES_BUCKET,
        }

    def refusal(self, channel_id: str) -> dict[str, Any]:
        retry = self.reset_after(channel_id)
        return {"message": "You are being rate limited.", "retry_after": retry, "global": False}


def _stored_option(option: dict[str, Any]) -> dict[str, Any]:
    # Answers leave out `required` and `autocomplete` when false: the client must treat
    # "absent" and "false" alike when it compares.
    stored = {k: v for k, v in option.items() if not (k in ("required", "autocomplete") and not v)}
    if "options" in stored:
        stored["options"] = [_stored_option(o) for o in stored["options"]]
    return stored


def _error(code: str, message: str) -> dict[str, Any]:
    return {"_errors": [{"code": code, "message": message}]}


def _invalid(errors: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
    return 400, {"code": 50035, "message": "Invalid Form Body", "errors": errors}, {}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, fake: FakeDiscordRest) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive, as a real client pool expects

    def _serve(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body: Any = None
        kind = self.headers.get("Content-Type") or ""
        if raw and kind.startswith("multipart/form-data"):
            body = _multipart(kind, raw)
        elif raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if path.startswith(API_PREFIX):
            path = path[len(API_PREFIX) :]
        request = RecordedRequest(
            method=self.command,
            path=path,
            query=parts.query,
            authorization=self.headers.get("Authorization"),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        status, payload, headers = self.server.fake._handle(request)
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_PATCH = do_POST = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep pytest output quiet


def _multipart(kind: str, raw: bytes) -> dict[str, Any]:
    """A multipart post as Discord reads it: `payload_json`'s fields, and the files (by
    name, their bytes) under `_files`."""
    message = BytesParser(policy=default).parsebytes(f"Content-Type: {kind}\r\n\r\n".encode() + raw)
    body: dict[str, Any] = {"_files": {}}
    for part in message.iter_parts():
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        if part.get_param("name", header="content-disposition") == "payload_json":
            body.update(json.loads(data))
        elif part.get_filename():
            body["_files"][part.get_filename()] = data
    return body


@pytest.fixture(name="fake_discord")
def fake_discord_fixture() -> Iterator[FakeDiscordRest]:
    with FakeDiscordRest.running() as fake:
        yield fake
