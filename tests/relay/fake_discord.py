"""A fake Discord on 127.0.0.1: the few REST routes discord.py calls, and a gateway.

The gateway speaks the real protocol in plain JSON text frames: HELLO, heartbeat ACKs,
READY after IDENTIFY, dispatches with sequence numbers, and then, depending on `script`,
a RECONNECT (op 7) that the client must answer with a RESUME (op 6) on the READY's
resume_gateway_url, an INVALID_SESSION (op 9, not resumable) that forces a new IDENTIFY, or
close code 4011 right after IDENTIFY, as Discord answers an unsharded bot in 2,500 guilds;
or ("events") only the dispatches given, one after another, on one session.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from aiohttp import WSMsgType, web

from localrun import gateway as gw

APPLICATION_ID = gw.BOT
BOT_USER = {
    "id": gw.BOT,
    "username": "memorybot",
    "discriminator": "0",
    "global_name": "Memorybot",
    "avatar": None,
    "bot": True,
}
T0 = 1_767_225_600_000


def complete(event: dict[str, Any]) -> dict[str, Any]:
    """The test builders' payloads, plus the fields discord.py's own models insist on."""
    event = copy.deepcopy(event)
    d = event["d"]
    member_user = (d.get("member") or {}).get("user")
    for user in (d.get("author"), member_user):
        if user is not None:
            user.setdefault("discriminator", "0")
            user.setdefault("avatar", None)
    member = d.get("member")
    if isinstance(member, dict):  # read by discord.py once the guild is in its cache
        member.setdefault("flags", 0)
        member.setdefault("joined_at", "2026-01-01T00:00:00+00:00")
        member.setdefault("deaf", False)
        member.setdefault("mute", False)
    if event["t"] == "MESSAGE_CREATE":
        d.setdefault("pinned", False)
        d.setdefault("mention_roles", [])
        d.setdefault("flags", 0)
    if event["t"] in ("MESSAGE_REACTION_ADD", "MESSAGE_REACTION_REMOVE"):
        d.setdefault("type", 0)
        d.setdefault("burst", False)
    return event


def _json(data: dict[str, Any]) -> web.Response:
    # discord.py decodes a body only when content-type is exactly application/json.
    return web.Response(body=json.dumps(data).encode(), content_type="application/json")


class FakeGateway:
    """Discord's gateway (and the few REST routes discord.py calls before connecting to it)."""

    def __init__(
        self,
        *,
        script: str = "reconnect",
        session_starts_remaining: int = 999,
        events: list[dict[str, Any]] | None = None,
    ) -> None:
        self.script = script
        self.remaining = session_starts_remaining
        self.frames: list[tuple[str, dict[str, Any]]] = []  # (connection, what the client sent)
        self.rest: list[tuple[str, str | None]] = []  # (path, Authorization header)
        self.dispatched: list[dict[str, Any]] = []  # every dispatch sent, as sent
        self.acks = 0
        self.connections: list[str] = []
        self.done = asyncio.Event()
        self.port = 0
        self._seq = 0
        self._runner: web.AppRunner | None = None
        first = gw.message(gw.ALICE, "I love hiking in the Alps", T0)
        self.before = [
            complete(first),
            {
                "t": "TYPING_START",
                "d": {"channel_id": gw.CHANNEL, "user_id": gw.ALICE, "timestamp": T0 // 1000},
            },
            complete(gw.reaction("MESSAGE_REACTION_ADD", first, gw.BOB)),
        ]
        self.after = [
            complete(gw.message(gw.BOT, "Glad to hear it!", T0 + 1000)),
            complete(gw.delete(first)),
        ]
        if events is not None:
            self.before, self.after = events, []
        # Set by the test when it wants more dispatches sent on the open session (`send`).
        self._socket_now: web.WebSocketResponse | None = None

    @property
    def forwardable(self) -> list[dict[str, Any]]:
        return [e for e in self.before + self.after if e["t"].startswith("MESSAGE_")]

    def ops(self, op: int) -> list[tuple[str, dict[str, Any]]]:
        return [(conn, frame) for conn, frame in self.frames if frame.get("op") == op]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/api/v10/users/@me", self._me)
        app.router.add_get("/api/v10/oauth2/applications/@me", self._application)
        app.router.add_get("/api/v10/gateway/bot", self._gateway_bot)
        app.router.add_get("/", self._socket)
        app.router.add_get("/resume", self._socket)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    # REST.

    def _note(self, request: web.Request) -> None:
        self.rest.append((request.path, request.headers.get("Authorization")))

    async def _me(self, request: web.Request) -> web.Response:
        self._note(request)
        return _json(BOT_USER)

    async def _application(self, request: web.Request) -> web.Response:
        self._note(request)
        return _json(
            {
                "id": APPLICATION_ID,
                "name": "Memorybot",
                "description": "",
                "icon": None,
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": {**BOT_USER, "id": gw.ALICE, "bot": False},
                "verify_key": "0" * 64,
                "flags": 0,
            }
        )

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        self._note(request)
        return _json(
            {
                "url": f"ws://127.0.0.1:{self.port}",
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": self.remaining,
                    "reset_after": 3_600_000,
                    "max_concurrency": 1,
                },
            }
        )

    # The gateway.

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        connection = f"{request.path}#{len(self.connections) + 1}"
        self.connections.append(connection)
        await ws.send_json({"op": 10, "d": {"heartbeat_interval": 45_000}, "s": None, "t": None})
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                break
            frame = json.loads(message.data)
            self.frames.append((connection, frame))
            if frame["op"] == 1:
                self.acks += 1
                await ws.send_json({"op": 11, "d": None, "s": None, "t": None})
            elif frame["op"] == 2:
                await self._identified(ws)
            elif frame["op"] == 6:
                await self._resumed(ws, frame["d"])
        return ws

    async def _dispatch(self, ws: web.WebSocketResponse, event: dict[str, Any]) -> None:
        self._seq += 1
        frame = {"op": 0, "s": self._seq, "t": event["t"], "d": event["d"]}
        self.dispatched.append(frame)
        await ws.send_str(json.dumps(frame))

    async def _ready(self, ws: web.WebSocketResponse, session: str) -> None:
        ready = {
            "v": 10,
            "user": BOT_USER,
            "guilds": [],
            "session_id": session,
            "resume_gateway_url": f"ws://127.0.0.1:{self.port}/resume",
            "application": {"id": APPLICATION_ID, "flags": 0},
        }
        await self._dispatch(ws, {"t": "READY", "d": ready})

    async def _identified(self, ws: web.WebSocketResponse) -> None:
        if self.script == "sharding_required":
            await ws.close(code=4011, message=b"Sharding required.")
            return
        identifies = len(self.ops(2))
        await self._ready(ws, f"session-{identifies}")
        if identifies > 1:  # the new session after an invalidated one
            for event in self.after:
                await self._dispatch(ws, event)
            self.done.set()
            return
        for event in self.before:
            await self._dispatch(ws, event)
        self._socket_now = ws
        if self.script == "events":
            self.done.set()
        elif self.script == "reconnect":
            await ws.send_json({"op": 7, "d": None, "s": None, "t": None})
        elif self.script == "invalidate":
            await ws.send_json({"op": 9, "d": False, "s": None, "t": None})

    async def send(self, events: list[dict[str, Any]]) -> None:
        """More dispatches on the session open now (script "events")."""
        assert self._socket_now is not None, "no session is open"
        for event in events:
            await self._dispatch(self._socket_now, event)

    async def _resumed(self, ws: web.WebSocketResponse, resume: dict[str, Any]) -> None:
        if resume.get("session_id") != "session-1":
            await ws.send_json({"op": 9, "d": False, "s": None, "t": None})
            return
        await self._dispatch(ws, {"t": "RESUMED", "d": {}})
        for event in self.after:
            await self._dispatch(ws, event)
        self.done.set()
