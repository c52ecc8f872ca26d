"""The search index sharded by server: one S3 Vectors index per server, beside the shared
index the template declares (MEMORY_SEARCH_INDEX=s3vectors:<bucket>/<shared index>).

Why one per server: the service caps an index (2 billion vectors, about 1,000 write requests
a second), not a bucket's total, so each server gets the whole of an index's limits, and a
server's purge is one DeleteIndex instead of a scan. A bucket holds at most 10,000 indexes
(S3 Vectors "Limitations and restrictions"); grouping small servers would only help past
that, and then the shared index takes them (below), so a deploy never breaks.

Names (`shard_name`, the one owner): `<shared>-g<guild id>` for a server, `<shared>-dm` for
direct messages (every DM shares the `dm` scope, so they are one index of their own). A
guild id is at most 20 digits, so the shared name may have up to 40 characters and every
name stays a valid index name (3-63 lowercase letters, digits, hyphens and dots, starting and
ending with a letter or digit).

Writing: a server's passages go to its own index, created on first use (PutVectors answers
NotFoundException; CreateIndex with the shared index's configuration; ConflictException
means another writer created it first). When the bucket is full (ServiceQuotaExceeded) the
passages go to the shared index instead, and that server keeps writing there for the
container's life. A server whose index was purged (`drop_scope`) is never created again
while the purge's marker lives: a write racing the purge is a logged, counted skip.

Reading: a search queries the server's own index and the shared one (which holds what was
indexed before sharding and the servers past the limit), one embedding for both, and keeps
the nearest of the two, then re-ranks them by keywords as ever. Removing by id does both
too; callers pass the scope (SearchIndex.remove), without which only the shared index is
reached (a passage written before sharding lives there).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from botmemory.clock import Clock, SystemClock
from botmemory.search.embeddings import Embedder, embed_query
from botmemory.search.keywords import clip_query
from botmemory.search.port import Passage, SearchHit, SearchQuery
from botmemory.search.s3vectors_index import (
    NON_FILTERABLE_KEYS,
    S3VectorsSearchIndex,
    error_code,
    fused_hits,
    s3vectors_client,
    vector_entries,
)
from botmemory.storage.keys import server_scope_of

log = logging.getLogger(__name__)

# Vector indexes per vector bucket (S3 Vectors "Limitations and restrictions").
INDEXES_PER_BUCKET = 10_000
MAX_SHARED_NAME = 40  # leaves room for "-g" and a 20-digit guild id within 63 characters
_INDEX_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]{1,61})[a-z0-9]")
_GUILD_ID = re.compile(r"[0-9]{1,20}")
# A purge's marker outlives every write that began before it: a consolidation holds its
# channel lock for at most 15 minutes; an hour leaves room for retries.
PURGE_SETTLE_MS = 3_600_000
LIST_INDEXES_PAGE = 500

NOT_FOUND = "NotFoundException"
CONFLICT = "ConflictException"
QUOTA = "ServiceQuotaExceededException"


class PurgeLedger(Protocol):
    """Where a purge is recorded (MemoryRepository: botmemory.storage.index_purges)."""

    def mark_index_purged(self, scope: str, now_ms: int, until_ms: int) -> None: ...

    def index_purged(self, scope: str, now_ms: int) -> bool: ...


def shard_name(shared: str, scope: str) -> str:
    """The index a scope's passages live in: its server's (a persona's scope is its server's)."""
    server = server_scope_of(scope)
    if server == "dm":
        return f"{shared}-dm"
    if _GUILD_ID.fullmatch(server):
        return f"{shared}-g{server}"
    # Not a guild id (never stored by this code): a name the service accepts all the same.
    return f"{shared}-h{hashlib.sha256(server.encode('utf-8', 'replace')).hexdigest()[:20]}"


def check_shared_name(shared: str) -> None:
    if len(shared) > MAX_SHARED_NAME or not _INDEX_NAME.fullmatch(shared):
        raise ValueError(
            f"index name {shared!r}: sharding needs at most {MAX_SHARED_NAME} lowercase "
            "letters, digits, hyphens or dots, starting and ending with a letter or digit"
        )


class ShardedS3VectorsIndex:
    """SearchIndex over one S3 Vectors index per server plus the shared one. Service errors
    propagate (botocore's ClientError), as do embedding failures, except those named above."""

    def __init__(
        self,
        bucket: str,
        shared: str,
        embedder: Embedder,
        *,
        purges: PurgeLedger | None = None,
        clock: Clock | None = None,
        client: Any | None = None,
        candidates: int = 50,
        region_name: str | None = None,
    ) -> None:
        check_shared_name(shared)
        self._bucket = bucket
        self._shared_name = shared
        self._embedder = embedder
        self._purges = purges
        self._clock = clock or SystemClock()
        self._client = client
        self._candidates = candidates
        self._region_name = region_name
        self._indexes: dict[str, S3VectorsSearchIndex] = {}
        # Per container: servers that met the bucket's index limit write to the shared index.
        self._overflow: set[str] = set()
        self.purged_skips = 0  # passages not written: their server's index was purged

    # -- the indexes -----------------------------------------------------------------------------

    def _s3vectors(self) -> Any:
        if self._client is None:
            self._client = s3vectors_client(self._region_name)
        return self._client

    def _index(self, name: str) -> S3VectorsSearchIndex:
        if name not in self._indexes:
            self._indexes[name] = S3VectorsSearchIndex(
                self._bucket,
                name,
                self._embedder,
                client=self._s3vectors(),
                candidates=self._candidates,
            )
        return self._indexes[name]

    def _shared(self) -> S3VectorsSearchIndex:
        return self._index(self._shared_name)

    def _own(self, scope: str) -> S3VectorsSearchIndex:
        return self._index(shard_name(self._shared_name, scope))

    def _purged(self, server: str) -> bool:
        return self._purges is not None and self._purges.index_purged(server, self._clock.now_ms())

    def _create(self, name: str) -> bool:
        """Create an index configured as the shared one; False when the bucket is full."""
        try:
            self._s3vectors().create_index(
                vectorBucketName=self._bucket,
                indexName=name,
                dataType="float32",
                dimension=self._embedder.dimensions,
                distanceMetric="cosine",
                metadataConfiguration={"nonFilterableMetadataKeys": list(NON_FILTERABLE_KEYS)},
            )
        except Exception as error:
            code = error_code(error)
            if code == CONFLICT:  # another writer created it first
                return True
            if code == QUOTA:
                return False
            raise
        log.info("search index created", extra={"index": name})
        return True

    # -- writing ---------------------------------------------------------------------------------

    def add(self, passages: Sequence[Passage]) -> int:
        # One embedding call for every server's passages (the embedder batches it).
        entries = vector_entries(self._embedder, passages)
        by_server: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            server = server_scope_of(str(entry["metadata"]["scope"]))
            by_server.setdefault(server, []).append(entry)
        return sum(self._put(server, group) for server, group in by_server.items())

    def _put(self, server: str, entries: list[dict[str, Any]]) -> int:
        if server in self._overflow:
            return self._shared().put_entries(entries)
        own = self._own(server)
        try:
            return own.put_entries(entries)
        except Exception as error:
            if error_code(error) != NOT_FOUND:
                raise
        # No index yet (first use), or it was purged: only the first is created.
        if self._purged(server):
            return self._skip(server, entries)
        if not self._create(own.index_name):
            self._overflow.add(server)
            log.warning(
                "search index limit reached: server written to the shared index",
                extra={"index": own.index_name, "limit": INDEXES_PER_BUCKET},
            )
            return self._shared().put_entries(entries)
        try:
            written = own.put_entries(entries)
        except Exception as error:
            # Purged between the create and the write: a skip; anything else is a fault.
            if error_code(error) == NOT_FOUND and self._purged(server):
                return self._skip(server, entries)
            raise
        if self._purged(server):  # a purge began while the index was being created
            self._delete(own.index_name)
            return self._skip(server, entries)
        return written

    def _skip(self, server: str, entries: list[dict[str, Any]]) -> int:
        self.purged_skips += len(entries)
        log.warning(
            "search index purged: passages not written",
            extra={"server": server, "skipped": len(entries), "total": self.purged_skips},
        )
        return 0

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        keys = list(dict.fromkeys(ids))
        if not keys:
            return 0
        if scope is not None:
            try:
                self._own(scope).remove(keys)
            except Exception as error:
                if error_code(error) != NOT_FOUND:  # no index: nothing there to remove
                    raise
        self._shared().remove(keys)
        return len(keys)

    def get(self, ids: Iterable[str], scope: str) -> list[Passage]:
        """The passages stored under these keys: the server's own index, then the shared
        one for what it lacks."""
        keys = list(dict.fromkeys(ids))
        try:
            found = self._own(scope).get(keys, scope)
        except Exception as error:
            if error_code(error) != NOT_FOUND:  # no index of its own yet
                raise
            found = []
        held = {p.id for p in found}
        missing = [key for key in keys if key not in held]
        return found + (self._shared().get(missing, scope) if missing else [])

    def drop_scope(self, scope: str) -> int:
        """Purge a server's search index: the marker first (so no write creates it again),
        then DeleteIndex, then its passages in the shared index. Returns how many shared
        entries were removed. Safe to run again."""
        server = server_scope_of(scope)
        if self._purges is not None:
            now = self._clock.now_ms()
            self._purges.mark_index_purged(server, now, now + PURGE_SETTLE_MS)
        self._delete(shard_name(self._shared_name, server))
        self._overflow.discard(server)
        shared = self._shared()
        ids = [p.id for p in shared.passages() if server_scope_of(p.scope) == server]
        return shared.remove(ids)

    def _delete(self, name: str) -> None:
        try:
            self._s3vectors().delete_index(vectorBucketName=self._bucket, indexName=name)
        except Exception as error:
            if error_code(error) != NOT_FOUND:
                raise
        self._indexes.pop(name, None)
        log.info("search index deleted", extra={"index": name})

    # -- reading ---------------------------------------------------------------------------------

    def search(self, query: SearchQuery) -> list[SearchHit]:
        text, _ = clip_query(query.text)
        if text is None or query.channel_ids == [] or query.kinds == []:
            return []
        return fused_hits(query, text, self.nearest_passages(query, text))

    def nearest_passages(self, query: SearchQuery, text: str) -> list[Passage]:
        """The vector leg alone: the query's nearest passages in the server's index and the
        shared one, nearest first, as many as one index query returns."""
        vector = embed_query(self._embedder, text)
        found = self._shared().nearest(query, vector)
        try:
            found += self._own(query.scope).nearest(query, vector)
        except Exception as error:
            if error_code(error) != NOT_FOUND:  # a server with no index yet has nothing
                raise
        # Nearest first across both (stable: the server's own order breaks no tie it had).
        found.sort(key=lambda pair: pair[0])
        seen: set[str] = set()
        candidates: list[Passage] = []
        for _, passage in found:
            if passage.id not in seen:
                seen.add(passage.id)
                candidates.append(passage)
        return candidates[: self._shared().top_k(query)]

    def index_names(self) -> Iterator[str]:
        """The shared index, then every server's (ListIndexes by the shared name's prefix)."""
        yield self._shared_name
        request: dict[str, Any] = {
            "vectorBucketName": self._bucket,
            "prefix": f"{self._shared_name}-",
            "maxResults": LIST_INDEXES_PAGE,
        }
        while True:
            page = self._s3vectors().list_indexes(**request)
            for index in page.get("indexes", []):
                yield str(index["indexName"])
            token = page.get("nextToken")
            if not token:
                return
            request["nextToken"] = token

    def passages(self) -> Iterator[Passage]:
        for name in list(self.index_names()):
            yield from self._index(name).passages()
