"""A server's lifecycle as the gateway tells it, beyond GUILD_DELETE (botmemory.ingest.observe
hands these here): a shard's READY, whose guild list reveals a removal the relay missed while
it was down (botmemory.people.server_removal.missing_from_ready), and, with the GUILD_MEMBERS
intent, a member who left (botmemory.people.departures.member_left).

The relay forwards READY trimmed to its guilds' ids and its shard, GUILD_MEMBER_REMOVE to its
guild and the user's id (relay.events)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from botmemory.clock import Clock
from botmemory.people.controls import RecordingGate
from botmemory.people.departures import member_left
from botmemory.people.server_removal import missing_from_ready
from botmemory.settings.config import Settings
from botmemory.snowflake import Snowflake
from botmemory.storage.repository import MemoryRepository

READY = "READY"
GUILD_MEMBER_REMOVE = "GUILD_MEMBER_REMOVE"
LIFECYCLE_EVENTS = frozenset({READY, GUILD_MEMBER_REMOVE})
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


class RemovedUser(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: Snowflake


class MemberRemove(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    guild_id: Snowflake
    user: RemovedUser


class LifecycleEvents:
    """READY and GUILD_MEMBER_REMOVE, for IngestFunction's recorder."""

    def __init__(
        self, repository: MemoryRepository, settings: Settings, clock: Clock, gate: RecordingGate
    ) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock
        self._gate = gate  # a server's controls, cached (its leavers' grace period)

    def record(self, label: str, payload: object) -> tuple[int, str | None]:
        """What was scheduled (a count), and why nothing was when nothing was; ValueError
        (pydantic's) for a payload that is not one."""
        now = self._clock.now_ms()
        if label == READY:
            ready = Ready.model_validate(payload)
            shard = (ready.shard[0], ready.shard[1]) if ready.shard else None
            scheduled = missing_from_ready(
                self._repository,
                set(ready.guilds),
                shard,
                now_ms=now,
                days=self._settings.server_purge_days,
            )
            return len(scheduled), None
        if not self._settings.guild_members_intent:
            return 0, "member removals are off (MEMORY_GUILD_MEMBERS_INTENT)"
        removed = MemberRemove.model_validate(payload)
        days = self._gate.controls(removed.guild_id).leavers_days
        why = member_left(self._repository, removed.guild_id, removed.user.id, days, now)
        return (0, why) if why is not None else (1, None)
