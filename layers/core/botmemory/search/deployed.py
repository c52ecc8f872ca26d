"""The deployed hybrid: the S3 Vectors leg and the keyword leg on PostgreSQL side by side
(MEMORY_SEARCH_INDEX=s3vectors:... with MEMORY_KEYWORD_INDEX=postgres:...), fused by
reciprocal rank exactly as the embedded hybrid fuses its two legs, so a passage the vector
leg never proposes is still found by its words.

One leg failing never takes the other down. Writing: keywords first (one statement, which
also answers the server's passages still waiting for vectors); if the vectors then fail, the
passages are marked pending (KeywordsOnly is raised, as the embedded index does) and a later
write embeds a page of them again. If the keywords fail (the database paused, throttled or
down), the vectors are written all the same and VectorsOnly is raised: the round counts it,
and the work queue writes them by their words later (botmemory.search.keyword_retry).
Searching: both legs run at once (the embedding call and the keyword statement overlap); a
failed vector leg leaves the keywords to answer (SearchHits.vector_error says why), a failed
keyword leg leaves the vectors (SearchHits.keyword_error), logged and counted by recall.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from botmemory.search.fusion import fused_legs
from botmemory.search.keywords import clip_query
from botmemory.search.port import (
    ExpiryShortening,
    KeywordsOnly,
    Passage,
    SearchHit,
    SearchHits,
    SearchQuery,
    VectorsOnly,
)

log = logging.getLogger(__name__)

# Passages marked pending whose vectors one write tries again, beside its own.
REEMBED_PASSAGES = 64


class VectorLeg(Protocol):
    """What the deployed hybrid needs of a vector index (S3VectorsSearchIndex, sharded or not)."""

    def add(self, passages: Sequence[Passage]) -> int: ...

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int: ...

    def nearest_passages(self, query: SearchQuery, text: str) -> list[Passage]: ...

    def passages(self) -> Iterator[Passage]: ...

    def get(self, ids: Iterable[str], scope: str) -> list[Passage]: ...


class KeywordLeg(Protocol):
    """What the deployed hybrid needs of a keyword index (PostgresKeywordIndex)."""

    def write(self, passages: Sequence[Passage], reembed: int = 0) -> list[Passage]: ...

    def mark_vectors_pending(self, passages: Sequence[Passage], pending: bool) -> None: ...

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int: ...

    def drop_scope(self, scope: str) -> int: ...

    def search(self, query: SearchQuery) -> list[SearchHit]: ...

    def passages(self) -> Iterator[Passage]: ...


class DeployedSearchIndex:
    """SearchIndex over a vector leg and a keyword leg."""

    def __init__(self, vectors: VectorLeg, keywords: KeywordLeg) -> None:
        self.vectors = vectors
        self.keywords = keywords
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-leg")

    def add(self, passages: Sequence[Passage]) -> int:
        if not passages:
            return 0
        try:
            pending = self.keywords.write(passages, REEMBED_PASSAGES)
        except Exception as keyword_error:  # the keyword leg only: the vectors go in anyway
            log.warning(
                "keyword leg failed; passages indexed for vectors only",
                extra={"error": repr(keyword_error)[:300]},
            )
            self.vectors.add(passages)
            raise VectorsOnly(len(passages), keyword_error) from keyword_error
        try:
            self.vectors.add(passages)
        except Exception as error:  # the vector leg only: the words are in
            log.warning("passages indexed without vectors", extra={"error": repr(error)[:300]})
            self.keywords.mark_vectors_pending(passages, pending=True)
            raise KeywordsOnly(len(passages), error) from error
        self._reembed(pending)
        return len(passages)

    def _reembed(self, pending: Sequence[Passage]) -> None:
        """Vectors for a page of passages still marked pending (the write's own answer)."""
        if not pending:
            return
        try:
            self.vectors.add(pending)
        except Exception as error:  # they stay marked; the next write tries again
            log.warning("re-embedding failed", extra={"error": repr(error)[:300]})
            return
        self.keywords.mark_vectors_pending(pending, pending=False)

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        keys = list(dict.fromkeys(ids))
        error: Exception | None = None
        for leg in (self.keywords, self.vectors):
            try:
                leg.remove(keys, scope=scope)
            except Exception as exc:  # the other leg is still emptied; then the error
                error = error or exc
        if error is not None:
            raise error
        return len(keys)

    def shorten_expiry(self, ids: Iterable[str], expires_at: int) -> int:
        """The keyword leg's rows follow (the vector leg keeps no expiry of its own to
        shorten: its passages go when the table's items expire, through the stream)."""
        if isinstance(self.keywords, ExpiryShortening):
            return self.keywords.shorten_expiry(ids, expires_at)
        return 0

    def drop_scope(self, scope: str) -> int:
        """A server's purge: its keyword rows deleted, then the vector leg's own purge
        (ShardedS3VectorsIndex.drop_scope); returns what that returns."""
        rows = self.keywords.drop_scope(scope)
        log.info("keyword rows deleted", extra={"scope": scope, "rows": rows})
        drop = getattr(self.vectors, "drop_scope", None)
        return int(drop(scope)) if drop is not None else 0

    def search(self, query: SearchQuery) -> list[SearchHit]:
        text, _ = clip_query(query.text)
        if text is None or query.channel_ids == [] or query.kinds == []:
            return []
        vector_leg: Future[list[Passage]] = self._pool.submit(
            self.vectors.nearest_passages, query, text
        )
        keyword_hits: list[SearchHit] = []
        keyword_error: Exception | None = None
        try:
            keyword_hits = self.keywords.search(query)
        except Exception as error:
            keyword_error = error
            log.warning("keyword leg failed; vectors only", extra={"error": repr(error)[:300]})
        vector_error: Exception | None = None
        try:
            nearest = vector_leg.result()
        except Exception as error:
            vector_error, nearest = error, []
            log.warning("vector leg failed; keywords only", extra={"error": repr(error)[:300]})
        if keyword_error is not None and vector_error is not None:
            raise keyword_error
        keyword = [h.passage for h in keyword_hits]
        hits = SearchHits(fused_legs(keyword, nearest, query.limit))
        hits.vector_error = vector_error
        hits.keyword_error = keyword_error
        return hits

    def passages(self) -> Iterator[Passage]:
        """Every passage either leg holds, each id once."""
        seen: set[str] = set()
        for leg in (self.keywords, self.vectors):
            for passage in leg.passages():
                if passage.id not in seen:
                    seen.add(passage.id)
                    yield passage
