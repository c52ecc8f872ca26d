"""Resume across tasks, in this process: 8 shards over 2 tasks against a fake gateway on
127.0.0.1, one task stopped (the SIGTERM path: sockets closed with a resumable code, the
forwarder settled, sessions saved, leases released) and one killed (nothing saved at the
end: its leases expire), each replaced. Every replacement RESUMEs; no event is lost, no new
IDENTIFY is sent, and no socket is ever closed with 1000 or 1001. The tasks here are fleets
on one event loop and the table's clock is moved past a lease (`make bench` runs this one);
test_handover_processes.py runs the same with `python -m relay` processes and real signals."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

from relay.app import run_gateway
from relay.config import RelayConfig
from relay.fleet import Fleet, FleetSettings
from relay.identify_gate import IdentifyGate
from relay.shard_client import ShardSettings
from relay.sinks import Outcome, SendResult
from relay.store import PARTITION, Store, shard_sk
from relay.websocket import AiohttpConnector
from tests.relay.fake_shards import TABLE, FakeShardedGateway, serve_aiohttp
from tests.relay.helpers import RecordingSink, make_forwarder
from tests.relay.processes import GatewayThread

SHARDS = 8
LEASE_SECONDS = 30.0


class Serialized:
    """The moto client, one request at a time: moto checks a condition and writes in two
    steps, so two threads could both pass one; DynamoDB applies each atomically."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return method(*args, **kwargs)

        return call


class Skewed:
    """The table's clock: real time, moved on past a lease at once instead of waiting it out."""

    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        return time.time() + self.skew


