"""The search index on Amazon S3 Vectors (MEMORY_SEARCH_INDEX=s3vectors:<bucket>/<index>).

The vector leg is the index's own nearest-neighbour query, filtered by scope, channels, kinds
and expiry; the keyword leg re-ranks the candidates it returns with BM25 and the two orders
are fused by reciprocal rank. S3 Vectors has no keyword search of its own that every
bucket offers, so keywords only ever re-rank: a passage must be a vector candidate to be
found at all.

Each vector carries its whole passage as metadata, so a query needs no second read to show
one. The index (template.yaml, SearchVectorIndex) declares `text`, `authors`, `sources` and
`time_ms` non-filterable; `scope`, `channel_id`, `kind` and `expires_at` stay filterable, as
does `labels` (the speaker names, a few short strings, well within the 2 KB filterable
budget), which the keyword re-rank leaves out of each passage's words (passages.keyword_text).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from botmemory.search.embeddings import Embedder, EmbeddingError, embed_query
from botmemory.search.fusion import fused_legs
from botmemory.search.keywords import clip_query, rank
from botmemory.search.passages import MAX_LABEL_CHARS, keyword_text
from botmemory.search.port import Passage, PassageKind, SearchHit, SearchQuery

log = logging.getLogger(__name__)

# Service limits (S3 Vectors "Limitations and restrictions").
PUT_BATCH = 500  # vectors per PutVectors call
DELETE_BATCH = 500  # keys per DeleteVectors call
LIST_PAGE = 1000  # vectors per ListVectors page
GET_BATCH = 100  # keys per GetVectors call
MAX_TOP_K = 100  # results per QueryVectors call
# A request may carry 20 MiB; stay well under it whatever the texts weigh.
PUT_PAYLOAD_BYTES = 16 * 1024 * 1024
# A vector's metadata may total 40 KB (filterable and not); the text takes what the other
# fields leave of this, with room to spare for how the service counts.
METADATA_BYTES = 36_000
# Labels kept per vector: a message passage has one or two, a fact one.
MAX_LABELS = 4
# Stands for "never expires" in the filterable expires_at (epoch seconds, year 2286), so an
# expiry filter needs no $or on a missing key.
NEVER_EXPIRES = 9_999_999_999
# Metadata the index only carries (template.yaml's SearchVectorIndex and every index
# botmemory.search.shards creates declare the same): the rest stays filterable.
NON_FILTERABLE_KEYS = ("text", "authors", "sources", "time_ms")

T = TypeVar("T")


def _batches(
    items: Sequence[T], count: int, budget: int, size: Callable[[T], int]
) -> Iterator[list[T]]:
    """Consecutive runs of at most `count` items whose sizes add up to at most `budget`
    (an item bigger than the budget goes alone)."""
    batch: list[T] = []
    used = 0
    for item in items:
        weight = size(item)
        if batch and (len(batch) >= count or used + weight > budget):
            yield batch
            batch, used = [], 0
        batch.append(item)
        used += weight
    if batch:
        yield batch


def _cut_utf8(text: str, limit: int) -> str:
    """The longest prefix of the text whose UTF-8 encoding fits in `limit` bytes (a lone
    surrogate, which UTF-8 cannot carry, becomes "?")."""
    encoded = text.encode("utf-8", "replace")
    # "ignore" only ever drops the partial character the cut leaves at the end.
    return encoded[: max(limit, 0)].decode("utf-8", "ignore")


def _json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))


def metadata_of(passage: Passage) -> dict[str, Any]:
    """A passage as vector metadata: everything but its id, which is the vector's key."""
    metadata: dict[str, Any] = {
        "scope": passage.scope,
        "channel_id": passage.channel_id,
        "kind": passage.kind.value,
        "expires_at": NEVER_EXPIRES if passage.expires_at is None else passage.expires_at,
        "authors": list(passage.authors),
        "sources": list(passage.sources),
        "time_ms": passage.time_ms,
        "text": "",
    }
    if passage.labels:  # before the room left for the text is measured
        metadata["labels"] = [label[:MAX_LABEL_CHARS] for label in passage.labels[:MAX_LABELS]]
    room = METADATA_BYTES - _json_bytes(metadata)
    metadata["text"] = _cut_utf8(passage.text, room)
    return metadata


