"""The background job that brings a server's stored items in line with a retention its staff
shortened (botmemory.people.retention), run by ServerPurgeFunction after its purges.

`/memory-staff retention` records the change and a pointer in the `RETAIN` partition that
may start once every container reads the new retention (`CACHE_MS` later): from then on
nothing is written with the old expiry, so one pass is enough. The pass finds the server's
partitions by key, never by Scan, as the server purge does (botmemory.people.server_removal):
its channels' (its visibility items name them), its scope's and its personas', and its
members' in those scopes (the members the items read name). A step is one page of one
partition; each item that would outlive the retention gets its expiry (the table's TTL
attribute) brought in, conditionally (an item that expires sooner already, or went, stays
as it is). When the invocation runs short of time, the run keeps its checkpoint on the
pointer and the next run goes on; staff changing the retention again starts it over.

The search index follows through the table's stream: a MODIFY that brings an item's expiry
in gives the keyword leg's rows of its passages that expiry (botmemory.search.index_sync),
and the TTL's deletion removes its passages everywhere, as for every item that expires.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from botmemory.people.retention import Retention
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)

PAGE = 100
# A run looks at this many servers at most (the next run takes the rest).
SERVERS_PER_RUN = 10
RESERVE_MS = 20_000
_CHANNELS, _SCOPES, _PEOPLE, _DONE = "channels", "scopes", "people", "done"
_NEXT = {_CHANNELS: _SCOPES, _SCOPES: _PEOPLE}
# The person fields an item may name someone by.
_PEOPLE_FIELDS = ("author_id", "user_id", "user_ids", "participant_ids")


@dataclass
class RetentionRun:
    """One server's pass under way (plain JSON, kept on its pointer between runs)."""

    phase: str = _CHANNELS
    channels: list[str] = field(default_factory=list)
    scopes: list[str] = field(default_factory=list)
    people: list[str] = field(default_factory=list)
    position: int = 0
    after: str | None = None  # the last sort key read in the partition being walked
    read: int = 0
    shortened: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetentionRun:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class RetentionReport:
    servers: list[str] = field(default_factory=list)  # brought in line whole
    read: int = 0
    shortened: int = 0  # items whose expiry was brought in
    unfinished: str | None = None


def apply_due(
    repository: MemoryRepository,
    settings: Settings,
    now_ms: int,
    time_left_ms: Callable[[], int] | None = None,
) -> RetentionReport:
    """Bring the servers waiting in line with their retention (module docstring)."""

    def short() -> bool:
        return time_left_ms is not None and time_left_ms() < RESERVE_MS

    report = RetentionReport()
    for guild_id, start_ms, checkpoint in repository.retention_runs(SERVERS_PER_RUN):
        if start_ms > now_ms or short():
            continue
        retention = Retention.of(settings, repository.guild_controls(guild_id).retention)
        run = RetentionRun.from_json(checkpoint) if checkpoint else _start(repository, guild_id)
        read, shortened = run.read, run.shortened
        while run.phase != _DONE and not short():
            _step(repository, retention, run, now_ms)
        report.read += run.read - read
        report.shortened += run.shortened - shortened
        counts = {"guild_id": guild_id, "read": run.read, "shortened": run.shortened}
        if run.phase != _DONE:
            repository.keep_retention_checkpoint(guild_id, start_ms, run.to_json())
            report.unfinished = guild_id
            log.info("server retention continues", extra=counts)
            break
        repository.finish_retention_run(guild_id, start_ms)
        report.servers.append(guild_id)
        log.info("server retention applied", extra=counts)
    return report


def _start(repository: MemoryRepository, guild_id: str) -> RetentionRun:
    lineages = repository.server_lineages(guild_id)
    return RetentionRun(
        channels=repository.server_channel_ids(guild_id),
        scopes=[guild_id] + [keys.persona_scope(guild_id, lineage) for lineage in lineages],
    )


def _partitions(run: RetentionRun) -> list[str]:
    if run.phase == _CHANNELS:
        return [keys.channel_pk(c) for c in run.channels]
    if run.phase == _SCOPES:
        return [keys.scope_pk(s) for s in run.scopes]
    return [keys.user_pk(s, person) for person in run.people for s in run.scopes]


def _step(repository: MemoryRepository, retention: Retention, run: RetentionRun, now: int) -> None:
    """One page of one partition, or a move to the next partition or phase."""
    pks = _partitions(run)
    if run.position >= len(pks):
        run.phase, run.position, run.after = _NEXT.get(run.phase, _DONE), 0, None
        return
    pk = pks[run.position]
    items, run.after = repository.expiry_page(pk, run.after, PAGE)
    people: set[str] = set()
    for item in items:
        due = retention.item_expiry(item, now)
        if due is not None and repository.shorten_expiry(pk, str(item["sk"]), due):
            run.shortened += 1
        for name in _PEOPLE_FIELDS:
            value = item.get(name)
            values = value if isinstance(value, list) else [value]
            people.update(str(v) for v in values if isinstance(v, str) and v.isdigit())
    run.read += len(items)
    if run.phase in (_CHANNELS, _SCOPES):  # the members these name have partitions here
        run.people = sorted(set(run.people) | people)
    if run.after is None:
        run.position += 1