class MortalSink(RecordingSink):
    """Records what it is sent until the task it belongs to dies; then accepts nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.dead = False

    def send(self, body: bytes) -> SendResult:
        if self.dead:
            return SendResult(Outcome.RETRY, "the task is dead")
        return super().send(body)


class Task:
    """One relay task in process: its own forwarder, sink, connector and fleet."""

    def __init__(self, name: str, fake: FakeShardedGateway, store: Store, tmp: Path) -> None:
        self.sink = MortalSink()
        self.forwarder = make_forwarder(self.sink, tmp / name, time.monotonic, max_seconds=0.02)
        self.forwarder.start()
        self.connector = AiohttpConnector()
        self.stop = asyncio.Event()
        self.fleet = Fleet(
            FleetSettings(
                SHARDS, 2, lease_seconds=LEASE_SECONDS, save_seconds=0.1, poll_seconds=0.05
            ),
            ShardSettings("token", fake.url, name),
            store=store,
            gate=IdentifyGate(store, fake.max_concurrency, 900),
            connect=self.connector.connect,
            forwarder=self.forwarder,
            on_gap=lambda *gap: None,
            offload=asyncio.to_thread,  # type: ignore[arg-type]
            drain=lambda: self.forwarder.close(5.0),
        )
        self.run = asyncio.ensure_future(self.fleet.run(self.stop))

    async def terminate(self) -> int:
        """SIGTERM: the handover."""
        self.stop.set()
        code = await self.run
        await self.connector.close()
        return code

    async def kill(self) -> None:
        """SIGKILL: nothing more reaches the sink or the table; the sockets drop."""
        self.sink.dead = True
        self.run.cancel()
        await asyncio.gather(self.run, return_exceptions=True)
        await self.connector.close()
        self.forwarder.close(0.1)

    def message_ids(self) -> set[str]:
        return {
            event["d"]["id"]
            for body in self.sink.bodies
            for event in json.loads(body)["events"]
            if event["t"] != "READY"  # the session's own, naming no message
        }


async def until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def handover(dynamodb: Any, tmp_path: Path) -> tuple[FakeShardedGateway, list[Task]]:
    """8 shards over tasks a and b; a stopped (SIGTERM's path) and replaced by c, b killed
    and replaced by d; events emitted all along. The fake and the four tasks (make bench
    runs it too)."""

    async def main() -> tuple[FakeShardedGateway, list[Task]]:
        fake = FakeShardedGateway(shard_count=SHARDS, max_concurrency=SHARDS, clock=time.time)
        runner, _ = await serve_aiohttp(fake)
        clock = Skewed()
        store = Store(Serialized(dynamodb), TABLE, clock=clock)
        emitting = True

        async def emit() -> None:
            while emitting:
                for shard in list(fake.current):
                    fake.emit(shard, 3)
                await asyncio.sleep(0.01)

        try:
            first, second = Task("a", fake, store, tmp_path), Task("b", fake, store, tmp_path)
            await until(lambda: len(fake.ready_shards()) == SHARDS)
            producer = asyncio.ensure_future(emit())
            await asyncio.sleep(0.3)
            assert await first.terminate() == 0
            third = Task("c", fake, store, tmp_path)
            await until(
                lambda: (
                    third.fleet.held is not None
                    and all(c.resumes for c in third.fleet.clients.values())
                )
            )
            await asyncio.sleep(0.3)
            # The killed task's sink is down first: events pile up in its forwarder (spooled
            # on a disk that dies with it) while its sessions keep receiving.
            second.sink.dead = True
            await asyncio.sleep(0.3)
            await second.kill()
            await asyncio.sleep(0.3)  # events keep coming to the dead task's sessions
            # The dead task's leases expire; the live one renews its own first.
            clock.skew += LEASE_SECONDS + 1
            held = third.fleet.held
            assert held is not None
            await until(lambda: all(store.holds(shard, "c") for shard in held))
            fourth = Task("d", fake, store, tmp_path)
            await until(
                lambda: (
                    fourth.fleet.held is not None
                    and all(c.resumes for c in fourth.fleet.clients.values())
                )
            )
            await asyncio.sleep(0.3)
            emitting = False
            await producer
            tasks = [first, second, third, fourth]
            emitted = {m for ids in fake.emitted.values() for m in ids}
            # Until every message arrived, or a while (then the caller counts what is lost).
            with contextlib.suppress(AssertionError):
                await until(lambda: emitted <= set().union(*(t.message_ids() for t in tasks)))
            await third.terminate()
            await fourth.terminate()
            return fake, tasks
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_tasks_stopped_or_killed_are_replaced_by_tasks_that_resume_and_lose_nothing(
    dynamodb: Any, tmp_path: Path
) -> None:
    fake, tasks = handover(dynamodb, tmp_path)
    # Eight IDENTIFYs at the start, none after: every replacement RESUMEd its shards.
    assert len(fake.identifies) == SHARDS, (fake.identifies, fake.resumes, fake.closes)
    assert sorted(shard for shard, ok in fake.resumes if ok) == list(range(SHARDS))
    assert not [shard for shard, ok in fake.resumes if not ok]
    assert not {1000, 1001} & set(fake.closes)
    # Every message of the eight shards reached a sink (a few twice: stored once by id).
    emitted = {m for ids in fake.emitted.values() for m in ids}
    assert len(emitted) > 100
    assert emitted <= set().union(*(t.message_ids() for t in tasks))


def test_the_relay_process_path_holds_every_shard_and_hands_over_on_sigterm(
    dynamodb: Any, tmp_path: Path
) -> None:
    """`run_gateway` in the fleet mode, as `python -m relay` runs it in ECS: the shard count
    from GET /gateway/bot, every shard IDENTIFYd once, a real SIGTERM to this process,
    then sessions saved and leases released in the table for the next task."""

    fake = FakeShardedGateway(shard_count=3, max_concurrency=3, clock=time.time)
    gateway = GatewayThread(fake)

    def terminate_when_ready() -> None:
        deadline = time.monotonic() + 10
        while len(fake.ready_shards()) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    config = RelayConfig.from_env(
        {
            "INGEST_URL": "http://127.0.0.1:9/ingest",
            "RELAY_TABLE_NAME": TABLE,
            "RELAY_SPOOL_DIR": str(tmp_path),
            "DISCORD_API_BASE": gateway.api_base,
            "RELAY_SAVE_SECONDS": "0.1",
            "RELAY_POLL_SECONDS": "0.1",
        }
    )
    sink = MortalSink()
    forwarder = make_forwarder(sink, tmp_path / "spool", time.monotonic, max_seconds=0.02)
    threading.Thread(target=terminate_when_ready, daemon=True).start()
    with mock.patch("relay.runner.dynamodb_client", return_value=Serialized(dynamodb)):
        assert run_gateway(config, forwarder, "the-token") == 0
    gateway.stop()

    assert fake.rest == ["Bot the-token"]
    assert sorted(shard for _, shard, ok in fake.identifies if ok) == [0, 1, 2]
    assert not {1000, 1001} & set(fake.closes)
    for shard in range(3):
        item = dynamodb.get_item(
            TableName=TABLE, Key={"pk": {"S": PARTITION}, "sk": {"S": shard_sk(shard)}}
        )["Item"]
        assert item["session_id"]["S"] == fake.current[shard].session_id
        assert float(item["lease_until"]["N"]) == 0  # released for the next task
    assert (tmp_path / "alive").exists()  # the health check's file
