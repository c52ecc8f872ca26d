"""The one websocket the relay's gateway client needs: JSON text frames in and out, and
a close code it chooses. Over aiohttp (discord.py's own transport) in production; tests
may connect the client to an in-memory gateway through the same `Socket` protocol."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp

log = logging.getLogger(__name__)

# Discord's frames are far below this; a frame above it is dropped with the connection.
MAX_FRAME_BYTES = 16 * 1024 * 1024


class Socket(Protocol):
    close_code: int | None

    async def receive(self) -> dict[str, Any] | None:
        """The next frame, or None once the connection is closed (`close_code` says how)."""

    async def send(self, frame: dict[str, Any]) -> None: ...

    async def close(self, code: int) -> None: ...


Connect = Callable[[str], Awaitable[Socket]]


class AiohttpSocket:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self.close_code: int | None = None

    async def receive(self) -> dict[str, Any] | None:
        while True:
            message = await self._ws.receive()
            if message.type is aiohttp.WSMsgType.TEXT:
                try:
                    frame = json.loads(message.data)
                except ValueError:
                    log.warning("gateway sent a frame that is not JSON; skipped")
                    continue
                if isinstance(frame, dict):
                    return frame
                continue
            if message.type in (aiohttp.WSMsgType.PING, aiohttp.WSMsgType.PONG):
                continue
            self.close_code = self._ws.close_code
            return None

    async def send(self, frame: dict[str, Any]) -> None:
        await self._ws.send_str(json.dumps(frame, separators=(",", ":")))

    async def close(self, code: int) -> None:
        await self._ws.close(code=code)


class AiohttpConnector:
    """One HTTP session for every shard of the task; `connect` opens one websocket."""

    def __init__(self, timeout_seconds: float = 30.0) -> None:
        self._timeout = timeout_seconds
        self._session: aiohttp.ClientSession | None = None

    async def connect(self, url: str) -> Socket:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        ws = await self._session.ws_connect(
            url,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=self._timeout),
            max_msg_size=MAX_FRAME_BYTES,
            autoping=True,
        )
        return AiohttpSocket(ws)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
