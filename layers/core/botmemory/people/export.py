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

It runs in steps: one Query page of the index at a time (`PAGE` keys: the index projects
keys only), the items of each page read by key a BatchGetItem at a time (`BATCH_GET_LIMIT`),
in the index's order; a part is closed when it holds `PART_BYTES` bytes of JSON, wherever
that falls in a page. The cursor is plain JSON and says where the last record of the parts
so far was (the index key of the last item, the last episode of a channel), so an export
that runs short of time, or whose part was refused, goes on from exactly there in a later
invocation: no record lost, none twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from botmemory.people.names import mention_pattern, names_pattern
from botmemory.records import Episode
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.table import BATCH_GET_LIMIT, ItemRef

# Keys a Query page of the index asks for. The index projects keys only (some 120 bytes
# each), so a page stays far under the 1 MB DynamoDB returns at most; ten BatchGetItem
# calls read its items. Ten times fewer Queries than pages of a BatchGetItem's 100 keys.
PAGE = 1_000
PART_BYTES = 1_000_000
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
    episode_after: str = ""  # the sort key of the last episode taken of channels[0]
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
        part_bytes: int | None = None,
    ) -> None:
        """`settings`: their settings, given the servers they are in (the caller knows the
        hash and the caches)."""
        self._repository = repository
        self._user_id = user_id
        self._settings = settings
        self._part_bytes = part_bytes or PART_BYTES

    def parts(
        self, cursor: ExportCursor, time_left_ms: Callable[[], int] | None = None
    ) -> Iterator[ExportPart]:
        """The next parts, until done or short of time (the cursor then says where). When a
        part is yielded, the cursor stands just after its last record."""

        def short_of_time() -> bool:
            return time_left_ms is not None and time_left_ms() < RESERVE_MS

        pending: list[dict[str, Any]] = []
        size = 0
        for record in self._records(cursor, short_of_time):
            pending.append(record)
            size += len(json.dumps(record, ensure_ascii=False, default=str).encode()) + 2
            cursor.items += 1
            if size >= self._part_bytes or cursor.finished:
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

    def _records(
        self, cursor: ExportCursor, short_of_time: Callable[[], bool]
    ) -> Iterator[dict[str, Any]]:
        """The records from the cursor on, one at a time; each is yielded with the cursor
        already past it (and never past a record not yet yielded), so a part may close after
        any of them. Stops before a request when time runs short."""
        while cursor.phase == _ITEMS:
            if short_of_time():
                return
            refs, end = self._repository.user_items_page(self._user_id, PAGE, cursor.start)
            for start in range(0, len(refs), BATCH_GET_LIMIT):
                if start and short_of_time():
                    return
                yield from self._items_at(cursor, refs[start : start + BATCH_GET_LIMIT])
            if end is None:
                cursor.phase, cursor.start = _EPISODES, None
            else:
                cursor.start = end  # where the last item was, or past what was filtered out
        while cursor.phase == _EPISODES:
            if short_of_time():
                return
            yield from self._channel_episodes(cursor)
        if cursor.phase == _SETTINGS:
            cursor.phase = _DONE
            yield {"record": "settings", **self._settings(sorted(cursor.scopes))}

    def _items_at(self, cursor: ExportCursor, refs: list[ItemRef]) -> Iterator[dict[str, Any]]:
        """These items of the index, in its order (a BatchGetItem answers in any order); the
        cursor moves past each, and past an item gone since the page was read."""
        found = {(str(i["pk"]), str(i["sk"])): i for i in self._repository.plain_items_at(refs)}
        for ref in refs:
            cursor.start = self._repository.user_items_after(self._user_id, ref)
            item = found.get((ref.pk, ref.sk))
            if item is not None:
                yield self._taken(cursor, item)

    def _taken(self, cursor: ExportCursor, item: dict[str, Any]) -> dict[str, Any]:
        """An item's record; what the later phases need of it goes into the cursor."""
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
        return self._theirs(kind, item)

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

    def _channel_episodes(self, cursor: ExportCursor) -> Iterator[dict[str, Any]]:
        """The first channel's episodes and summary that include them, in sort key order
        (the summary's sorts last), from the one after `episode_after`; then the channel is
        done."""
        if not cursor.channels:
            cursor.phase = _SETTINGS
            return
        channel = cursor.channels[0]
        episodes: Iterable[Episode] = self._repository.channel_episodes(channel)
        summary = self._repository.channel_summary(channel, consistent=True)
        for episode in [*episodes, *([summary] if summary is not None else [])]:
            if episode.sk <= cursor.episode_after:
                continue  # in a part already
            cursor.episode_after = episode.sk
            if self._includes(episode):
                yield self._redacted(episode, cursor.names)
        cursor.channels.pop(0)
        cursor.episode_after = ""

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
