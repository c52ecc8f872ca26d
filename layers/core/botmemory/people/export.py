"""`/memory export`: everything kept about a member, found as `/forgetme` finds it
(botmemory.people.erasure), as JSON parts.

What is in it: every item that holds their id (the by_user index: their facts, a persona's
facts about them, the facts' history, their recorded messages, edits and reactions, their
short-term entries, profiles, pins they made, forget tombstones, pointers, deferred
candidates of their facts, quarantine records of their words), then the episodes and channel
summaries of the channels they spoke in that include or mention them, and their settings
(opted out, paused, the servers they agreed to be recorded in). Other people's words and
names are left out: a summary's other participants become "someone" (their names and
mentions), its participant list keeps only them; a history entry's actor other than them is
"staff or another member"; a quarantine record keeps only their own messages' keys.

It runs in steps: one page of the index at a time, the items of each page read by key; a
part is closed when it holds `part_chars` characters of JSON. The cursor is plain JSON, so an
export that runs short of time goes on from it in a later invocation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botmemory.people.names import mention_pattern, names_pattern
from botmemory.records import Episode
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository

PAGE = 100
PART_CHARS = 1_000_000
# An export stops and keeps its cursor when less time than this is left.
RESERVE_MS = 15_000
SOMEONE = "someone"
_ANY_MENTION = re.compile(r"<@!?(\d+)>")
_ITEMS, _EPISODES, _SETTINGS, _DONE = "items", "episodes", "settings", "done"
# Key attributes and index attributes: how the table finds an item, not what it says.
_HIDDEN = {"pk", "sk", "pending_sk", "sweep_bucket", "pending_since", "item_id", "fact_rank"}


@dataclass
class ExportCursor:
    """Where an export stands (plain JSON)."""

    phase: str = _ITEMS
    start: dict[str, Any] | None = None  # the index page to read next
    channels: list[str] = field(default_factory=list)  # SPOKE# channels, for episodes
    scopes: list[str] = field(default_factory=list)  # the servers their items are in
    names: list[str] = field(default_factory=list)  # the names their messages went by
    parts: int = 0
    items: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ExportCursor:
        data = data or {}
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    @property
    def finished(self) -> bool:
        return self.phase == _DONE


@dataclass
class ExportPart:
    number: int
    body: str  # JSON


class Exporter:
    """The member's export, part by part (module docstring)."""

    def __init__(
        self,
        repository: MemoryRepository,
        user_id: str,
        *,
        settings: Callable[[list[str]], dict[str, Any]],
        part_chars: int = PART_CHARS,
    ) -> None:
        """`settings`: their settings, given the servers they are in (the caller knows the
        hash and the caches)."""
        self._repository = repository
        self._user_id = user_id
        self._settings = settings
        self._part_chars = part_chars

    def parts(
        self, cursor: ExportCursor, time_left_ms: Callable[[], int] | None = None
    ) -> Iterator[ExportPart]:
        """The next parts, until done or short of time (the cursor then says where)."""
        pending: list[dict[str, Any]] = []
        size = 0
        while not cursor.finished:
            if time_left_ms is not None and time_left_ms() < RESERVE_MS:
                break
            for record in self._step(cursor):
                text = json.dumps(record, ensure_ascii=False, default=str)
                pending.append(record)
                size += len(text) + 2
                cursor.items += 1
            if size >= self._part_chars or (cursor.finished and pending):
                cursor.parts += 1
                yield ExportPart(cursor.parts, self._document(cursor, pending))
                pending, size = [], 0
        if pending:  # stopped short of time: what was read goes now
            cursor.parts += 1
            yield ExportPart(cursor.parts, self._document(cursor, pending))

    def _document(self, cursor: ExportCursor, records: list[dict[str, Any]]) -> str:
        return json.dumps(
            {
                "user_id": self._user_id,
                "part": cursor.parts,
                "last": cursor.finished,
                "records": records,
            },
            ensure_ascii=False,
            indent=1,
            default=str,
        )

    def _step(self, cursor: ExportCursor) -> list[dict[str, Any]]:
        if cursor.phase == _ITEMS:
            return self._items_page(cursor)
        if cursor.phase == _EPISODES:
            return self._channel_episodes(cursor)
        cursor.phase = _DONE
        return [{"record": "settings", **self._settings(sorted(cursor.scopes))}]

    def _items_page(self, cursor: ExportCursor) -> list[dict[str, Any]]:
        refs, cursor.start = self._repository.user_items_page(self._user_id, PAGE, cursor.start)
        if cursor.start is None:
            cursor.phase = _EPISODES
        records = []
        for item in self._repository.plain_items_at(refs):
            kind = keys.kind_of(str(item["sk"]))
            if kind == keys.ItemKind.SPOKE:
                channel = keys.channel_named_by(str(item["sk"]))
                if channel and channel not in cursor.channels:
                    cursor.channels.append(channel)
            if item.get("author_id") == self._user_id:
                for name in [item.get("author_name"), *(item.get("author_names") or [])]:
                    if isinstance(name, str) and name and name not in cursor.names:
                        cursor.names.append(name)
            scope = item.get("scope")
            if isinstance(scope, str) and scope and scope not in cursor.scopes:
                cursor.scopes.append(keys.server_scope_of(scope))
                cursor.scopes = sorted(set(cursor.scopes))
            records.append(self._theirs(kind, item))
        return records

    def _theirs(self, kind: keys.ItemKind, item: dict[str, Any]) -> dict[str, Any]:
        """An item as exported: what it says of them, without other members' ids."""
        shown = {k: v for k, v in item.items() if k not in _HIDDEN}
        actor = shown.get("actor_id")
        if isinstance(actor, str) and actor != self._user_id:
            shown["actor_id"] = "staff or another member"
        if kind == keys.ItemKind.QUARANTINE:
            shown.pop("observation_sks", None)
            shown["user_ids"] = [self._user_id]
        for words in ("content", "text", "summary"):
            if isinstance(shown.get(words), str):
                shown[words] = self._without_mentions(shown[words])
        return {"record": kind.value, **shown}

    def _without_mentions(self, text: str) -> str:
        """Other members' mentions as "someone"; theirs stay."""
        return _ANY_MENTION.sub(
            lambda m: m.group(0) if m.group(1) == self._user_id else SOMEONE, text
        )

    def _channel_episodes(self, cursor: ExportCursor) -> list[dict[str, Any]]:
        if not cursor.channels:
            cursor.phase = _SETTINGS
            return []
        channel = cursor.channels.pop(0)
        episodes: list[Episode] = list(self._repository.channel_episodes(channel))
        summary = self._repository.channel_summary(channel, consistent=True)
        if summary is not None:
            episodes.append(summary)
        return [self._redacted(e, cursor.names) for e in episodes if self._includes(e)]

    def _includes(self, episode: Episode) -> bool:
        return self._user_id in episode.participant_ids or bool(
            mention_pattern(self._user_id).search(episode.summary)
        )

    def _redacted(self, episode: Episode, their_names: list[str]) -> dict[str, Any]:
        """An episode or summary with every other member left out: their mentions and the
        names they went by in it become "someone"."""
        theirs = {
            name
            for pid, name in zip(episode.participant_ids, episode.participant_names, strict=False)
            if pid == self._user_id
        } | set(their_names)
        others = [n for n in episode.participant_names if n not in theirs]
        text = self._without_mentions(episode.summary)
        pattern = names_pattern(others)
        if pattern is not None:
            text = pattern.sub(SOMEONE, text)
        kind = "summary" if episode.sk == keys.SUMMARY_SK else "episode"
        return {
            "record": kind,
            "channel_id": episode.channel_id,
            "start_ms": episode.start_ms,
            "end_ms": episode.end_ms,
            "summary": text,
            "participant_ids": [self._user_id],
            "participant_names": sorted(n for n in theirs if n in episode.participant_names),
        }
