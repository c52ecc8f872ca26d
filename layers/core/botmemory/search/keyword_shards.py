"""The deployed keyword leg: SQLite FTS5 databases kept in S3 (MEMORY_KEYWORD_INDEX=
s3:<bucket>/<prefix>), so a deployment finds an exact name, number or rare word in the
whole history, not only among the vector leg's candidates (docs/search.md).

The engine is the embedded index's own (botmemory.search.sqlite_index, no embedder): the
same tokens, the same FTS5 bm25, so what `make eval` measures for keywords is what runs.
S3 only stores the files and arbitrates writers.

Shards (botmemory.search.keyword_layout, the one owner of the keys): a server's facts, and
per channel its episodes and one shard per month of messages, so every object stays small
and all but the newest month stay unchanged. A search lists the folders it reaches (the
channel's and the facts', or the whole server's), reads the shards whose ETag its copies
lack, and scores the candidates of all of them together (botmemory.search.shard_scoring).

Writing is optimistic: read the shard (its ETag), change a local copy, PutObject with
If-Match (If-None-Match: * for a new shard); a 412 or 409 means another writer won, so read
again and redo, up to WRITE_ATTEMPTS times. A write that removed or replaced rows compacts
the file first (FTS5 optimize, then VACUUM, with secure_delete on): the object S3 keeps
holds no trace of what was deleted. The bucket is not versioned (template.yaml), so the old
object is gone with the overwrite.

Reading keeps each shard in /tmp with its ETag. A search's LIST gives every shard's current
ETag, so a copy is used only when S3 just confirmed it, and only changed shards are read; a
write reads its shard with If-None-Match (a 304 is a round trip with no body).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botmemory.clock import Clock, SystemClock
from botmemory.search import rules
from botmemory.search.fusion import reciprocal_rank_fusion
from botmemory.search.keyword_layout import (
    SHARD_SUFFIX,
    channel_prefix,
    fact_scope,
    facts_key,
    key_of,
    scope_of_key,
    server_prefix,
)
from botmemory.search.keywords import clip_query, feedback_terms, query_terms
from botmemory.search.port import Passage, SearchHit, SearchQuery
from botmemory.search.s3vectors_index import error_code
from botmemory.search.shard_scoring import merged
from botmemory.search.sqlite_index import CANDIDATE_FACTOR, KeywordAnswer, SqliteSearchIndex
from botmemory.storage.keys import server_scope_of

if TYPE_CHECKING:
    from botmemory.search.shards import PurgeLedger

log = logging.getLogger(__name__)

WRITE_ATTEMPTS = 8  # conditional writes lost to other writers before giving up
# Bytes of shards one container keeps in /tmp (Lambda's default ephemeral storage is 512 MB).
CACHE_BYTES = 256 * 1024 * 1024
# Shards read at once by one search (a server-wide search may read many).
READ_THREADS = 8
LIST_PAGE = 1000
_LOST_RACE = ("PreconditionFailed", "ConditionalRequestConflict")
_ABSENT = ("NoSuchKey", "404", "NotFound")


class ShardBusy(Exception):
    """Every conditional write of a shard lost to another writer."""


@dataclass
class _Copy:
    key: str
    etag: str
    path: str
    size: int
    index: SqliteSearchIndex | None = None  # opened on first read
    dropped: bool = False  # evicted or replaced: its file is gone

    def open(self) -> SqliteSearchIndex:
        if self.dropped:
            raise RuntimeError("a dropped shard copy was opened")
        if self.index is None:
            self.index = SqliteSearchIndex(self.path, wal=False)
        return self.index

    def drop(self) -> None:
        self.dropped = True
        if self.index is not None:
            self.index.close()
            self.index = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class _ShardCache:
    """Shards as S3 last confirmed them, least recently used evicted past CACHE_BYTES."""

    def __init__(self, directory: str, limit: int) -> None:
        self._directory = directory
        self._limit = limit
        self._copies: OrderedDict[str, _Copy] = OrderedDict()
        self.lock = threading.RLock()

    def path_for(self, key: str) -> str:
        fd, path = tempfile.mkstemp(dir=self._directory, suffix=SHARD_SUFFIX)
        os.close(fd)
        return path

    def get(self, key: str) -> _Copy | None:
        copy = self._copies.get(key)
        if copy is not None:
            self._copies.move_to_end(key)
        return copy

    def put(self, key: str, copy: _Copy) -> None:
        old = self._copies.pop(key, None)
        if old is not None and old.path != copy.path:
            old.drop()
        self._copies[key] = copy
        used = sum(c.size for c in self._copies.values())
        while used > self._limit and len(self._copies) > 1:
            _, evicted = self._copies.popitem(last=False)
            used -= evicted.size
            evicted.drop()

    def forget(self, key: str) -> None:
        copy = self._copies.pop(key, None)
        if copy is not None:
            copy.drop()


def s3_client(region_name: str | None = None) -> Any:
    """An S3 client with bounded timeouts and retries, built only when first needed."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=3,
        read_timeout=10,
        retries={"total_max_attempts": 3, "mode": "standard"},
    )
    return boto3.client("s3", region_name=region_name, config=config)


