"""A fake Discord gateway for many shards, enforcing the rules the relay must keep.

- IDENTIFY: one per 5 s in each `max_concurrency` bucket (`shard % max_concurrency`); an
  extra one is answered with INVALID_SESSION (d=false), and still counts against the
  day's session starts (past 1,000 Discord would reset the token: `token_reset`).
- RESUME: replays every event of the session after the given sequence, then RESUMED; a
  session that is unknown, invalidated or of another shard gets INVALID_SESSION.
- Events are emitted into a shard's current session whether or not a client is
  connected (Discord buffers them for a resumable session), and sent live when one is.
- A client closing with 1000 or 1001 ends its session, as Discord does.

It speaks through a `Link` (two queues of frames): `MemoryConnector` hands the relay's
client one directly (tests over simulated time), `serve_aiohttp` puts it behind a real
websocket on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from relay.protocol import IDENTIFY_WINDOW_SECONDS, Op

_CLOSED = object()
# The table the `dynamodb` fixture creates (tests/conftest.py's TABLE, which
# test_leases checks), named here so that make bench need not import conftest.
TABLE = "MemoryTable"


@dataclass
class FakeSession:
    session_id: str
    shard: int
    events: list[dict[str, Any]] = field(default_factory=list)  # dispatch frames, by seq
    valid: bool = True
    link: Link | None = None


class Link:
    """Frames both ways between one client and the fake, and how it was closed."""

    def __init__(self) -> None:
        self.to_client: asyncio.Queue[Any] = asyncio.Queue()
        self.to_server: asyncio.Queue[Any] = asyncio.Queue()
        self.close_code: int | None = None
        self.closed = False

    def close(self, code: int) -> None:
        if not self.closed:
            self.closed = True
            self.close_code = code
            self.to_client.put_nowait(_CLOSED)
            self.to_server.put_nowait(_CLOSED)


class MemorySocket:
    """The client's end of a `Link` (relay.websocket.Socket)."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self.close_code: int | None = None

    async def receive(self) -> dict[str, Any] | None:
        frame = await self._link.to_client.get()
        if frame is _CLOSED:
            self.close_code = self._link.close_code
            return None
        assert isinstance(frame, dict)
        return frame

    async def send(self, frame: dict[str, Any]) -> None:
        if not self._link.closed:
            self._link.to_server.put_nowait(json.loads(json.dumps(frame)))

    async def close(self, code: int) -> None:
        self._link.close(code)
        self.close_code = code


