"""The relay's own gateway client for one shard: IDENTIFY or RESUME, heartbeats, dispatches.

Why not discord.py's: its clients always IDENTIFY when they start, so a task that takes
over a shard could never RESUME the session the previous task held, and Discord replays
missed events only to a RESUME. This client starts from the session saved in the table
(relay.store) when there is one, and keeps the table's copy current (relay.fleet saves
`snapshot()` with every lease renewal).

What it saves is safe to resume from: the sequence of the last event the sink has
settled (`Forwarder.submit_ticket`), not merely received, so a task killed with events
in its memory loses none: the next RESUME replays them.

It never closes a socket with 1000 or 1001 (they end the session for Discord): the
handover, a zombie connection and RECONNECT all close with `RESUMABLE_CLOSE`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import aiohttp

from relay.backoff import Backoff
from relay.identify_gate import IdentifyBudgetSpent, IdentifyGate, Offload
from relay.logs import GAP_EVENT, fields
from relay.protocol import (
    FATAL_CLOSE_CODES,
    INVALID_SESSION_WAIT,
    NEW_SESSION_CLOSE_CODES,
    RESUMABLE_CLOSE,
    Op,
    gateway_address,
    heartbeat_payload,
    identify_payload,
    resume_payload,
)
from relay.store import SavedSession, Store
from relay.websocket import Connect, Socket

log = logging.getLogger(__name__)

# Connections to a resume URL that fail in a row before the session is given up.
RESUME_CONNECT_ATTEMPTS = 3


class Submitter(Protocol):
    def submit_ticket(self, name: str, payload: Any) -> tuple[bool, int]: ...

    @property
    def settled(self) -> int: ...


class Exit(enum.Enum):
    STOPPED = "stopped"  # asked to stop (shutdown, or the lease went to another task)
    FATAL = "fatal"  # Discord refused the relay for good (close code in `fatal_code`)


class _Next(enum.Enum):
    RESUME = "resume"
    NEW_SESSION = "new session"
    FATAL = "fatal"
    STOP = "stop"


# shard id, from ms, to ms, the shard's guild ids (READY's): what catching up reads back
Gap = Callable[[int, int, int, tuple[str, ...]], None]


@dataclass
class ShardSettings:
    token: str
    gateway_url: str
    owner: str
    members: bool = False  # the GUILD_MEMBERS intent (RELAY_GUILD_MEMBERS_INTENT)


class ShardClient:
    def __init__(
        self,
        shard_id: int,
        shard_count: int,
        settings: ShardSettings,
        *,
        connect: Connect,
        gate: IdentifyGate,
        store: Store,
        forwarder: Submitter,
        saved: SavedSession | None,
        on_gap: Gap,
        offload: Offload,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.shard_id = shard_id
        self.shard_count = shard_count
        self._settings = settings
        self._connect = connect
        self._gate = gate
        self._store = store
        self._forwarder = forwarder
        self._on_gap = on_gap
        self._offload = offload
        self._sleep = sleep
        self._clock = clock
        self._rng = rng or random.Random()  # nosec B311 # jitter, not a secret
        self._backoff = backoff or Backoff(base=1.0, cap=60.0, random=self._rng.random)
        self.stopping = asyncio.Event()
        self.fatal_code: int | None = None
        self.resumes = 0
        self.identifies = 0
        self.ready = asyncio.Event()  # set at each READY or RESUMED
        # The session: resumable when session_id is set.
        self._session_id = ""
        self._resume_url = ""
        self._seq: int | None = None
        self._safe_seq: int | None = None
        self._marks: deque[tuple[int, int]] = deque()  # (ticket, seq) not settled yet
        self._last_event_ms = 0
        self._gap_from: int | None = None
        self._acked = True
        if saved is not None and saved.shard_count == shard_count:
            self._session_id = saved.session_id
            self._resume_url = saved.resume_url
            self._seq = self._safe_seq = saved.seq
            self._last_event_ms = saved.last_event_ms
            if not saved.session_id and saved.last_event_ms:
                self._gap_from = saved.last_event_ms  # the last holder lost its session

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def snapshot(self) -> SavedSession:
        """The session as it is safe to resume: up to the last settled event."""
        settled = self._forwarder.settled
        while self._marks and self._marks[0][0] <= settled:
            self._safe_seq = self._marks.popleft()[1]
        return SavedSession(
            session_id=self._session_id,
            seq=self._safe_seq,
            resume_url=self._resume_url,
            shard_count=self.shard_count,
            last_event_ms=self._last_event_ms,
        )

    async def run(self) -> Exit:
        failures = 0
        resume_failures = 0
        first = True
        while not self.stopping.is_set():
            if not first and not await self._still_mine():
                log.warning(
                    "shard %d: the lease went to another task; this one stops", self.shard_id
                )
                self.stopping.set()
                break
            first = False
            resuming = bool(self._session_id)
            url = self._resume_url if resuming else self._settings.gateway_url
            try:
                socket = await self._connect(gateway_address(url))
            except (OSError, aiohttp.ClientError, TimeoutError) as error:
                failures += 1
                if resuming:
                    resume_failures += 1
                    if resume_failures >= RESUME_CONNECT_ATTEMPTS:
                        log.warning(
                            "shard %d: resume URL refused (%r); new session", self.shard_id, error
                        )
                        await self._drop_session()
                        resume_failures = 0
                await self._pause(self._backoff.delay(failures - 1))
                continue
            outcome = await self._hold(socket, resuming)
            if outcome is _Next.FATAL:
                return Exit.FATAL
            if outcome is _Next.STOP:
                break
            failures = 0 if self.ready.is_set() else failures + 1
            if outcome is _Next.NEW_SESSION:
                await self._drop_session()
                low, high = INVALID_SESSION_WAIT
                await self._pause(low + self._rng.random() * (high - low))
            elif failures:
                await self._pause(self._backoff.delay(failures - 1))
        return Exit.STOPPED

    async def _still_mine(self) -> bool:
        # Two tasks on one shard would take the session from each other at every RESUME;
        # the lease decides before each reconnect, not only at the next renewal.
        owner = self._settings.owner
        return await self._offload(lambda: self._store.holds(self.shard_id, owner))

    async def _pause(self, seconds: float) -> None:
        """Sleep, or less if the client is asked to stop."""
        if self.stopping.is_set():
            return
        waiter = asyncio.ensure_future(self.stopping.wait())
        sleeper = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, sleeper):
                task.cancel()

    async def _drop_session(self) -> None:
        if self._session_id and self._gap_from is None:
            self._gap_from = self._last_event_ms or None
        self._session_id = self._resume_url = ""
        self._seq = self._safe_seq = None
        self._marks.clear()
        owner = self._settings.owner
        await self._offload(lambda: self._store.forget_session(self.shard_id, owner))

    async def _hold(self, socket: Socket, resuming: bool) -> _Next:
        """One connection, from HELLO until it ends; what to do next."""
        self.ready.clear()
        closer = asyncio.ensure_future(self._close_on_stop(socket))
        beats: asyncio.Future[None] | None = None
        reader: asyncio.Future[_Next] | None = None
        try:
            hello = await socket.receive()
            if hello is None or hello.get("op") != Op.HELLO:
                return self._after_close(socket)
            interval = float((hello.get("d") or {}).get("heartbeat_interval", 41_250)) / 1000
            beats = asyncio.ensure_future(self._heartbeat(socket, interval))
            # Frames are read from HELLO on: heartbeat ACKs arrive while IDENTIFY waits its turn.
            reader = asyncio.ensure_future(self._read(socket))
            token = self._settings.token
            if resuming:
                await socket.send(resume_payload(token, self._session_id, self._seq))
                return await reader
            turn = asyncio.ensure_future(self._gate.turn(self.shard_id))
            await asyncio.wait({turn, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not turn.done():  # the connection ended first (or the client was stopped)
                turn.cancel()
                return await reader
            try:
                turn.result()
            except IdentifyBudgetSpent as spent:
                await socket.close(RESUMABLE_CLOSE)
                await reader
                await self._pause(spent.seconds)
                return _Next.STOP if self.stopping.is_set() else _Next.NEW_SESSION
            self.identifies += 1
            await socket.send(
                identify_payload(
                    token, self.shard_id, self.shard_count, members=self._settings.members
                )
            )
            return await reader
        finally:
            for task in (closer, beats, reader):
                if task is not None:
                    task.cancel()
            if socket.close_code is None:
                with contextlib.suppress(Exception):
                    await socket.close(RESUMABLE_CLOSE)

    async def _close_on_stop(self, socket: Socket) -> None:
        await self.stopping.wait()
        await socket.close(RESUMABLE_CLOSE)

    async def _heartbeat(self, socket: Socket, interval: float) -> None:
        self._acked = True
        await self._sleep(interval * self._rng.random())  # Discord asks for a jittered first beat
        while True:
            if not self._acked:
                log.warning("shard %d: no heartbeat ACK; reconnecting to resume", self.shard_id)
                await socket.close(RESUMABLE_CLOSE)
                return
            self._acked = False
            await socket.send(heartbeat_payload(self._seq))
            await self._sleep(interval)

    async def _read(self, socket: Socket) -> _Next:
        while True:
            frame = await socket.receive()
            if frame is None:
                return self._after_close(socket)
            op = frame.get("op")
            if op == Op.DISPATCH:
                await self._dispatch(frame)
            elif op == Op.HEARTBEAT_ACK:
                self._acked = True
            elif op == Op.HEARTBEAT:
                await socket.send(heartbeat_payload(self._seq))
            elif op == Op.RECONNECT:
                await socket.close(RESUMABLE_CLOSE)
                return _Next.RESUME
            elif op == Op.INVALID_SESSION:
                await socket.close(RESUMABLE_CLOSE)
                return _Next.RESUME if frame.get("d") is True else _Next.NEW_SESSION

    def _after_close(self, socket: Socket) -> _Next:
        code = socket.close_code
        if self.stopping.is_set():
            return _Next.STOP
        if code in FATAL_CLOSE_CODES:
            self.fatal_code = code
            return _Next.FATAL
        if code in NEW_SESSION_CLOSE_CODES:
            return _Next.NEW_SESSION
        return _Next.RESUME

    async def _dispatch(self, frame: dict[str, Any]) -> None:
        seq = frame.get("s")
        if isinstance(seq, int):
            self._seq = seq
        name = frame.get("t")
        data = frame.get("d")
        if not isinstance(name, str):
            return
        if name == "READY" and isinstance(data, dict):
            await self._ready(data)
        elif name == "RESUMED":
            self.resumes += 1
            self.ready.set()
            log.info("shard %d: session resumed at %s", self.shard_id, self._seq)
        else:
            self._last_event_ms = self._now_ms()
        _, ticket = self._forwarder.submit_ticket(name, data)
        if isinstance(seq, int):
            self._marks.append((ticket, seq))

    async def _ready(self, data: dict[str, Any]) -> None:
        session_id = data.get("session_id")
        resume_url = data.get("resume_gateway_url")
        if not isinstance(session_id, str) or not isinstance(resume_url, str):
            log.warning("shard %d: READY without a session id or resume URL", self.shard_id)
            return
        self._session_id, self._resume_url = session_id, resume_url
        now = self._now_ms()
        if self._gap_from is not None:
            gap_from, self._gap_from = self._gap_from, None
            log.warning(
                "shard %d: session lost; events from %d to %d ms were not received",
                self.shard_id,
                gap_from,
                now,
                extra=fields(
                    GAP_EVENT, {"shard": self.shard_id, "from_ms": gap_from, "to_ms": now}
                ),
            )
            guilds = _guild_ids(data.get("guilds"))
            await self._offload(partial(self._on_gap, self.shard_id, gap_from, now, guilds))
        self._last_event_ms = now
        self.ready.set()
        snapshot = self.snapshot()
        owner = self._settings.owner
        await self._offload(lambda: self._store.save(self.shard_id, owner, snapshot))


def _guild_ids(guilds: Any) -> tuple[str, ...]:
    """The ids of READY's guilds (unavailable guild objects): the servers this shard holds."""
    if not isinstance(guilds, list):
        return ()
    ids = (g.get("id") for g in guilds if isinstance(g, dict))
    return tuple(
        dict.fromkeys(i for i in ids if isinstance(i, str) and i.isdigit() and len(i) <= 20)
    )
