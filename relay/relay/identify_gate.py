"""IDENTIFY by Discord's rules, across every task of the relay.

Two shared counters in the table (relay.store), both taken with conditional writes:
- each `max_concurrency` bucket's next free moment (`shard_id % max_concurrency`): a
  shard reserves the next slot, moving it on by 5 s, and sleeps until its slot; at most
  one IDENTIFY per bucket per 5 s whichever task sends it, and no thundering herd of
  retries (one write per IDENTIFY);
- the day's IDENTIFYs, every one sent counted before it is sent (a refused IDENTIFY
  counts against Discord's 1,000 too), refused at the relay's own cap, below Discord's
  limit, so that the token is never reset. Each count is logged as a `relay_identify`
  line whose `identifies_today` the template turns into a metric and an alarm.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from relay.logs import IDENTIFY_EVENT, IDENTIFY_REFUSED_EVENT, fields
from relay.protocol import IDENTIFY_WINDOW_SECONDS
from relay.shards import bucket
from relay.store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")


class Offload(Protocol):
    """How a blocking table call is awaited: in a thread, or inline over simulated time."""

    def __call__(self, call: Callable[[], T]) -> Awaitable[T]: ...


Sleep = Callable[[float], Awaitable[None]]

DAY_SECONDS = 86_400.0
# Added to Discord's 5 s so that clocks a little apart on two tasks never squeeze two
# IDENTIFYs of one bucket into one window.
WINDOW_MARGIN_SECONDS = 0.25


class IdentifyBudgetSpent(Exception):
    """The day's IDENTIFYs reached the relay's cap; none may be sent for `seconds`."""

    def __init__(self, seconds: float, count: int) -> None:
        super().__init__(f"{count} IDENTIFYs in Discord's daily window; next in {seconds:.0f}s")
        self.seconds = seconds


async def inline(call: Callable[[], T]) -> T:
    """Run a table call on the loop itself (tests over simulated time)."""
    return call()


async def in_thread(call: Callable[[], T]) -> T:
    """Run a table call off the loop, so heartbeats never wait on DynamoDB."""
    return await asyncio.to_thread(call)


class IdentifyGate:
    def __init__(
        self,
        store: Store,
        max_concurrency: int,
        daily_cap: int,
        *,
        sleep: Sleep = asyncio.sleep,
        offload: Offload = in_thread,
    ) -> None:
        self._store = store
        self._max_concurrency = max(1, max_concurrency)
        self._cap = daily_cap
        self._sleep = sleep
        self._offload = offload
        self.sent = 0  # IDENTIFYs this task was allowed, for the tests and the bench

    async def turn(self, shard_id: int) -> int:
        """Count the IDENTIFY against the day, reserve this shard's next slot in its bucket
        and wait for it: the day's count. Raises IdentifyBudgetSpent (and counts nothing)
        at the cap."""
        slot = bucket(shard_id, self._max_concurrency)
        window = IDENTIFY_WINDOW_SECONDS + WINDOW_MARGIN_SECONDS
        count = await self._offload(lambda: self._store.count_identify(self._cap, DAY_SECONDS))
        if count is None:
            used, left = await self._offload(self._store.identifies)
            log.error(
                "IDENTIFY refused by the relay's daily cap (%d); shard %d waits %.0fs",
                self._cap,
                shard_id,
                left,
                extra=fields(IDENTIFY_REFUSED_EVENT, {"identifies_today": used, "shard": shard_id}),
            )
            raise IdentifyBudgetSpent(max(left, 60.0), used)
        # The slot after the count: a refused count reserves nothing.
        at = await self._offload(lambda: self._store.reserve_bucket_slot(slot, window))
        wait = at - self._store.clock()
        if wait > 0:
            await self._sleep(wait)
        self.sent += 1
        log.info(
            "IDENTIFY shard %d (bucket %d): %d today",
            shard_id,
            slot,
            count,
            extra=fields(IDENTIFY_EVENT, {"identifies_today": count, "shard": shard_id}),
        )
        return count