def passage_of(key: str, metadata: Any) -> Passage:
    """The passage stored under a key; ValueError when its metadata is not one of ours."""
    if not isinstance(metadata, dict):
        raise ValueError(f"vector {key!r} has no metadata")
    try:
        expires_at = int(metadata["expires_at"])
        return Passage(
            id=key,
            kind=PassageKind(metadata["kind"]),
            scope=str(metadata["scope"]),
            channel_id=str(metadata["channel_id"]),
            text=str(metadata["text"]),
            # Numbers may come back as floats from the service's JSON.
            time_ms=int(metadata["time_ms"]),
            authors=[str(a) for a in metadata.get("authors") or []],
            sources=[str(s) for s in metadata.get("sources") or []],
            expires_at=None if expires_at >= NEVER_EXPIRES else expires_at,
            # Written before labels were: the names stay in the keyword text, as then.
            labels=[str(label) for label in metadata.get("labels") or []],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"vector {key!r} has unreadable metadata: {exc!r}"[:300]) from exc


def query_filter(query: SearchQuery) -> dict[str, Any]:
    """The metadata filter of a query: its scope, channels, kinds and expiry."""
    conditions: list[dict[str, Any]] = [
        {"scope": {"$eq": query.scope}},
        {"expires_at": {"$gte": query.now_s}},
    ]
    if query.channel_ids is not None:
        conditions.append({"channel_id": {"$in": list(query.channel_ids)}})
    if query.kinds is not None:
        conditions.append({"kind": {"$in": [k.value for k in query.kinds]}})
    return {"$and": conditions}


def s3vectors_client(region_name: str | None = None) -> Any:
    """An S3 Vectors client with bounded timeouts and retries. boto3 is imported and the client
    built only when needed: both are slow on a cold start."""
    import boto3
    from botocore.config import Config

    config = Config(
        connect_timeout=3,
        read_timeout=10,
        retries={"total_max_attempts": 3, "mode": "standard"},
    )
    return boto3.client("s3vectors", region_name=region_name, config=config)


def error_code(error: Exception) -> str | None:
    """The service's error code of a botocore ClientError ("NotFoundException"), else None."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None


def fused_hits(query: SearchQuery, text: str, candidates: list[Passage]) -> list[SearchHit]:
    """The vector order (nearest first) fused with the keyword leg's BM25 re-rank of it."""
    if not candidates:
        return []
    keyword_order = [candidates[i] for i, _ in rank(text, [keyword_text(p) for p in candidates])]
    # k = 60 here: the re-rank orders the vector leg's own candidates (docs/eval.md).
    return fused_legs(keyword_order, candidates, query.limit, k=60, vector_first=True)


def _distance(hit: dict[str, Any]) -> float:
    distance = hit.get("distance")
    return float(distance) if isinstance(distance, int | float) else math.inf


