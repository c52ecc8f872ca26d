"""Resume across real processes: `python -m relay` in the fleet mode, as ECS runs it, four
times over. 8 shards over 2 tasks against the fake gateway on 127.0.0.1, the table in moto's
server (one request at a time, as DynamoDB applies each conditional write), each task with
its own HTTP sink and its own spool directory (a task's disk dies with it).

Task a gets a real SIGTERM (it hands over: sockets closed with a resumable code, events
settled, sessions saved, leases released) and c, waiting on standby as a deploy's new task
does, takes its shards. Task b's sink fails, so b holds events it received but could not
deliver (spooled on its own disk), and then gets a real SIGKILL: nothing is saved at the
end, its leases run out, and d takes its shards. Every replacement RESUMEs from the sequence
saved in the table, and the fake replays the session from there: no new IDENTIFY, no close
code 1000 or 1001, and every message emitted reaches a sink, those b held when it died
included (the saved sequence never runs ahead of what a sink has)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from botmemory.storage.schema import create_table
from localrun.fakeaws import REGION
from localrun.motoserver import MotoServer
from relay.store import PARTITION, Store, shard_sk
from tests.relay.fake_shards import TABLE, FakeShardedGateway
from tests.relay.helpers import IngestServer
from tests.relay.processes import GatewayThread, RelayProcess, relay_environment

SHARDS = 8
TASKS = 2
# The least RELAY_LEASE_SECONDS allows: a killed task's shards are taken over after it.
LEASE_SECONDS = 5
SAVE_SECONDS = 0.5
HOLDING = r"holding shards (\d+)-(\d+) of 8"


@pytest.fixture
def table() -> Iterator[tuple[str, Any]]:
    """moto's server with the main stack's table: its URL and a client."""
    with MotoServer() as server:
        client = boto3.client("dynamodb", endpoint_url=server.url, region_name=REGION)
        create_table(client, TABLE)
        yield server.url, client


@pytest.fixture
def gateway() -> Iterator[GatewayThread]:
    served = GatewayThread(
        FakeShardedGateway(shard_count=SHARDS, max_concurrency=SHARDS, clock=time.time)
    )
    yield served
    served.stop()


@pytest.fixture
def sinks() -> Iterator[dict[str, IngestServer]]:
    """One ingest endpoint per task, so that one task's can fail alone."""
    peers = {name: IngestServer() for name in "abcd"}
    yield peers
    for peer in peers.values():
        peer.down()


class Fleet:
    """Starts relay tasks by name and stops whatever is left at the end."""

    def __init__(
        self, tmp_path: Path, endpoint: str, gateway: GatewayThread, sinks: dict[str, IngestServer]
    ) -> None:
        self._tmp_path = tmp_path
        self._endpoint = endpoint
        self._gateway = gateway
        self._sinks = sinks
        self.tasks: dict[str, RelayProcess] = {}

    def start(self, name: str) -> RelayProcess:
        env = relay_environment(
            AWS_ENDPOINT_URL=self._endpoint,
            RELAY_TABLE_NAME=TABLE,
            RELAY_TASK_COUNT=str(TASKS),
            DISCORD_BOT_TOKEN="the-token",
            DISCORD_API_BASE=self._gateway.api_base,
            INGEST_URL=self._sinks[name].url,
            RELAY_SPOOL_DIR=str(self._tmp_path / name),  # its own: a task's disk dies with it
            RELAY_LEASE_SECONDS=str(LEASE_SECONDS),
            RELAY_SAVE_SECONDS=str(SAVE_SECONDS),
            RELAY_POLL_SECONDS="0.2",
            RELAY_BATCH_MAX_SECONDS="0.1",
            RELAY_SEND_ATTEMPTS="1",
            RELAY_HEALTH_SECONDS="0.2",
            RELAY_SHUTDOWN_SECONDS="5",
        )
        self.tasks[name] = RelayProcess(env)
        return self.tasks[name]

    def stop(self) -> None:
        for task in self.tasks.values():
            task.stop()


