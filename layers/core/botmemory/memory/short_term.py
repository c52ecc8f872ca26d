"""Short-term cross-channel memory: what each person did lately in the server's other public
channels, so that moving from #dev to #general keeps the thread.

Written at consolidation, never per event: a round in a public channel (botmemory.ingest.channels:
@everyone can view it; unknown counts as private) leaves, for each person who spoke in it,
one entry pointing at their latest messages there, replacing that person's entry for the
channel. Entries expire after MEMORY_SHORT_TERM_HOURS; a person keeps at most
MEMORY_SHORT_TERM_PER_PERSON (their oldest go). Nothing from a private channel, a direct
message or an opted-out person is ever written.

An entry holds no words: recall reads the messages it points at as the table holds them now,
so a message deleted, redacted or erased since is shown changed or not at all. Recall shows
the entries of the people in the conversation, from channels other than the one it is asked
for, newest first, within MEMORY_RECALL_SHORT_TERM_CHARS.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from botmemory.clock import HOUR_MS, epoch_seconds, ttl_alive
from botmemory.records import Observation, ObservationKind, ShortTermEntry, scope_of
from botmemory.settings.config import Settings
from botmemory.storage.repository import MemoryRepository

# An entry points at its person's latest messages in the channel, at most this many.
MESSAGES_PER_ENTRY = 2


def entries_for_round(
    observations: Iterable[Observation],
    *,
    scope: str,
    channel_id: str,
    bot_user_id: str | None,
    settings: Settings,
    now_ms: int,
) -> list[ShortTermEntry]:
    """One entry per person whose words the round consumed (people only, not the bot)."""
    said: dict[str, list[Observation]] = {}
    for obs in sorted(observations, key=lambda o: (o.at_ms, o.sk)):
        if (
            obs.kind == ObservationKind.MESSAGE
            and obs.content.strip()
            and obs.author_id
            and not obs.author_is_bot
            and obs.author_id != bot_user_id
        ):
            said.setdefault(obs.author_id, []).append(obs)
    expires_at = epoch_seconds(now_ms + settings.short_term_hours * HOUR_MS)
    return [
        ShortTermEntry(
            scope=scope,
            user_id=user_id,
            channel_id=channel_id,
            observation_sks=[o.sk for o in messages[-MESSAGES_PER_ENTRY:]],
            messages=len(messages),
            at_ms=messages[-1].at_ms,
            expires_at=expires_at,
        )
        for user_id, messages in said.items()
    ]


def crosses_channels(repository: MemoryRepository, scope: str, channel_id: str) -> bool:
    """Whether a round's channel may leave short-term entries: a server channel that
    @everyone can view (never a direct message, never a private or unknown channel)."""
    return scope != scope_of(None) and repository.channel_is_public(scope, channel_id)


@dataclass(frozen=True)
class RecentElsewhere:
    """One entry as recall shows it: the person's latest messages there, as stored now."""

    entry: ShortTermEntry
    messages: list[Observation]


def recent_elsewhere(
    repository: MemoryRepository,
    entries: dict[str, list[ShortTermEntry]],
    *,
    channel_id: str,
    now_ms: int,
    per_person: int,
) -> list[RecentElsewhere]:
    """The people's live entries from other channels, newest first, with the messages the
    table still holds (one read for them all); entries left with none are dropped."""
    live = [
        entry
        for person_entries in entries.values()
        for entry in person_entries[:per_person]
        if entry.channel_id != channel_id and ttl_alive(entry.expires_at, now_ms)
    ]
    wanted: dict[str, list[str]] = {}
    for entry in live:
        wanted.setdefault(entry.channel_id, []).extend(entry.observation_sks)
    held = repository.messages_still_held(wanted) if wanted else {}
    shown: list[RecentElsewhere] = []
    for entry in sorted(live, key=lambda e: e.at_ms, reverse=True):
        theirs = [
            o
            for o in held.get(entry.channel_id, [])
            if o.sk in entry.observation_sks and o.author_id == entry.user_id and o.content
        ]
        if theirs:
            shown.append(RecentElsewhere(entry, theirs))
    return shown
