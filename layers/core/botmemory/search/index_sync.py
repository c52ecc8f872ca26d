"""The search index follows the table (docs/architecture.md, invariant 14): written after a consolidation commits,
emptied of whatever the table stops holding.

Writing: a round's passages go to the index after its commit, then their sources are read
back (strongly consistent) and any passage whose source has gone or changed meanwhile is
removed again. With erasure marking a person before deleting their items, and the stream
removing a passage whenever one of its items is deleted or rewritten, a deletion racing the
write is caught by one side or the other.

Following: the table's stream (REMOVE and MODIFY records of observations, facts, episodes
and archived channel summaries: SearchIndexFunction's filter in template.yaml must let
each of these kinds through) names the passages to remove. One path for every way an item
leaves the table: TTL expiry, /forgetme and opt-out, a message deleted in Discord (the
archived summaries covering it included), /memory forget, staff corrections, supersession
and the episode cap. The current channel summary is never indexed (recall reads it). A MODIFY
that brings an item's expiry in (a server's shortened retention, botmemory.people.retention_job)
gives its passages that expiry in an index that keeps one per passage (the keyword legs):
they leave search when the item does, not when the old expiry says.

A fact that stays active under new words (the chat model's correction) keeps its passage id:
its writer indexes it again through the same writer (`reindex_fact`), whose upsert replaces
the old words, and the stream leaves that id alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from botmemory.clock import Clock
from botmemory.records import Fact, FactStatus, MemoryScope
from botmemory.search.keyword_retry import KeywordRetry, retry_messages
from botmemory.search.passages import fact_passage, still_held
from botmemory.search.port import (
    ExpiryShortening,
    KeywordsOnly,
    Passage,
    SearchIndex,
    VectorsOnly,
)
from botmemory.search.sources import passage_sources
from botmemory.storage import keys
from botmemory.storage.items import from_item
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)


@dataclass
class IndexReport:
    written: int = 0  # index writes
    withdrawn: int = 0  # passages removed again: a source went while they were written
    # Why the passages went in for keywords only (marked for re-embedding), if they did.
    vector_error: Exception | None = None
    # Why they went in for vectors only (the keyword leg's database did not answer), if they did.
    keyword_error: Exception | None = None
    # Of those, how many were handed to the work queue to be written by their words later.
    keyword_retries: int = 0


# Hands passages the keyword leg missed to the work queue (botmemory.search.keyword_retry).
KeywordRetrySender = Callable[[list[KeywordRetry]], None]


class IndexWriter:
    def __init__(
        self,
        index: SearchIndex,
        repository: MemoryRepository,
        clock: Clock,
        keyword_retry: KeywordRetrySender | None = None,
    ) -> None:
        self._index = index
        self._repository = repository
        self._clock = clock
        self._keyword_retry = keyword_retry

    def write(
        self, passages: list[Passage], remove: Sequence[str] = (), scope: str | None = None
    ) -> IndexReport:
        """Remove what the round made stale (passages of deleted messages, of `scope`), index
        the new passages, then withdraw those the table no longer holds as written."""
        if remove:
            self._index.remove(remove, scope=scope)
        if not passages:
            return IndexReport()
        vector_error: Exception | None = None
        keyword_error: Exception | None = None
        try:
            written = self._index.add(passages)
        except KeywordsOnly as partial:  # written all the same: they must be checked too
            written, vector_error = partial.written, partial.error
        except VectorsOnly as partial:  # likewise
            written, keyword_error = partial.written, partial.error
        sources = passage_sources(self._repository, passages)
        now = self._clock.now_ms()
        stale = [p for p in passages if not still_held(p, sources.get(p.id, []), now)]
        for stale_scope, ids in by_scope((p.scope, p.id) for p in stale).items():
            self._index.remove(ids, scope=stale_scope)
        retried = 0
        if keyword_error is not None:
            gone = {p.id for p in stale}
            retried = self._retry_keywords([p for p in passages if p.id not in gone])
        return IndexReport(
            written=written,
            withdrawn=len(stale),
            vector_error=vector_error,
            keyword_error=keyword_error,
            keyword_retries=retried,
        )

    def _retry_keywords(self, passages: list[Passage]) -> int:
        """Queue what the keyword leg missed; 0 when there is no queue or it refused (the
        round counts SearchIndexVectorsOnly all the same: the alarm names the command)."""
        if self._keyword_retry is None or not passages:
            return 0
        try:
            self._keyword_retry(retry_messages(passages))
        except Exception as error:
            log.warning("keyword retry not queued", extra={"error": repr(error)[:300]})
            return 0
        return len(passages)

    def withdraw(self, ids: Sequence[str], scope: str | None = None) -> None:
        """Remove these passages; a failure is logged. What stays is never shown (recall reads
        every hit back from the table and drops words it no longer holds), and the stream
        removes it when its item is next deleted or leaves the active facts."""
        try:
            self._index.remove(ids, scope=scope)
        except Exception as error:
            log.warning(
                "passages not withdrawn", extra={"ids": list(ids), "error": repr(error)[:300]}
            )


def reindex_fact(writer: IndexWriter, fact: Fact, subject_name: str | None) -> IndexReport:
    """A fact's passage written again after a commit changed its words: the same id, so the
    old words go with the upsert; withdrawn again if the fact changed meanwhile. A persona's
    memories are never indexed (as at consolidation), nor is a fact no longer active. An
    index failure removes the passage (no old words left behind) and raises."""
    passage = fact_passage(fact, subject_name) if fact.memory_scope == MemoryScope.USER else None
    if passage is None:
        return IndexReport()
    try:
        return writer.write([passage])
    except Exception:
        writer.withdraw([passage.id], scope=passage.scope)
        raise


@dataclass
class FollowReport:
    removed: int = 0  # passage ids sent for removal
    shortened: int = 0  # passage ids whose expiry was brought in
    skipped: int = 0  # records that could not be read (logged)


class IndexFollower:
    """Removes the passages of table items the stream reports deleted or rewritten."""

    def __init__(self, index: SearchIndex) -> None:
        self._index = index

    def follow(self, records: Iterable[dict[str, Any]]) -> FollowReport:
        report = FollowReport()
        pairs: list[tuple[str | None, str]] = []
        shorter: dict[int, list[str]] = {}
        for record in records:
            try:
                scope = scope_of_record(record)
                pairs += [(scope, pid) for pid in passages_to_remove(record)]
                expiry = shortened_expiry(record)
                if expiry is not None:
                    shorter.setdefault(expiry, []).extend(passages_of(record))
            except (KeyError, TypeError, ValueError) as error:
                report.skipped += 1
                log.warning(
                    "unreadable stream record skipped",
                    extra={"event_id": _event_id(record), "error": repr(error)[:200]},
                )
        # An index failure raises: the stream retries the batch (idempotent).
        for scope, ids in by_scope(pairs).items():
            self._index.remove(ids, scope=scope)
            report.removed += len(ids)
        if isinstance(self._index, ExpiryShortening):
            for expires_at, ids in shorter.items():
                report.shortened += self._index.shorten_expiry(ids, expires_at)
        return report


def by_scope(pairs: Iterable[tuple[str | None, str]]) -> dict[str | None, list[str]]:
    """Passage ids grouped by the scope they belong to (each id once per scope)."""
    grouped: dict[str | None, dict[str, None]] = {}
    for scope, pid in pairs:
        grouped.setdefault(scope, {})[pid] = None
    return {scope: list(ids) for scope, ids in grouped.items()}


def scope_of_record(record: dict[str, Any]) -> str | None:
    """The scope a stream record's item was stored under (observations, facts, episodes and
    summaries all carry it), so a sharded index removes its passages from the right server's
    index; None when the old image has none."""
    old = from_item(record["dynamodb"].get("OldImage") or {})
    scope = old.get("scope")
    return str(scope) if isinstance(scope, str) and scope else None


def _event_id(record: Any) -> str | None:
    return record.get("eventID") if isinstance(record, dict) else None


def shortened_expiry(record: dict[str, Any]) -> int | None:
    """The new expiry of an item a MODIFY record shows expiring sooner; None otherwise."""
    if record["eventName"] != "MODIFY":
        return None
    change = record["dynamodb"]
    old = from_item(change.get("OldImage") or {}).get("expires_at")
    new = from_item(change.get("NewImage") or {}).get("expires_at")
    if not isinstance(new, int) or (isinstance(old, int) and new >= old):
        return None
    return new


def passages_of(record: dict[str, Any]) -> list[str]:
    """The passage ids that copy a stream record's item (its old image)."""
    change = record["dynamodb"]
    old = from_item(change.get("OldImage") or {})
    kind = keys.kind_of(change["Keys"]["sk"]["S"])
    if kind == keys.ItemKind.OBSERVATION:
        return [str(p) for p in old.get("passages") or []]
    if kind == keys.ItemKind.FACT and {"scope", "user_id", "fact_id"} <= old.keys():
        return [keys.fact_passage_id(old["scope"], old["user_id"], old["fact_id"])]
    if kind == keys.ItemKind.EPISODE and {"channel_id", "episode_id"} <= old.keys():
        return [keys.episode_passage_id(old["channel_id"], old["episode_id"])]
    if kind == keys.ItemKind.SUMMARY_ARCHIVE and {"channel_id", "episode_id"} <= old.keys():
        return [keys.summary_passage_id(old["channel_id"], old["episode_id"])]
    return []


