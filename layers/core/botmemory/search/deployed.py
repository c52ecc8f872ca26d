"""The deployed hybrid: the S3 Vectors leg and the S3 keyword shards side by side
(MEMORY_SEARCH_INDEX=s3vectors:... with MEMORY_KEYWORD_INDEX=s3:...), fused by reciprocal
rank exactly as the embedded hybrid fuses its two legs, so a passage the vector leg never
proposes is still found by its words.

One leg failing never takes the other down. Writing: keywords first, always; if the vectors
then fail, the passages are marked pending in their shards (KeywordsOnly is raised, as the
embedded index does) and a later write to the same shards embeds a page of them again.
Searching: both legs run at once (the embedding call and the shard reads overlap); a failed
vector leg leaves the keywords to answer (SearchHits.vector_error says why), a failed
keyword leg leaves the vectors, logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from botmemory.search.fusion import fused_legs
from botmemory.search.keyword_shards import S3KeywordIndex
from botmemory.search.keywords import clip_query
from botmemory.search.port import KeywordsOnly, Passage, SearchHit, SearchHits, SearchQuery

log = logging.getLogger(__name__)

# Passages marked pending whose vectors one write tries again, beside its own.
REEMBED_PASSAGES = 64


class VectorLeg(Protocol):
    """What the deployed hybrid needs of a vector index (S3VectorsSearchIndex, sharded or not)."""

    def add(self, passages: Sequence[Passage]) -> int: ...

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int: ...

    def nearest_passages(self, query: SearchQuery, text: str) -> list[Passage]: ...

    def passages(self) -> Iterator[Passage]: ...


class DeployedSearchIndex:
    """SearchIndex over a vector leg and the keyword shards."""

    def __init__(self, vectors: VectorLeg, keywords: S3KeywordIndex) -> None:
        self.vectors = vectors
        self.keywords = keywords
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="search-leg")

    def add(self, passages: Sequence[Passage]) -> int:
        if not passages:
            return 0
        self.keywords.add(passages)
        try:
            self.vectors.add(passages)
        except Exception as error:  # the vector leg only: the words are in
            log.warning("passages indexed without vectors", extra={"error": repr(error)[:300]})
            self.keywords.mark_vectors_pending(passages, pending=True)
            raise KeywordsOnly(len(passages), error) from error
        self._reembed(passages)
        return len(passages)

    def _reembed(self, passages: Sequence[Passage]) -> None:
        """Vectors for a page of passages marked pending in the shards just written."""
        pending = self.keywords.vectors_pending(passages, REEMBED_PASSAGES)
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

    def drop_scope(self, scope: str) -> int:
        """A server's purge: its keyword shards deleted, then the vector leg's own purge
        (ShardedS3VectorsIndex.drop_scope); returns what that returns."""
        shards = self.keywords.drop_scope(scope)
        log.info("keyword shards deleted", extra={"scope": scope, "shards": shards})
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
        return hits

    def passages(self) -> Iterator[Passage]:
        """Every passage either leg holds, each id once."""
        seen: set[str] = set()
        for leg in (self.keywords, self.vectors):
            for passage in leg.passages():
                if passage.id not in seen:
                    seen.add(passage.id)
                    yield passage
