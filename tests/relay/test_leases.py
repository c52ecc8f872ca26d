"""Bad input at the handover, over simulated time: two tasks claiming one shard (the lease
decides, the loser stops), and a saved session Discord refuses (IDENTIFY then, with the
gap from the last event to the new READY reported for catching up)."""

from __future__ import annotations

import asyncio
from typing import Any

from relay.fleet import Fleet, FleetSettings
from relay.identify_gate import IdentifyGate, inline
from relay.shard_client import ShardSettings
from relay.store import SavedSession, Store
from tests.conftest import TABLE as FIXTURE_TABLE
from tests.relay.fake_shards import TABLE, FakeShardedGateway, MemoryConnector
from tests.relay.test_identify_storm import Settled, until
from tests.relay.virtual_time import run_virtual


def record(
    gaps: list[tuple[Any, ...]] | None, store: Store, count: int, gap: tuple[Any, ...]
) -> None:
    """What relay.runner does with a gap (keep it in the table), and the test's own list."""
    if gaps is not None:
        gaps.append(gap)
    store.record_gap(gap[0], count, gap[1], gap[2])


def fleet(
    fake: FakeShardedGateway,
    store: Store,
    owner: str,
    gaps: list[tuple[int, int, int]] | None = None,
    lease: float = 30.0,
) -> Fleet:
    return Fleet(
        FleetSettings(
            fake.shard_count, 1, lease_seconds=lease, save_seconds=lease / 3, poll_seconds=1
        ),
        ShardSettings("token", fake.url, owner),
        store=store,
        gate=IdentifyGate(store, fake.max_concurrency, 900, offload=inline),
        connect=MemoryConnector(fake).connect,
        forwarder=Settled(),
        on_gap=lambda *gap: record(gaps, store, fake.shard_count, gap),
        offload=inline,
    )


def test_two_tasks_on_one_shard_the_lease_decides_and_the_loser_stops(dynamodb: Any) -> None:
    async def main() -> tuple[Fleet, Fleet, FakeShardedGateway]:
        loop = asyncio.get_running_loop()
        fake = FakeShardedGateway(shard_count=1, clock=loop.time)
        store = Store(dynamodb, TABLE, clock=loop.time)
        first = fleet(fake, store, "first")
        stop_first, stop_second = asyncio.Event(), asyncio.Event()
        run_first = asyncio.ensure_future(first.run(stop_first))
        await until(lambda: len(fake.ready_shards()) == 1, 60)
        # The second task finds the shard held and stands by.
        second = fleet(fake, store, "second")
        run_second = asyncio.ensure_future(second.run(stop_second))
        await asyncio.sleep(5)
        assert second.held is None
        # The first one stalls past its lease (a long pause): the second takes the shard
        # and RESUMEs; the first's next renewal is refused and its client stops.
        store.clock = lambda: loop.time() + 60
        await until(lambda: second.held is not None and second.clients[0].resumes == 1, 60)
        await until(lambda: not first.clients or first.clients[0].stopping.is_set(), 60)
        stop_first.set()
        stop_second.set()
        await asyncio.gather(run_first, run_second)
        return first, second, fake

    (first, _second, fake), _ = run_virtual(main())
    assert first.clients[0].stopping.is_set()
    assert len(fake.identifies) == 1  # the second task RESUMEd the one session
    assert fake.resumes == [(0, True)]


def test_a_refused_session_identifies_and_reports_the_gap(dynamodb: Any) -> None:
    async def main() -> tuple[list[tuple[int, int, int]], FakeShardedGateway, int, Store]:
        loop = asyncio.get_running_loop()
        fake = FakeShardedGateway(shard_count=1, clock=loop.time)
        store = Store(dynamodb, TABLE, clock=loop.time)
        last_event_ms = int(loop.time() * 1000) - 30 * 60 * 1000  # half an hour ago
        assert store.acquire(0, "old", 30)
        store.save(
            0, "old", SavedSession("gone", 41, f"{fake.url}/resume", 1, last_event_ms), release=True
        )
        gaps: list[tuple[int, int, int]] = []
        task = fleet(fake, store, "new", gaps)
        stop = asyncio.Event()
        run = asyncio.ensure_future(task.run(stop))
        await until(lambda: len(fake.ready_shards()) == 1, 60)
        stop.set()
        await run
        return gaps, fake, last_event_ms, store

    (gaps, fake, last_event_ms, store), _ = run_virtual(main())
    assert fake.resumes == [(-1, False)]
    assert len(fake.identifies) == 1
    ((shard, start, end, _guilds),) = gaps
    assert shard == 0 and start == last_event_ms
    assert end - start >= 30 * 60 * 1000
    # Kept in the table for catching up, with the shard count it belongs to.
    assert store.gaps() == [{"shard_id": 0, "shard_count": 1, "from_ms": start, "to_ms": end}]


def test_the_fake_names_the_fixtures_table() -> None:
    assert TABLE == FIXTURE_TABLE