def passages_to_remove(record: dict[str, Any]) -> list[str]:
    """The passage ids a stream record of the table makes stale (none for most records)."""
    event = record["eventName"]
    change = record["dynamodb"]
    sk = change["Keys"]["sk"]["S"]
    old = from_item(change.get("OldImage") or {})
    new = from_item(change.get("NewImage") or {})
    if event not in ("REMOVE", "MODIFY") or not old:
        return []
    removed = event == "REMOVE"
    kind = keys.kind_of(sk)
    if kind == keys.ItemKind.OBSERVATION:
        rewritten = old.get("content") != new.get("content")
        return list(old.get("passages") or []) if removed or rewritten else []
    if kind == keys.ItemKind.FACT:
        # A fact still active under new words (a correction, a restatement) keeps its passage
        # id, and whoever wrote the words indexes them after their commit (reindex_fact,
        # the consolidator): removing that id here, later, would remove the new words too.
        if removed or new.get("status") != FactStatus.ACTIVE:
            return [keys.fact_passage_id(old["scope"], old["user_id"], old["fact_id"])]
        return []
    if kind == keys.ItemKind.EPISODE and (removed or old.get("summary") != new.get("summary")):
        return [keys.episode_passage_id(old["channel_id"], old["episode_id"])]
    if kind == keys.ItemKind.SUMMARY_ARCHIVE and removed:
        return [keys.summary_passage_id(old["channel_id"], old["episode_id"])]
    return []