def until(condition: Callable[[], bool], what: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def flowing(gateway: GatewayThread, sinks: dict[str, IngestServer], what: str) -> None:
    """Until, on every shard, a message emitted from now on has reached a sink."""
    fake = gateway.fake
    start = gateway.call(lambda: {s: len(fake.emitted.get(s, [])) for s in range(SHARDS)})

    def newer() -> list[list[str]]:
        return gateway.call(lambda: [fake.emitted.get(s, [])[start[s] :] for s in range(SHARDS)])

    until(lambda: all(set(ids) & delivered(sinks) for ids in newer()), what)


def held_range(task: RelayProcess) -> range:
    found = task.wait_for(HOLDING)
    return range(int(found[1]), int(found[2]) + 1)


def leased_until(client: Any, shard: int) -> float:
    """The end of the shard's lease, moved on at each renewal (which saves the session)."""
    key = {"pk": {"S": PARTITION}, "sk": {"S": shard_sk(shard)}}
    item = client.get_item(TableName=TABLE, Key=key, ConsistentRead=True)["Item"]
    return float(item["lease_until"]["N"])


def delivered(sinks: dict[str, IngestServer]) -> set[str]:
    """Ids of the messages every sink received (a few twice: ingest stores them once)."""
    return {
        event["d"]["id"]
        for sink in sinks.values()
        for event in list(sink.events)
        if event["t"] == "MESSAGE_CREATE"
    }


def test_tasks_stopped_or_killed_are_replaced_by_processes_that_resume_and_lose_nothing(
    tmp_path: Path,
    table: tuple[str, Any],
    gateway: GatewayThread,
    sinks: dict[str, IngestServer],
) -> None:
    endpoint, client = table
    store = Store(client, TABLE)
    fake = gateway.fake
    fleet = Fleet(tmp_path, endpoint, gateway, sinks)
    emitting = threading.Event()

    async def emit() -> None:
        """Discord's side: messages on every shard's current session, connected or not."""
        while emitting.is_set():
            for shard in list(fake.current):
                fake.emit(shard)
            await asyncio.sleep(0.05)

    def on_shards(shards: range, check: Callable[[int], bool]) -> Callable[[], bool]:
        return lambda: gateway.call(lambda: all(check(shard) for shard in shards))

    try:
        first, second = fleet.start("a"), fleet.start("b")
        ranges = {"a": held_range(first), "b": held_range(second)}
        assert sorted([*ranges["a"], *ranges["b"]]) == list(range(SHARDS))
        until(
            lambda: gateway.call(lambda: len(fake.ready_shards())) == SHARDS, "every shard is READY"
        )
        emitting.set()
        producer = asyncio.run_coroutine_threadsafe(emit(), gateway.loop)
        flowing(gateway, sinks, "every shard's messages reach a sink")

        # A deploy: the new task waits on standby, the old one gets SIGTERM and hands over.
        third = fleet.start("c")
        third.wait_for("every shard range is held; standing by")
        assert first.terminate() == 0
        assert "leases released: 4 shards handed over" in "".join(first.log)
        assert held_range(third) == ranges["a"]
        until(
            on_shards(ranges["a"], lambda s: (s, True) in fake.resumes),
            "c RESUMEs a's shards",
        )

        # b's sink fails: what b receives from now on stays in its memory and spool. It is
        # killed once it has renewed its leases (saving its sessions) after receiving some.
        sinks["b"].mode = "unwell"
        second.wait_for(r"health: .* spooled=[1-9]")
        sent_to_b = gateway.call(lambda: {s: list(fake.current[s].events) for s in ranges["b"]})
        mark = time.time()
        until(
            lambda: all(
                leased_until(client, s) > mark + SAVE_SECONDS + LEASE_SECONDS for s in ranges["b"]
            ),
            "b renews its leases after the mark",
        )
        before_death = delivered(sinks)
        assert second.kill() == -9
        saved = {shard: store.session(shard) for shard in ranges["b"]}
        # d takes b's shards once their leases run out (RELAY_LEASE_SECONDS after b's last
        # renewal), and RESUMEs b's sessions from what b saved.
        fourth = fleet.start("d")
        assert held_range(fourth) == ranges["b"]
        until(
            on_shards(ranges["b"], lambda s: fake.resumes.count((s, True)) == 1),
            "d RESUMEs b's shards",
        )

        flowing(gateway, sinks, "the new holders' messages reach a sink")
        emitting.clear()
        producer.result(5)
        emitted = {m for ids in fake.emitted.values() for m in ids}
        until(
            lambda: emitted <= delivered(sinks), "every message emitted reached a sink", timeout=10
        )
        assert third.terminate() == 0
        assert fourth.terminate() == 0
    finally:
        emitting.clear()
        fleet.stop()

    # Eight IDENTIFYs at the start, none after: every replacement RESUMEd its shards.
    assert sorted(shard for _, shard, ok in fake.identifies if ok) == list(range(SHARDS))
    assert len(fake.identifies) == SHARDS
    assert sorted(shard for shard, ok in fake.resumes) == list(range(SHARDS))
    assert all(ok for _, ok in fake.resumes)
    assert not {1000, 1001} & set(fake.closes)
    # Every message of the eight shards reached a sink.
    assert len(emitted) > 200
    assert emitted <= delivered(sinks)
    # b saved no sequence ahead of what its sink had: every message at or before it was
    # delivered before b died. d RESUMEd each of b's sessions from there, and the messages b
    # held undelivered when it died came back through the replay.
    held = set()
    for shard, frames in sent_to_b.items():
        session = saved[shard]
        assert session is not None and session.seq is not None
        assert (shard, session.seq) in fake.resumed_from
        messages = [frame for frame in frames if frame["t"] == "MESSAGE_CREATE"]
        assert {f["d"]["id"] for f in messages if f["s"] <= session.seq} <= before_death
        held |= {f["d"]["id"] for f in messages} - before_death
    assert held, "b died holding nothing undelivered: the kill proved nothing"
    assert held <= delivered(sinks)
