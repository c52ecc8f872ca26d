"""How many shards, which ones a task holds, and which IDENTIFY bucket each is in.

Discord's rules (its "Sharding" page): `/gateway/bot` recommends a shard count; a shard
gets the guilds with `(guild_id >> 22) % count == id`; shards whose `id %
max_concurrency` match share one IDENTIFY bucket (one IDENTIFY per 5 s each); a bot
with large bot sharding (max_concurrency above 1) must run a multiple of
max_concurrency shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class GatewayInfoError(ValueError):
    """`/gateway/bot` answered something the relay cannot use."""


@dataclass(frozen=True)
class GatewayInfo:
    """`GET /gateway/bot`: where to connect, how many shards, and the session starts."""

    url: str
    shards: int
    max_concurrency: int
    total: int
    remaining: int
    reset_after_seconds: float

    @classmethod
    def parse(cls, data: Any) -> GatewayInfo:
        try:
            limit = data["session_start_limit"]
            info = cls(
                url=str(data["url"]),
                shards=int(data["shards"]),
                max_concurrency=int(limit.get("max_concurrency", 1)),
                total=int(limit["total"]),
                remaining=int(limit["remaining"]),
                reset_after_seconds=float(limit["reset_after"]) / 1000,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise GatewayInfoError(f"/gateway/bot answered without {error}") from None
        if not info.url.startswith(("ws://", "wss://")) or info.shards < 1:
            raise GatewayInfoError("/gateway/bot answered an unusable url or shard count")
        if info.max_concurrency < 1:
            raise GatewayInfoError("/gateway/bot answered max_concurrency below 1")
        return info


def shard_count(recommended: int, max_concurrency: int, chosen: int | None = None) -> int:
    """The count to run: the operator's if set, else Discord's recommendation; for a bot
    with large bot sharding rounded up to a multiple of max_concurrency."""
    count = chosen if chosen is not None else max(1, recommended)
    if max_concurrency > 1 and count % max_concurrency:
        count += max_concurrency - count % max_concurrency
    return count


def bucket(shard_id: int, max_concurrency: int) -> int:
    return shard_id % max_concurrency


def ranges(count: int, tasks: int) -> list[range]:
    """`count` shards over `tasks` tasks in contiguous ranges whose sizes differ by at most
    one (no task holds an empty range: more tasks than shards leaves some on standby)."""
    tasks = max(1, min(tasks, count))
    size, extra = divmod(count, tasks)
    out: list[range] = []
    start = 0
    for index in range(tasks):
        end = start + size + (1 if index < extra else 0)
        out.append(range(start, end))
        start = end
    return out
