"""A server's lifecycle as the gateway tells it, beyond GUILD_DELETE (botmemory.ingest.observe
hands these here): a shard's READY, whose guild list reveals a removal the relay missed while
it was down (botmemory.people.server_removal.missing_from_ready).

The relay forwards READY trimmed to its guilds' ids and its shard (relay.events)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from botmemory.people.server_removal import missing_from_ready
from botmemory.snowflake import Snowflake
from botmemory.storage.repository import MemoryRepository

READY = "READY"
LIFECYCLE_EVENTS = frozenset({READY})
# Discord sends a shard at most a few thousand guilds; far beyond is not a real READY.
MAX_READY_GUILDS = 20_000


class Ready(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    guilds: Annotated[list[Snowflake], Field(max_length=MAX_READY_GUILDS)]
    shard: Annotated[list[int], Field(min_length=2, max_length=2)] | None = None

    @model_validator(mode="after")
    def _shard_in_range(self) -> Ready:
        if self.shard is not None and not 0 <= self.shard[0] < self.shard[1] <= 100_000:
            raise ValueError("shard is [shard id, shard count], the id below the count")
        return self


def record_ready(
    repository: MemoryRepository, payload: object, *, now_ms: int, days: int
) -> list[str]:
    """A READY: the known servers of its shard it does not list get their purge scheduled;
    ValueError (pydantic's) when it is not one."""
    ready = Ready.model_validate(payload)
    shard = (ready.shard[0], ready.shard[1]) if ready.shard else None
    return missing_from_ready(repository, set(ready.guilds), shard, now_ms=now_ms, days=days)
