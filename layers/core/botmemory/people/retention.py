"""How long a server keeps what it keeps: the one rule of per-server retention.

The deployment's settings (MEMORY_FACT_RETENTION_DAYS, MEMORY_OBSERVATION_RETENTION_DAYS,
MEMORY_EPISODE_RETENTION_DAYS) are the maximums; a server's staff may shorten each
(`/memory-staff retention facts|messages|episodes <days>`), never lengthen it. Three kinds:

- facts: facts (from when they were last written), their history entries;
- messages: recorded messages (observations), quarantined batches;
- episodes: episodes, the channel's summary and its archives.

What follows a server's retention:

- recall shows nothing past it (`Retention.kept`), from the first recall that reads it;
- what ingest and consolidation write there expires by it (`Retention.expiry`,
  `clamp_commit`);
- what was stored before is brought in line by the background job
  (botmemory.people.retention_job); the search index follows the table's new expiry through
  the stream (botmemory.search.index_sync).

Readers cache a server's retention for `CACHE_MS` (a minute), as every control is.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from botmemory.clock import DAY_MS, Clock, epoch_seconds
from botmemory.people.optout import CACHE_MS
from botmemory.records import Fact, scope_of
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.commit import ConsolidationCommit
from botmemory.storage.repository import MemoryRepository

# A server keeps things at least a day.
MIN_DAYS = 1
MAX_CACHED = 10_000


class Kept(StrEnum):
    FACTS = "facts"
    MESSAGES = "messages"
    EPISODES = "episodes"


# The kind of retention an item follows, and the attribute that says when its time started.
_ITEMS: dict[keys.ItemKind, tuple[Kept, str]] = {
    keys.ItemKind.OBSERVATION: (Kept.MESSAGES, "at_ms"),
    keys.ItemKind.QUARANTINE: (Kept.MESSAGES, "quarantined_ms"),
    keys.ItemKind.FACT: (Kept.FACTS, "updated_ms"),
    keys.ItemKind.HISTORY: (Kept.FACTS, "at_ms"),
    keys.ItemKind.EPISODE: (Kept.EPISODES, "created_ms"),
    keys.ItemKind.SUMMARY: (Kept.EPISODES, "created_ms"),
    keys.ItemKind.SUMMARY_ARCHIVE: (Kept.EPISODES, "created_ms"),
}


@dataclass(frozen=True)
class Retention:
    """Days kept, by kind, in one server (or the deployment's). Only the kinds staff
    shortened (`shortened_kinds`) are held to it here: the others keep to their TTL, as
    before (a fact's may be refreshed past its last write)."""

    facts: int
    messages: int
    episodes: int
    shortened_kinds: frozenset[Kept] = frozenset()

    @classmethod
    def deployment(cls, settings: Settings) -> Retention:
        return cls(
            facts=settings.fact_retention_days,
            messages=settings.observation_retention_days,
            episodes=settings.episode_retention_days,
        )

    @classmethod
    def of(cls, settings: Settings, chosen: Mapping[str, int]) -> Retention:
        """The deployment's maximums, shortened where staff chose (a stored value beyond the
        maximum, from before an operator lowered it, counts as the maximum)."""
        most = cls.deployment(settings)
        days = {
            kind: max(MIN_DAYS, min(most.days(kind), int(chosen.get(kind.value, 10**6))))
            for kind in Kept
        }
        return cls(
            facts=days[Kept.FACTS],
            messages=days[Kept.MESSAGES],
            episodes=days[Kept.EPISODES],
            shortened_kinds=frozenset(k for k in Kept if days[k] < most.days(k)),
        )

    def days(self, kind: Kept) -> int:
        return int(getattr(self, kind.value))

    def expiry(self, kind: Kept, at_ms: int) -> int:
        """When something of `kind` whose time started at `at_ms` expires (epoch seconds)."""
        return epoch_seconds(at_ms + self.days(kind) * DAY_MS)

    def kept(self, kind: Kept, at_ms: int, now_ms: int) -> bool:
        """Whether it may still be shown (within a retention staff shortened)."""
        return kind not in self.shortened_kinds or at_ms + self.days(kind) * DAY_MS > now_ms

    def facts_kept(self, facts: list[Fact], now_ms: int) -> list[Fact]:
        """The facts recall may still show."""
        return [f for f in facts if self.kept(Kept.FACTS, f.updated_ms, now_ms)]

    def shortened(self, settings: Settings) -> dict[str, int]:
        """The kinds this retention keeps shorter than the deployment (what staff chose)."""
        most = Retention.deployment(settings)
        return {k.value: self.days(k) for k in Kept if self.days(k) < most.days(k)}

    def item_expiry(self, item: Mapping[str, Any], now_ms: int) -> int | None:
        """A stored item's expiry under this retention when it would outlive it; None when
        it follows no retention, has no expiry or expires in time already."""
        found = _ITEMS.get(keys.kind_of(str(item.get("sk", ""))))
        if found is None:
            return None
        kind, time_field = found
        if kind not in self.shortened_kinds:
            return None
        started = item.get(time_field)
        at_ms = int(started) if isinstance(started, int | float) else now_ms
        due = self.expiry(kind, at_ms)
        current = item.get("expires_at")
        # An item kept without an expiry (by design) stays so; one expiring in time, too.
        if not isinstance(current, int | float) or current <= due:
            return None
        return due


def clamp_commit(commit: ConsolidationCommit, retention: Retention) -> None:
    """A consolidation commit's facts, history, episode and summaries expire by the server's
    retention (they were planned with the deployment's)."""

    def clamp(expires_at: int | None, kind: Kept, at_ms: int) -> int | None:
        if expires_at is None or kind not in retention.shortened_kinds:
            return expires_at
        return min(expires_at, retention.expiry(kind, at_ms))

    commit.facts = [
        f.model_copy(update={"expires_at": clamp(f.expires_at, Kept.FACTS, f.updated_ms)})
        for f in commit.facts
    ]
    for name in ("history", "history_later"):
        entries = getattr(commit, name)
        setattr(
            commit,
            name,
            [
                e.model_copy(update={"expires_at": clamp(e.expires_at, Kept.FACTS, e.at_ms)})
                for e in entries
            ],
        )
    for name in ("episode", "summary", "archived_summary"):
        episode = getattr(commit, name)
        if episode is not None:
            due = clamp(episode.expires_at, Kept.EPISODES, episode.created_ms)
            setattr(commit, name, episode.model_copy(update={"expires_at": due}))


class RetentionReader:
    """Servers' retention, cached per container for `CACHE_MS`."""

    def __init__(self, repository: MemoryRepository, settings: Settings, clock: Clock) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[Retention, int]] = {}

    def of(self, guild_id: str | None) -> Retention:
        """A server's retention; the deployment's in direct messages."""
        if guild_id is None or guild_id == scope_of(None):
            return Retention.deployment(self._settings)
        now = self._clock.now_ms()
        with self._lock:
            cached = self._cached.get(guild_id)
        if cached is not None and now - cached[1] < CACHE_MS:
            return cached[0]
        chosen = self._repository.guild_controls(guild_id).retention
        retention = Retention.of(self._settings, chosen)
        with self._lock:
            if len(self._cached) >= MAX_CACHED:
                self._cached.clear()
            self._cached[guild_id] = (retention, now)
        return retention

    def days_of(self, scope: str, kind: Kept) -> int:
        """Days something of `kind` written in `scope` (a persona's: its server's) is kept."""
        return self.of(keys.server_scope_of(scope)).days(kind)

    def forget(self, guild_id: str) -> None:
        with self._lock:
            self._cached.pop(guild_id, None)