class FakeShardedGateway:
    def __init__(
        self,
        *,
        shard_count: int,
        max_concurrency: int = 1,
        clock: Callable[[], float],
        heartbeat_ms: int = 45_000,
    ) -> None:
        self.shard_count = shard_count
        self.max_concurrency = max_concurrency
        self.clock = clock
        self.heartbeat_ms = heartbeat_ms
        self.url = "ws://gateway.fake"
        self.sessions: dict[str, FakeSession] = {}
        self.current: dict[int, FakeSession] = {}  # each shard's newest session
        self.identifies: list[tuple[float, int, bool]] = []  # (time, shard, accepted)
        self.resumes: list[tuple[int, bool]] = []  # (shard, accepted)
        self.resumed_from: list[tuple[int, int]] = []  # (shard, seq) of each accepted RESUME
        self.closes: list[int | None] = []  # close codes clients sent
        self.emitted: dict[int, list[str]] = {}  # message ids, per shard
        self._bucket_free: dict[int, float] = {}
        self._ids = itertools.count(1)
        self.tasks: set[asyncio.Task[None]] = set()
        self.rest: list[str | None] = []  # Authorization headers of GET /gateway/bot

    @property
    def identifies_refused(self) -> int:
        return sum(1 for _, _, ok in self.identifies if not ok)

    @property
    def token_reset(self) -> bool:
        return len(self.identifies) > 1000

    def connect(self) -> Link:
        link = Link()
        task = asyncio.ensure_future(self.serve(link))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return link

    def ready_shards(self) -> set[int]:
        return {
            s
            for s, session in self.current.items()
            if session.valid and session.link and not session.link.closed
        }

    # Test controls.

    def emit(self, shard: int, count: int = 1) -> list[str]:
        """New messages in one of the shard's guilds, into its current session."""
        session = self.current[shard]
        ids = []
        for _ in range(count):
            message_id = str(10**17 + next(self._ids))
            ids.append(message_id)
            self._append(session, "MESSAGE_CREATE", _message(message_id, shard))
        self.emitted.setdefault(shard, []).extend(ids)
        return ids

    def invalidate_all(self) -> None:
        """A Discord incident: every session ends and no RESUME is accepted."""
        for session in self.sessions.values():
            session.valid = False
            if session.link is not None:
                session.link.close(4000)

    def drop(self, shard: int) -> None:
        """Close one shard's connection (the session stays resumable)."""
        link = self.current[shard].link
        if link is not None:
            link.close(4000)

    # The protocol.

    def _append(self, session: FakeSession, name: str, data: dict[str, Any]) -> None:
        frame = {"op": Op.DISPATCH, "s": len(session.events) + 1, "t": name, "d": data}
        session.events.append(frame)
        if session.link is not None and not session.link.closed:
            session.link.to_client.put_nowait(frame)

    async def serve(self, link: Link) -> None:
        link.to_client.put_nowait({"op": Op.HELLO, "d": {"heartbeat_interval": self.heartbeat_ms}})
        while True:
            frame = await link.to_server.get()
            if frame is _CLOSED:
                if link.close_code in (1000, 1001):
                    for session in self.sessions.values():
                        if session.link is link:
                            session.valid = False
                self.closes.append(link.close_code)
                return
            op = frame.get("op")
            if op == Op.HEARTBEAT:
                link.to_client.put_nowait({"op": Op.HEARTBEAT_ACK})
            elif op == Op.IDENTIFY:
                self._identify(link, frame["d"])
            elif op == Op.RESUME:
                self._resume(link, frame["d"])

    def _identify(self, link: Link, data: dict[str, Any]) -> None:
        shard, count = data["shard"]
        assert count == self.shard_count, "IDENTIFY with another shard count"
        now = self.clock()
        bucket = shard % self.max_concurrency
        accepted = self._bucket_free.get(bucket, 0.0) <= now
        self.identifies.append((now, shard, accepted))
        if not accepted:
            link.to_client.put_nowait({"op": Op.INVALID_SESSION, "d": False})
            return
        self._bucket_free[bucket] = now + IDENTIFY_WINDOW_SECONDS
        session = FakeSession(f"session-{shard}-{len(self.identifies)}", shard, link=link)
        self.sessions[session.session_id] = session
        self.current[shard] = session
        self._append(
            session,
            "READY",
            {
                "session_id": session.session_id,
                "resume_gateway_url": f"{self.url}/resume",
                "shard": [shard, count],
            },
        )

    def _resume(self, link: Link, data: dict[str, Any]) -> None:
        session = self.sessions.get(data.get("session_id", ""))
        if session is None or not session.valid or self.current.get(session.shard) is not session:
            self.resumes.append((-1 if session is None else session.shard, False))
            link.to_client.put_nowait({"op": Op.INVALID_SESSION, "d": False})
            return
        if session.link is not None and session.link is not link:
            session.link.close(4000)  # Discord closes the older connection of a session
        self.resumes.append((session.shard, True))
        session.link = link
        seq = data.get("seq") or 0
        self.resumed_from.append((session.shard, seq))
        for frame in session.events[seq:]:
            link.to_client.put_nowait(frame)
        link.to_client.put_nowait(
            {"op": Op.DISPATCH, "s": len(session.events), "t": "RESUMED", "d": {}}
        )


def _message(message_id: str, shard: int) -> dict[str, Any]:
    # A guild id whose shard is `shard` is not needed by the relay (it forwards by name).
    return {
        "id": message_id,
        "channel_id": "300",
        "guild_id": str(shard),
        "author": {"id": "200", "username": "alice"},
        "content": f"message {message_id}",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "type": 0,
    }


class MemoryConnector:
    """`connect` for the relay's client: a `Link` straight into the fake."""

    def __init__(self, fake: FakeShardedGateway) -> None:
        self.fake = fake
        self.urls: list[str] = []

    async def connect(self, url: str) -> MemorySocket:
        self.urls.append(url)
        return MemorySocket(self.fake.connect())


async def serve_aiohttp(fake: FakeShardedGateway) -> tuple[web.AppRunner, str]:
    """The fake behind a real websocket on 127.0.0.1; its base URL."""

    async def socket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        link = fake.connect()

        async def pump_out() -> None:
            while True:
                frame = await link.to_client.get()
                if frame is _CLOSED:
                    if not ws.closed:
                        await ws.close(code=link.close_code or 4000)
                    return
                await ws.send_str(json.dumps(frame))

        out = asyncio.ensure_future(pump_out())
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                break
            link.to_server.put_nowait(json.loads(message.data))
        link.close(ws.close_code or 1006)
        await out
        return ws

    async def gateway_bot(request: web.Request) -> web.Response:
        fake.rest.append(request.headers.get("Authorization"))
        limit = {
            "total": 1000,
            "remaining": 1000 - len(fake.identifies),
            "reset_after": 3_600_000,
            "max_concurrency": fake.max_concurrency,
        }
        body = {"url": fake.url, "shards": fake.shard_count, "session_start_limit": limit}
        return web.json_response(body)

    app = web.Application()
    app.router.add_get("/api/v10/gateway/bot", gateway_bot)
    app.router.add_get("/", socket)
    app.router.add_get("/resume/", socket)
    app.router.add_get("/resume", socket)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"ws://127.0.0.1:{port}"
    return runner, fake.url
