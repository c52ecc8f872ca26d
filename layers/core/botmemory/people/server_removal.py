"""A server's lifecycle: the bot removed from a guild, its data purged after a grace period.

- `GUILD_DELETE` without `unavailable` (the bot was removed, kicked, or the guild deleted)
  schedules the server's purge `MEMORY_SERVER_PURGE_DAYS` later (`guild_removed`);
  `unavailable: true` is an outage and changes nothing.
- `GUILD_CREATE` (the bot back, or the guild available again) cancels it (`guild_back`), and
  records the server among those the deployment knows.
- A shard's `READY` lists the guilds the bot is in on that shard; a known server of that shard
  missing from it was removed while the relay was down (no GUILD_DELETE came): its purge is
  scheduled as a GUILD_DELETE's would be (`missing_from_ready`), once (a later READY does not
  postpone it), and cancelled by its GUILD_CREATE if it comes back.
- The scheduled purge (`purge_due`, ServerPurgeFunction every hour) finds what is due in the
  `PURGE` partition by key and deletes the server's items by key, never by Scan
  (botmemory.storage.lifecycle): its channels' partitions (named by its visibility items),
  its scope partition and its personas' (the server's personas name those), its members'
  partitions in those scopes (the members the deleted items name), its answer rate counters,
  then its guild partition. Steps are a page of one partition each; when the invocation runs
  short of time the run keeps its checkpoint on the server's marker and the next run goes on.
  The search index follows the table's deletions through the stream, as for every erasure.
  The marker of a search index purge (keys.INDEX_PURGED_SK) stays, as `ops.purge_server`
  leaves it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botmemory.clock import DAY_MS
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)

PAGE = 100
# A run looks at this many due servers at most (the next run takes the rest).
DUE_PER_RUN = 10
RESERVE_MS = 20_000
_CHANNELS, _SCOPES, _PEOPLE, _REST, _DONE = "channels", "scopes", "people", "rest", "done"


def guild_removed(
    repository: MemoryRepository, guild_id: str, *, unavailable: bool, now_ms: int, days: int
) -> str | None:
    """What a GUILD_DELETE does: None when it scheduled the purge, else why not."""
    if unavailable:
        return "guild unavailable (an outage): nothing purged"
    repository.schedule_server_purge(guild_id, now_ms, now_ms + days * DAY_MS)
    log.info("server removed: purge scheduled", extra={"guild_id": guild_id, "days": days})
    return None


def missing_from_ready(
    repository: MemoryRepository,
    listed: set[str],
    shard: tuple[int, int] | None,
    *,
    now_ms: int,
    days: int,
) -> list[str]:
    """What a READY does: the known servers of its shard it does not list, their purge
    scheduled (those scheduled already keep theirs); the ones scheduled now."""
    scheduled = []
    for guild_id in repository.known_servers():
        if guild_id in listed or not _on_shard(guild_id, shard):
            continue
        if repository.server_purge_state(guild_id)[0] is not None:
            continue
        repository.schedule_server_purge(guild_id, now_ms, now_ms + days * DAY_MS)
        scheduled.append(guild_id)
    if scheduled:
        log.info(
            "servers missing from READY: purge scheduled",
            extra={"guild_ids": scheduled, "days": days, "shard": list(shard or ())},
        )
    return scheduled


def _on_shard(guild_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether Discord sends this guild to this shard (its documented formula)."""
    if shard is None:
        return True
    shard_id, shard_count = shard
    return (int(guild_id) >> 22) % shard_count == shard_id


def guild_back(
    repository: MemoryRepository, guild_id: str, now_ms: int, joined_at_ms: int | None = None
) -> bool:
    """What a GUILD_CREATE does: the server known (with when the bot joined it, when known:
    botmemory.catchup.on_join), a scheduled purge cancelled; True when there was one."""
    repository.know_server(guild_id, now_ms, joined_at_ms)
    cancelled = repository.cancel_server_purge(guild_id)
    if cancelled:
        log.info("server back: purge cancelled", extra={"guild_id": guild_id})
    return cancelled