class S3KeywordIndex:
    """The keyword leg over every passage, in shards by channel and month in S3. Service
    errors propagate (botocore's ClientError), as does ShardBusy."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        client: Any | None = None,
        cache_dir: str | None = None,
        cache_bytes: int = CACHE_BYTES,
        region_name: str | None = None,
        purges: PurgeLedger | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`purges`: where server purges are recorded (the repository); a shard is never
        created again for a server while its purge's marker lives."""
        if not bucket or not prefix or prefix.startswith("/") or prefix.endswith("/"):
            raise ValueError("a keyword index needs a bucket and a prefix without edge slashes")
        self._bucket = bucket
        self._prefix = prefix
        self._client = client
        self._region_name = region_name
        self._directory = cache_dir or tempfile.mkdtemp(prefix="botmemory-keywords-")
        os.makedirs(self._directory, exist_ok=True)
        self._cache = _ShardCache(self._directory, cache_bytes)
        self.lost_races = 0  # conditional writes another writer won (each redone)
        self.purged_skips = 0  # shard writes not made: their server was purged meanwhile
        self._purges = purges
        self._clock = clock or SystemClock()

    def _s3(self) -> Any:
        if self._client is None:
            self._client = s3_client(self._region_name)
        return self._client

    # -- one shard -------------------------------------------------------------------------------

    def _fetch(self, key: str) -> _Copy | None:
        """The shard as S3 holds it now (None when absent), from the cache when S3 answers
        304 to its ETag."""
        with self._cache.lock:
            cached = self._cache.get(key)
        request: dict[str, Any] = {"Bucket": self._bucket, "Key": key}
        if cached is not None:
            request["IfNoneMatch"] = cached.etag
        try:
            response = self._s3().get_object(**request)
        except Exception as error:
            code = error_code(error)
            if code == "304" and cached is not None:
                return cached
            if code in _ABSENT:
                with self._cache.lock:
                    self._cache.forget(key)
                return None
            raise
        path = self._cache.path_for(key)
        with open(path, "wb") as out:
            shutil.copyfileobj(response["Body"], out)
        copy = _Copy(key, str(response["ETag"]), path, os.path.getsize(path))
        with self._cache.lock:
            self._cache.put(key, copy)
        return copy

    def _update(self, key: str, scope: str, change: Callable[[SqliteSearchIndex], bool]) -> None:
        """Apply `change` to the shard and write it back if S3 still holds what was read;
        `change` answers whether it deleted or replaced rows (then the file is compacted).
        A shard that is not there is created, unless its server was just purged (a round
        racing the purge): that write is a logged, counted skip."""
        for _ in range(WRITE_ATTEMPTS):
            current = self._fetch(key)
            if current is None and self._purged(scope):
                self.purged_skips += 1
                log.warning("keyword shard of a purged server not written", extra={"key": key})
                return
            work = self._cache.path_for(key)
            if current is not None:
                with self._cache.lock:
                    if current.dropped:  # evicted since it was read: read it again
                        os.unlink(work)
                        continue
                    if current.index is not None:  # a reader's open handle: flush nothing
                        current.index.close()
                        current.index = None
                    shutil.copyfile(current.path, work)
            index = SqliteSearchIndex(work, wal=False)
            try:
                if change(index):
                    index.compact()
            finally:
                index.close()
            condition = {"IfMatch": current.etag} if current else {"IfNoneMatch": "*"}
            try:
                with open(work, "rb") as body:
                    response = self._s3().put_object(
                        Bucket=self._bucket, Key=key, Body=body, **condition
                    )
            except Exception as error:
                os.unlink(work)
                if error_code(error) in _LOST_RACE:
                    self.lost_races += 1
                    continue
                raise
            copy = _Copy(key, str(response["ETag"]), work, os.path.getsize(work))
            with self._cache.lock:
                self._cache.put(key, copy)
            return
        raise ShardBusy(f"{key}: {WRITE_ATTEMPTS} conditional writes lost to other writers")

    def _purged(self, scope: str) -> bool:
        server = server_scope_of(scope)
        return self._purges is not None and self._purges.index_purged(server, self._clock.now_ms())

    # -- SearchIndex -----------------------------------------------------------------------------

    def add(self, passages: Sequence[Passage]) -> int:
        for key, group in self._by_shard(passages).items():

            def upsert(index: SqliteSearchIndex, group: list[Passage] = group) -> bool:
                replaced = bool(index.held(p.id for p in group))
                index.add(group)
                return replaced

            self._update(key, group[0].scope, upsert)
        return len(passages)

    def _by_shard(self, passages: Iterable[Passage]) -> dict[str, list[Passage]]:
        """Passages by the shard they live in (one server's, so a group shares its server)."""
        grouped: dict[str, list[Passage]] = {}
        for passage in passages:
            key = key_of(self._prefix, passage.scope, passage.id)
            grouped.setdefault(key, []).append(passage)
        return grouped

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        """Remove by id from the shards the ids name; without a scope, from every server's
        shard of that channel (a listing of the whole prefix: rare, never on recall's path)."""
        distinct = list(dict.fromkeys(ids))
        by_key: dict[str, list[str]] = {}
        everything: list[str] | None = None  # the whole prefix's keys, listed once if needed
        for passage_id in distinct:
            try:
                if passage_id.startswith("F#"):
                    keys = [facts_key(self._prefix, scope or fact_scope(passage_id))]
                elif scope is not None:
                    keys = [key_of(self._prefix, scope, passage_id)]
                else:
                    if everything is None:
                        everything = list(self._keys(f"{self._prefix}/"))
                    # Any server's: the same channel and shard name under every server folder.
                    tail = key_of(self._prefix, "dm", passage_id).removeprefix(f"{self._prefix}/dm")
                    keys = [k for k in everything if k.endswith(tail)]
            except (ValueError, IndexError):
                log.warning("passage id of no known form", extra={"id": passage_id[:80]})
                continue
            for key in keys:
                by_key.setdefault(key, []).append(passage_id)
        for key, group in by_key.items():
            if self._fetch(key) is None:
                continue  # no shard: nothing of these there

            def delete(index: SqliteSearchIndex, group: list[str] = group) -> bool:
                present = index.held(group)
                index.remove(present)
                return bool(present)

            self._update(key, scope_of_key(self._prefix, key), delete)
        return len(distinct)

    def drop_scope(self, scope: str) -> int:
        """Delete every shard of a scope's server; returns how many objects went."""
        keys = list(self._keys(server_prefix(self._prefix, scope)))
        for start in range(0, len(keys), LIST_PAGE):
            page = keys[start : start + LIST_PAGE]
            self._s3().delete_objects(
                Bucket=self._bucket,
                Delete={"Objects": [{"Key": key} for key in page], "Quiet": True},
            )
        with self._cache.lock:
            for key in keys:
                self._cache.forget(key)
        return len(keys)

    def _keys(self, prefix: str) -> Iterator[str]:
        for key, _ in self._listing(prefix):
            yield key

    def _listing(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(key, ETag) of every shard under a prefix (LIST is strongly consistent)."""
        request: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": LIST_PAGE}
        while True:
            page = self._s3().list_objects_v2(**request)
            for entry in page.get("Contents", []):
                key = str(entry["Key"])
                if key.endswith(SHARD_SUFFIX):
                    yield key, str(entry["ETag"])
            if not page.get("IsTruncated"):
                return
            request["ContinuationToken"] = page["NextContinuationToken"]

    def reached(self, query: SearchQuery) -> tuple[list[str], list[str]]:
        """What a search reads: folders it lists (the server's for a server-wide search, else
        each channel's) and single shards it asks for directly (the facts', for "": facts
        belong to no channel, and one conditional GET costs less than a LIST)."""
        if query.channel_ids is None:
            return [server_prefix(self._prefix, query.scope)], []
        folders = [channel_prefix(self._prefix, query.scope, c) for c in query.channel_ids if c]
        singles = [facts_key(self._prefix, query.scope)] if "" in query.channel_ids else []
        return list(dict.fromkeys(folders)), singles

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """Every shard the query reaches (a LIST per folder, then a GET for each shard whose
        ETag the cache lacks; a conditional GET for the facts' shard, all at once), each
        one's bm25 candidates scored together with the counts of all of them
        (search.shard_scoring), best first."""
        if query.channel_ids == [] or query.kinds == []:
            return []
        depth = CANDIDATE_FACTOR * query.limit
        text, _ = clip_query(query.text)
        terms = query_terms(text) if text is not None else []
        if not terms:
            return []
        folders, singles = self.reached(query)
        # The listings and the single shards' reads at once: one round trip when the copies
        # are current; then the listed shards (a second only for those that changed).
        with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
            listings = [pool.submit(self._listed, folder) for folder in folders]
            direct = [pool.submit(self._shard_copy, (key, None)) for key in singles]
            entries = [e for listing in listings for e in listing.result()]
            listed = [pool.submit(self._shard_copy, entry) for entry in entries]
            copies = [c for c in (f.result() for f in (*direct, *listed)) if c is not None]
        first = merged(terms, self._answers(copies, query, depth, terms))
        # Widened with the words the best passages share, and over the query's time spans
        # alone, as the embedded index does (keywords.feedback_terms, SearchQuery.during):
        # the same copies, no request more.
        extra = feedback_terms(terms, [words for _, _, words in first])
        passes: list[list[Passage]] = [[p for _, p, _ in first]]
        if extra:
            wider = [*terms, *extra]
            passes.append(
                [p for _, p, _ in merged(wider, self._answers(copies, query, depth, wider))]
            )
        if query.during:
            dated = self._answers(copies, query, depth, terms, dated=True)
            passes.append([p for _, p, _ in merged(terms, dated)])
        ranked = passes[0]
        if len(passes) > 1:
            by_id = {p.id: p for ranking in passes for p in ranking}
            fused = reciprocal_rank_fusion(
                [[p.id for p in r] for r in passes], k=rules.current().legs_k
            )
            ranked = [by_id[pid] for pid, _ in fused]
        return [
            SearchHit(passage=passage, score=1.0 / rank, keyword_rank=rank)
            for rank, passage in enumerate(ranked[:depth], start=1)
            # Defence in depth: a passage never leaves its scope, whatever a shard holds.
            if passage.scope == query.scope
        ]

    def _answers(
        self,
        copies: Sequence[_Copy],
        query: SearchQuery,
        depth: int,
        terms: list[str],
        dated: bool = False,
    ) -> list[KeywordAnswer]:
        answers = []
        for copy in copies:
            with self._cache.lock:
                if not copy.dropped:
                    answers.append(copy.open().keyword_answer(query, depth, terms, dated))
                    continue
            # Evicted by this very search's other reads (a cache smaller than its shards).
            again = self._fetch(copy.key)
            if again is not None:
                with self._cache.lock:
                    answers.append(again.open().keyword_answer(query, depth, terms, dated))
        return answers

    def _listed(self, prefix: str) -> list[tuple[str, str | None]]:
        return list(self._listing(prefix))

    def _shard_copy(self, entry: tuple[str, str | None]) -> _Copy | None:
        """A shard's copy as S3 holds it now. `etag` is what a LIST just gave (None: not
        listed, so asked for with If-None-Match); None when the shard is not there."""
        key, etag = entry
        with self._cache.lock:
            copy = self._cache.get(key)
        if copy is None or etag is None or copy.etag != etag:
            copy = self._fetch(key)  # changed since it was read, never read here, or unlisted
        return copy

    # -- vectors another index lacks (botmemory.search.deployed) ---------------------------------

    def mark_vectors_pending(self, passages: Sequence[Passage], pending: bool) -> None:
        for key, group in self._by_shard(passages).items():

            def mark(index: SqliteSearchIndex, group: list[Passage] = group) -> bool:
                index.set_vectors_pending((p.id for p in group), pending)
                return False

            self._update(key, group[0].scope, mark)

    def vectors_pending(self, passages: Sequence[Passage], limit: int) -> list[Passage]:
        """Passages marked pending in the shards these passages live in (as last read)."""
        pending: list[Passage] = []
        for key in self._by_shard(passages):
            with self._cache.lock:
                copy = self._cache.get(key)
                if copy is not None:
                    pending += copy.open().vectors_pending(limit - len(pending))
            if len(pending) >= limit:
                break
        return pending

    def passages(self) -> Iterator[Passage]:
        for key in list(self._keys(f"{self._prefix}/")):
            copy = self._fetch(key)
            if copy is not None:
                with self._cache.lock:
                    index = copy.open()
                    yield from list(index.passages())