class S3VectorsSearchIndex:
    """SearchIndex on one S3 Vectors index. Service errors propagate (botocore's
    ClientError/BotoCoreError), as do embedding failures (EmbeddingError)."""

    def __init__(
        self,
        bucket: str,
        index: str,
        embedder: Embedder,
        *,
        client: Any | None = None,
        candidates: int = 50,
        region_name: str | None = None,
    ) -> None:
        if candidates < 1:
            raise ValueError("candidates must be at least 1")
        self._bucket = bucket
        self._index = index
        self._embedder = embedder
        self._client = client
        self._candidates = candidates
        self._region_name = region_name

    def _s3vectors(self) -> Any:
        if self._client is None:
            self._client = s3vectors_client(self._region_name)
        return self._client

    @property
    def index_name(self) -> str:
        return self._index

    def _where(self) -> dict[str, str]:
        return {"vectorBucketName": self._bucket, "indexName": self._index}

    # -- writing -------------------------------------------------------------------------------

    def add(self, passages: Sequence[Passage]) -> int:
        return self.put_entries(vector_entries(self._embedder, passages))

    def put_entries(self, entries: Sequence[dict[str, Any]]) -> int:
        """PutVectors of entries `vector_entries` made, in batches within the service's limits."""
        if entries:
            client = self._s3vectors()
            for batch in _batches(entries, PUT_BATCH, PUT_PAYLOAD_BYTES, _json_bytes):
                client.put_vectors(**self._where(), vectors=batch)
        return len(entries)

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        keys = list(dict.fromkeys(ids))
        if keys:
            client = self._s3vectors()
            for start in range(0, len(keys), DELETE_BATCH):
                client.delete_vectors(**self._where(), keys=keys[start : start + DELETE_BATCH])
        return len(keys)

    # -- reading -------------------------------------------------------------------------------

    def passages(self) -> Iterator[Passage]:
        client = self._s3vectors()
        request: dict[str, Any] = {
            **self._where(),
            "maxResults": LIST_PAGE,
            "returnData": False,
            "returnMetadata": True,
        }
        while True:
            page = client.list_vectors(**request)
            for vector in page.get("vectors", []):
                # An audit must see every entry: one it cannot read is an error, not a skip.
                yield passage_of(vector["key"], vector.get("metadata"))
            token = page.get("nextToken")
            if not token:
                return
            request["nextToken"] = token

    def get(self, ids: Iterable[str], scope: str | None = None) -> list[Passage]:
        """The passages stored under these keys (GetVectors with their metadata); a key the
        index does not hold is left out, as is an entry that is not one of ours (logged).
        `scope` changes nothing: this one index holds every scope's."""
        keys = list(dict.fromkeys(ids))
        found: list[Passage] = []
        for start in range(0, len(keys), GET_BATCH):
            answer = self._s3vectors().get_vectors(
                **self._where(),
                keys=keys[start : start + GET_BATCH],
                returnData=False,
                returnMetadata=True,
            )
            for vector in answer.get("vectors", []):
                try:
                    found.append(passage_of(vector["key"], vector.get("metadata")))
                except ValueError as error:
                    log.warning("unreadable vector skipped", extra={"error": str(error)[:300]})
        return found

    def search(self, query: SearchQuery) -> list[SearchHit]:
        text, _ = clip_query(query.text)
        # An empty $in list is refused by the service and could match nothing anyway.
        if text is None or query.channel_ids == [] or query.kinds == []:
            return []
        return fused_hits(query, text, self.nearest_passages(query, text))

    def nearest_passages(self, query: SearchQuery, text: str) -> list[Passage]:
        """The vector leg alone: the query's nearest passages, nearest first."""
        return [p for _, p in self.nearest(query, embed_query(self._embedder, text))]

    def nearest(self, query: SearchQuery, vector: list[float]) -> list[tuple[float, Passage]]:
        """The nearest passages within the query's filter, nearest first, with their distance."""
        response = self._s3vectors().query_vectors(
            **self._where(),
            topK=self.top_k(query),
            queryVector={"float32": vector},
            filter=query_filter(query),
            returnMetadata=True,
            returnDistance=True,
        )
        found: list[tuple[float, Passage]] = []
        seen: set[str] = set()
        # Nearest first; the sort is stable, so the service's order breaks ties.
        hits = sorted(response.get("vectors", []), key=_distance)
        for hit in hits:
            key = hit.get("key")
            try:
                passage = passage_of(str(key), hit.get("metadata"))
            except ValueError as exc:
                log.warning("unreadable search index entry skipped", extra={"error": str(exc)})
                continue
            # Defence in depth: whatever the filter did, a passage never leaves its scope.
            if passage.scope == query.scope and passage.id not in seen:
                seen.add(passage.id)
                found.append((_distance(hit), passage))
        return found

    def top_k(self, query: SearchQuery) -> int:
        return min(max(self._candidates, query.limit), MAX_TOP_K)


def vector_entries(embedder: Embedder, passages: Sequence[Passage]) -> list[dict[str, Any]]:
    """The PutVectors entries of passages: one embedding call for all of them (the embedder
    batches as its provider allows). A blank text has nothing to be found by, and embedding
    services refuse it: it is left out."""
    passages = [p for p in passages if p.text.strip()]
    if not passages:
        return []
    vectors = embedder.embed([p.text for p in passages])
    if len(vectors) != len(passages):
        raise EmbeddingError(
            f"{embedder.name} returned {len(vectors)} vectors for {len(passages)} texts"
        )
    return [
        {"key": p.id, "data": {"float32": v}, "metadata": metadata_of(p)}
        for p, v in zip(passages, vectors, strict=True)
    ]
