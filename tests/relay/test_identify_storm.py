"""IDENTIFY by Discord's rules across tasks: a storm of 100 shards over 4 tasks, in
simulated time, against a fake gateway that refuses an IDENTIFY sent too early in its
bucket. One shared counter in the table spaces them; none is refused; the daily count
covers every IDENTIFY sent, and the relay's cap stops it short of Discord's limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from relay.fleet import Fleet, FleetSettings
from relay.identify_gate import IdentifyBudgetSpent, IdentifyGate, inline
from relay.shard_client import ShardSettings
from relay.store import Store
from tests.relay.fake_shards import TABLE, FakeShardedGateway, MemoryConnector
from tests.relay.virtual_time import run_virtual


class Settled:
    """A forwarder whose sink settles everything at once (the storm is about IDENTIFY)."""

    def __init__(self) -> None:
        self.queued = 0
        self.names: list[str] = []

    def submit_ticket(self, name: str, payload: Any) -> tuple[bool, int]:
        self.names.append(name)
        self.queued += 1
        return True, self.queued

    @property
    def settled(self) -> int:
        return self.queued


async def until(condition: Any, limit: float) -> float:
    """Simulated seconds until `condition()` holds (checked each simulated second)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not condition():
        assert loop.time() - start < limit, "not back in time"
        await asyncio.sleep(1.0)
    return loop.time() - start


def storm(dynamodb: Any, shards: int, tasks: int, max_concurrency: int) -> dict[str, Any]:
    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        fake = FakeShardedGateway(
            shard_count=shards, max_concurrency=max_concurrency, clock=loop.time
        )
        store = Store(dynamodb, TABLE, clock=loop.time)
        stop = asyncio.Event()
        fleets = []
        for index in range(tasks):
            gate = IdentifyGate(store, max_concurrency, 900, offload=inline)
            fleets.append(
                Fleet(
                    FleetSettings(
                        shards, tasks, lease_seconds=6000, save_seconds=2000, poll_seconds=5
                    ),
                    ShardSettings("token", fake.url, f"task-{index}"),
                    store=store,
                    gate=gate,
                    connect=MemoryConnector(fake).connect,
                    forwarder=Settled(),
                    on_gap=lambda *gap: None,
                    offload=inline,
                )
            )
        runs = [asyncio.ensure_future(fleet.run(stop)) for fleet in fleets]
        first = await until(lambda: len(fake.ready_shards()) == shards, 2000)
        fake.invalidate_all()
        back = await until(lambda: len(fake.ready_shards()) == shards, 2000)
        stop.set()
        await asyncio.gather(*runs)
        return {"first": first, "back": back, "fake": fake, "store": store}

    result, _ = run_virtual(main())
    return result


def test_a_storm_of_100_shards_is_back_within_the_buckets_time_and_none_is_refused(
    dynamodb: Any,
) -> None:
    # max_concurrency 1: one IDENTIFY per 5 s for the whole bot (make bench has 16 too).
    result = storm(dynamodb, 100, 4, 1)
    limit = 100 * 5.25 + 10
    fake: FakeShardedGateway = result["fake"]
    assert fake.identifies_refused == 0
    # Each shard identified once at start and once after the storm; the RESUMEs were refused.
    assert len(fake.identifies) == 200
    assert result["back"] <= limit
    # The shared day's count holds every IDENTIFY sent, from every task.
    assert result["store"].identifies()[0] == 200


def test_the_daily_cap_refuses_before_discords_limit(dynamodb: Any) -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        store = Store(dynamodb, TABLE, clock=loop.time)
        gate = IdentifyGate(store, 1, 3, offload=inline)
        counts = [await gate.turn(shard) for shard in range(3)]
        with pytest.raises(IdentifyBudgetSpent) as spent:
            await gate.turn(3)
        assert spent.value.seconds > 86_000
        # A day later the window starts again.
        await asyncio.sleep(86_401)
        counts.append(await gate.turn(3))
        return counts

    counts, _ = run_virtual(main())
    assert counts == [1, 2, 3, 1]