@dataclass
class PurgeRun:
    """One server's purge under way (plain JSON, kept on its marker between runs)."""

    phase: str = _CHANNELS
    channels: list[str] = field(default_factory=list)
    scopes: list[str] = field(default_factory=list)  # the server's and its personas'
    people: list[str] = field(default_factory=list)
    position: int = 0  # the partition of the phase being emptied
    deleted: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PurgeRun:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class PurgeReport:
    servers: list[str] = field(default_factory=list)  # purged whole
    items: int = 0
    unfinished: str | None = None  # the server a run left for the next


def purge_due(
    repository: MemoryRepository, now_ms: int, time_left_ms: Callable[[], int] | None = None
) -> PurgeReport:
    """Purge the servers whose grace period is over (module docstring)."""

    def short() -> bool:
        return time_left_ms is not None and time_left_ms() < RESERVE_MS

    report = PurgeReport()
    for guild_id in repository.server_purges_due(now_ms, DUE_PER_RUN):
        purge_at, checkpoint = repository.server_purge_state(guild_id)
        if purge_at is None or purge_at > now_ms:  # cancelled, or rescheduled meanwhile
            continue
        run = PurgeRun.from_json(checkpoint) if checkpoint else _start(repository, guild_id)
        before = run.deleted
        while run.phase != _DONE and not short():
            _step(repository, guild_id, run)
        report.items += run.deleted - before
        if run.phase != _DONE:
            repository.keep_server_purge_checkpoint(guild_id, run.to_json())
            report.unfinished = guild_id
            log.info("server purge continues", extra={"guild_id": guild_id, **_counts(run)})
            break
        repository.finish_server_purge(guild_id, purge_at)
        report.servers.append(guild_id)
        log.info("server purged", extra={"guild_id": guild_id, **_counts(run)})
        if short():
            break
    return report


def _counts(run: PurgeRun) -> dict[str, int]:
    return {"deleted": run.deleted, "channels": len(run.channels), "people": len(run.people)}


def _start(repository: MemoryRepository, guild_id: str) -> PurgeRun:
    lineages = repository.server_lineages(guild_id)
    return PurgeRun(
        channels=repository.server_channel_ids(guild_id),
        scopes=[guild_id] + [keys.persona_scope(guild_id, lineage) for lineage in lineages],
    )


def _partitions(guild_id: str, run: PurgeRun) -> list[str]:
    """The partitions of the run's phase, in order."""
    if run.phase == _CHANNELS:
        return [keys.channel_pk(c) for c in run.channels]
    if run.phase == _SCOPES:
        return [keys.scope_pk(s) for s in run.scopes]
    if run.phase == _PEOPLE:
        return [keys.user_pk(s, person) for person in run.people for s in run.scopes]
    return [keys.rate_pk(s) for s in run.scopes] + [keys.guild_pk(guild_id)]


def _step(repository: MemoryRepository, guild_id: str, run: PurgeRun) -> None:
    """One page of one partition, or a move to the next partition or phase."""
    pks = _partitions(guild_id, run)
    if run.position >= len(pks):
        run.phase = {_CHANNELS: _SCOPES, _SCOPES: _PEOPLE, _PEOPLE: _REST}.get(run.phase, _DONE)
        run.position = 0
        return
    pk = pks[run.position]
    kept = keys.REMOVED_SK if pk == keys.guild_pk(guild_id) else keys.INDEX_PURGED_SK
    deleted, people = repository.purge_partition_page(pk, PAGE, keep_sk=kept)
    if run.phase in (_CHANNELS, _SCOPES):  # the members these name have partitions here
        run.people = sorted(set(run.people) | people)
    run.deleted += deleted
    if not deleted:
        run.position += 1
