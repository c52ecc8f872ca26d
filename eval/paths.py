"""The search paths `make eval` measures side by side, all fed by the same replay.

- `keywords`: the embedded index (SQLite FTS5) without an embedder, keywords over the whole
  history: what `make demo` and the local stack run without an embedding model.
- `hybrid`: the embedded index with the embedder: keywords over the whole history and the
  vector leg, fused by reciprocal rank.
- `deployed`: what template.yaml deploys: `DeployedSearchIndex`, the S3 Vectors adapter's
  nearest passages (as many as recall asks, 100 with the default
  budgets, never fewer than its 50 `candidates`) fused with the keyword leg on PostgreSQL over the
  whole history (`PostgresKeywordIndex`, on a temporary local cluster: localrun.postgres), as
  the embedded hybrid fuses.
- `vectors`: S3 Vectors alone (MEMORY_KEYWORD_INDEX unset): the 100 nearest passages by
  embedding, re-ranked by keywords, so a passage must be a vector candidate to be found.
  Only the S3 Vectors service is played (eval/vector_service.py): moto has no QueryVectors.

Consolidation writes to all of them at once (`TeeIndex`), so each path searches the same
passages; recall asks each through its own SearchLeg.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from botmemory.clock import Clock
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.embeddings import Embedder
from botmemory.search.port import Passage, SearchHit, SearchIndex, SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_transport import LocalTransport
from botmemory.search.s3vectors_index import S3VectorsSearchIndex
from botmemory.search.sqlite_index import SqliteSearchIndex
from eval.vector_service import InMemoryS3Vectors

KEYWORDS = "keywords"
HYBRID = "hybrid"
DEPLOYED = "deployed"
VECTORS = "vectors"
PATHS = (KEYWORDS, HYBRID, DEPLOYED, VECTORS)  # the order every table prints them in
PATH_TITLES = {
    KEYWORDS: "keyword-only (embedded index, FTS5 over the whole history)",
    HYBRID: "embedded hybrid (FTS5 over the whole history + vectors, fused)",
    DEPLOYED: "deployed (S3 Vectors' nearest + the keyword leg on PostgreSQL, fused)",
    VECTORS: "S3 Vectors alone (its vector candidates, keyword re-rank)",
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
    transport: LocalTransport | None = None

    def close(self) -> None:
        for index in self.indexes.values():
            if isinstance(index, SqliteSearchIndex):
                index.close()
        if self.transport is not None:
            self.transport.close()


def search_paths(
    embedder: Embedder | None, keyword_dsn: str | None = None, clock: Clock | None = None
) -> SearchPaths:
    """Keyword-only always; with an embedder, the embedded hybrid, the deployed path and S3
    Vectors alone too. `keyword_dsn`: an empty PostgreSQL database for the deployed path's
    keyword leg (without one, no deployed path); `clock`: the replay's, which the keyword
    leg's writes expire rows by (as a deployment's functions use the time of day)."""
    indexes: dict[str, SearchIndex] = {KEYWORDS: SqliteSearchIndex(":memory:")}
    service = None
    transport = None
    if embedder is not None:
        service = InMemoryS3Vectors()
        indexes[HYBRID] = SqliteSearchIndex(":memory:", embedder)
        vectors = S3VectorsSearchIndex("eval-vectors", "passages", embedder, client=service)
        if keyword_dsn is not None:
            transport = LocalTransport(keyword_dsn)
            keywords = PostgresKeywordIndex(transport, clock=clock)
            keywords.migrate()
            indexes[DEPLOYED] = DeployedSearchIndex(vectors, keywords)
        indexes[VECTORS] = vectors
    # The deployed path writes the vectors S3 Vectors alone reads: they are written once.
    written = [i for name, i in indexes.items() if name != VECTORS or DEPLOYED not in indexes]
    return SearchPaths(indexes, TeeIndex(written), service, transport)
