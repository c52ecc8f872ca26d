"""The search paths `make eval` measures side by side, all fed by the same replay.

- `keywords`: the embedded index (SQLite FTS5) without an embedder, keywords over the whole
  history: what `make demo` and the local stack run without an embedding model.
- `hybrid`: the embedded index with the embedder: keywords over the whole history and the
  vector leg, fused by reciprocal rank.
- `deployed`: `S3VectorsSearchIndex`, the adapter template.yaml deploys, unchanged: the 50
  nearest passages by embedding (its `candidates`), re-ranked by keywords and fused. Only the
  service is played (eval/vector_service.py), since moto has no QueryVectors.

Consolidation writes to all of them at once (`TeeIndex`), so each path searches the same
passages; recall asks each through its own SearchLeg.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from botmemory.search.embeddings import Embedder
from botmemory.search.port import Passage, SearchHit, SearchIndex, SearchQuery
from botmemory.search.s3vectors_index import S3VectorsSearchIndex
from botmemory.search.sqlite_index import SqliteSearchIndex
from eval.vector_service import InMemoryS3Vectors

KEYWORDS = "keywords"
HYBRID = "hybrid"
DEPLOYED = "deployed"
PATH_TITLES = {
    KEYWORDS: "keyword-only (embedded index, FTS5 over the whole history)",
    HYBRID: "embedded hybrid (FTS5 over the whole history + vectors, fused)",
    DEPLOYED: "deployed (S3 Vectors adapter: 50 vector candidates, keyword re-rank)",
}


class TeeIndex:
    """Writes go to every index; reads come from the first (the index of record)."""

    def __init__(self, indexes: Sequence[SearchIndex]) -> None:
        if not indexes:
            raise ValueError("a tee needs at least one index")
        self._indexes = list(indexes)

    def add(self, passages: Sequence[Passage]) -> int:
        return self._each(lambda index: index.add(passages))

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        keys = list(ids)
        return self._each(lambda index: index.remove(keys, scope=scope))

    def _each(self, call: Callable[[SearchIndex], int]) -> int:
        """The call on every index, even after one raised (the first error is re-raised,
        as the index of record's caller expects it)."""
        counts: list[int] = []
        error: Exception | None = None
        for index in self._indexes:
            try:
                counts.append(call(index))
            except Exception as exc:
                error = error or exc
                counts.append(0)
        if error is not None:
            raise error
        return counts[0]

    def search(self, query: SearchQuery) -> list[SearchHit]:
        return self._indexes[0].search(query)

    def passages(self) -> Iterator[Passage]:
        return self._indexes[0].passages()


@dataclass
class SearchPaths:
    """The indexes of one conversation's run, by path name, and the tee that feeds them."""

    indexes: dict[str, SearchIndex]
    tee: TeeIndex
    service: InMemoryS3Vectors | None = None

    def close(self) -> None:
        for index in self.indexes.values():
            if isinstance(index, SqliteSearchIndex):
                index.close()


def search_paths(embedder: Embedder | None) -> SearchPaths:
    """Keyword-only always; with an embedder, the embedded hybrid and the deployed path too."""
    indexes: dict[str, SearchIndex] = {KEYWORDS: SqliteSearchIndex(":memory:")}
    service = None
    if embedder is not None:
        service = InMemoryS3Vectors()
        indexes[HYBRID] = SqliteSearchIndex(":memory:", embedder)
        indexes[DEPLOYED] = S3VectorsSearchIndex(
            "eval-vectors", "passages", embedder, client=service
        )
    return SearchPaths(indexes, TeeIndex(list(indexes.values())), service)
