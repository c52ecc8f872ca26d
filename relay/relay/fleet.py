"""One relay task: claim a range of shards under leases, run a client per shard, keep the
leases and the sessions current, and hand them over cleanly on shutdown.

Claiming: the shards are cut into `task_count` contiguous ranges (relay.shards.ranges); a
task takes every lease of one range or none (a partial claim is released), trying the
ranges from an offset of its own so that tasks starting together rarely collide. A task
that finds every range held waits on standby and tries again every `poll_seconds`: that
is the new task of a rolling deploy, healthy at once (its health does not depend on a
lease, so ECS can stop the old task), taking the leases the old one releases.

Handover (SIGTERM): stop every client (sockets closed with a code that keeps the session
resumable), let the forwarder settle what it holds, save each session as far as the sink
has it, release the leases. The next holder RESUMEs and Discord replays the rest. A task
killed without warning saves nothing: its leases expire after `lease_seconds` and the
next holder RESUMEs from the last save, which never runs ahead of the sink.

Two tasks on one shard: only the lease's owner can renew it or save its session; a task
whose renewal is refused stops that shard's client (the loser stops).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from relay.identify_gate import IdentifyGate, Offload
from relay.shard_client import Exit, Gap, ShardClient, ShardSettings, Submitter
from relay.shards import ranges
from relay.store import SavedSession, Store
from relay.websocket import Connect

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FleetSettings:
    shard_count: int
    task_count: int
    lease_seconds: float = 30.0
    save_seconds: float = 5.0
    poll_seconds: float = 2.0


class Fleet:
    def __init__(
        self,
        settings: FleetSettings,
        shard: ShardSettings,
        *,
        store: Store,
        gate: IdentifyGate,
        connect: Connect,
        forwarder: Submitter,
        on_gap: Gap,
        offload: Offload,
        drain: Callable[[], None] = lambda: None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        alive_file: Path | None = None,
    ) -> None:
        self.settings = settings
        self._shard = shard
        self._store = store
        self._gate = gate
        self._connect = connect
        self._forwarder = forwarder
        self._on_gap = on_gap
        self._offload = offload
        self._drain = drain
        self._sleep = sleep
        self._clock = clock
        self._alive_file = alive_file
        self.clients: dict[int, ShardClient] = {}
        self.held: range | None = None
        self.fatal_code: int | None = None

    @property
    def owner(self) -> str:
        return self._shard.owner

    async def run(self, stop: asyncio.Event) -> int:
        """0 once stopped (leases handed over); 2 when Discord refused the relay for good."""
        tasks: dict[int, asyncio.Task[Exit]] = {}
        try:
            while not stop.is_set():
                held = await self._claim(stop)
                if held is None:
                    break
                tasks = await self._start(held)
                code = await self._keep(stop, tasks)
                if code is not None:
                    await self._hand_over(tasks)
                    return code
                if stop.is_set():
                    await self._hand_over(tasks)
                    return 0
                # Every shard of the range went to other tasks: back to standby.
                self.held, self.clients, tasks = None, {}, {}
            return 0
        finally:
            # Reached with tasks still running only on cancellation (a kill): nothing is
            # saved or released, exactly as when the process dies.
            for task in tasks.values():
                task.cancel()

    def _order(self) -> list[range]:
        cuts = ranges(self.settings.shard_count, self.settings.task_count)
        digest = hashlib.sha256(self.owner.encode()).digest()
        start = int.from_bytes(digest[:4], "big") % len(cuts)
        return cuts[start:] + cuts[:start]

    async def _claim(self, stop: asyncio.Event) -> range | None:
        announced = False
        while not stop.is_set():
            self._touch()
            for shards in self._order():
                if await self._offload(partial(self._claim_range, shards)):
                    self.held = shards
                    log.info(
                        "holding shards %d-%d of %d",
                        shards.start,
                        shards.stop - 1,
                        self.settings.shard_count,
                    )
                    return shards
            if not announced:
                log.info("every shard range is held; standing by")
                announced = True
            await self._pause(stop, self.settings.poll_seconds)
        return None

    def _claim_range(self, shards: range) -> bool:
        taken: list[int] = []
        for shard_id in shards:
            if not self._store.acquire(shard_id, self.owner, self.settings.lease_seconds):
                for held in taken:
                    self._store.release(held, self.owner)
                return False
            taken.append(shard_id)
        return True

    async def _start(self, shards: range) -> dict[int, asyncio.Task[Exit]]:
        tasks: dict[int, asyncio.Task[Exit]] = {}
        for shard_id in shards:
            saved = await self._offload(partial(self._store.session, shard_id))
            client = ShardClient(
                shard_id,
                self.settings.shard_count,
                self._shard,
                connect=self._connect,
                gate=self._gate,
                store=self._store,
                forwarder=self._forwarder,
                saved=saved,
                on_gap=self._on_gap,
                offload=self._offload,
                sleep=self._sleep,
                clock=self._clock,
            )
            self.clients[shard_id] = client
            tasks[shard_id] = asyncio.ensure_future(client.run())
        return tasks

    async def _keep(self, stop: asyncio.Event, tasks: dict[int, asyncio.Task[Exit]]) -> int | None:
        """Renew and save until stopped (None), every shard is lost (None, tasks empty),
        or a client is refused for good (2)."""
        while not stop.is_set():
            self._touch()
            for shard_id, task in list(tasks.items()):
                if task.done():
                    if (
                        not task.cancelled()
                        and task.exception() is None
                        and task.result() is Exit.FATAL
                    ):
                        self.fatal_code = self.clients[shard_id].fatal_code
                        log.error(
                            "shard %d refused for good (close code %s)", shard_id, self.fatal_code
                        )
                        return 2
                    if task.exception() is not None:
                        log.error("shard %d client failed: %r", shard_id, task.exception())
                    del tasks[shard_id]
                    continue
                client = self.clients[shard_id]
                snapshot = client.snapshot()
                renewed = await self._offload(
                    partial(
                        self._store.renew,
                        shard_id,
                        self.owner,
                        self.settings.lease_seconds,
                        snapshot,
                    )
                )
                if not renewed:
                    log.warning("shard %d: lease taken by another task; this one stops", shard_id)
                    client.stopping.set()
            if not tasks:
                return None
            await self._pause(stop, self.settings.save_seconds)
        return None

    async def _hand_over(self, tasks: dict[int, asyncio.Task[Exit]]) -> None:
        for client in self.clients.values():
            client.stopping.set()
        if tasks:
            await asyncio.gather(*tasks.values(), return_exceptions=True)
        tasks.clear()
        # The forwarder settles what it holds before the sessions are saved, so the saved
        # sequences cover every event the sink has.
        await self._offload(self._drain)
        for shard_id, client in self.clients.items():
            snapshot = client.snapshot()
            await self._offload(partial(self._save_and_release, shard_id, snapshot))
        log.info("leases released: %d shards handed over", len(self.clients))

    def _save_and_release(self, shard_id: int, snapshot: SavedSession) -> None:
        self._store.save(shard_id, self.owner, snapshot, release=True)

    async def _pause(self, stop: asyncio.Event, seconds: float) -> None:
        waiter = asyncio.ensure_future(stop.wait())
        sleeper = asyncio.ensure_future(self._sleep(seconds))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            sleeper.cancel()

    def _touch(self) -> None:
        """The health check's file: fresh while the loop turns, lease or no lease."""
        if self._alive_file is not None:
            with contextlib.suppress(OSError):
                self._alive_file.parent.mkdir(parents=True, exist_ok=True)
                self._alive_file.touch()
