"""Search over the whole history: one port (search.port), two adapters, chosen by
MEMORY_SEARCH_INDEX. Adapter modules are imported only when chosen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from botmemory.search.port import Passage, PassageKind, SearchHit, SearchIndex, SearchQuery
from botmemory.settings.config import ConfigError, Settings

if TYPE_CHECKING:
    from botmemory.clock import Clock
    from botmemory.search.postgres_index import PostgresKeywordIndex
    from botmemory.search.shards import PurgeLedger

__all__ = [
    "Passage",
    "PassageKind",
    "SearchHit",
    "SearchIndex",
    "SearchQuery",
    "build_search_index",
]

# An embedding call on the indexing path may take this long; recall's own budget is
# MEMORY_SEARCH_TIMEOUT_MS, enforced around the whole search.
EMBEDDING_TIMEOUT_SECONDS = 10.0


def build_search_index(
    settings: Settings, purges: PurgeLedger | None = None, clock: Clock | None = None
) -> SearchIndex | None:
    """The configured index, or None when search is off. An S3 Vectors one is sharded by
    server (botmemory.search.shards); `purges` records its purges (the repository)."""
    spec = (settings.search_index or "").strip()
    if not spec or spec == "off":
        return None
    from botmemory.search.embeddings import build_embedder
    from botmemory.settings.config import embedding_api_key

    embedder = build_embedder(
        settings.embedding_model,
        base_url=settings.embedding_base_url or settings.model_base_url,
        # Read only if the embedder sends a key (a Bedrock one does not, and its function
        # may have no right to the secret).
        api_key=lambda: embedding_api_key(settings),
        dimensions=settings.embedding_dimensions,
        timeout_seconds=min(settings.model_timeout_seconds, EMBEDDING_TIMEOUT_SECONDS),
        max_attempts=settings.model_max_attempts,
        query_prefix=settings.embedding_query_prefix,
        passage_prefix=settings.embedding_passage_prefix,
    )
    kind, _, where = spec.partition(":")
    if kind == "sqlite" and where:
        from botmemory.search.sqlite_index import SqliteSearchIndex

        return SqliteSearchIndex(where, embedder)
    bucket, _, index = where.partition("/")
    if kind == "s3vectors" and bucket and index:
        if embedder is None:
            raise ConfigError(
                "MEMORY_SEARCH_INDEX=s3vectors:... needs EMBEDDING_MODEL: a vector index "
                "stores nothing without an embedding model"
            )
        from botmemory.search.shards import ShardedS3VectorsIndex, check_shared_name

        try:
            check_shared_name(index)
        except ValueError as exc:
            raise ConfigError(f"MEMORY_SEARCH_INDEX={spec!r}: {exc}") from exc
        vectors = ShardedS3VectorsIndex(bucket, index, embedder, purges=purges, clock=clock)
        keywords = _keyword_index(settings, purges, clock)
        if keywords is None:
            return vectors
        from botmemory.search.deployed import DeployedSearchIndex

        return DeployedSearchIndex(vectors, keywords)
    raise ConfigError(
        f"MEMORY_SEARCH_INDEX={spec!r} is not one of 'sqlite:<path>', "
        "'s3vectors:<bucket>/<index>', 'off' or unset"
    )


def _keyword_index(
    settings: Settings, purges: PurgeLedger | None, clock: Clock | None
) -> PostgresKeywordIndex | None:
    """MEMORY_KEYWORD_INDEX, the deployed keyword leg: `postgres:<cluster ARN>` through the
    RDS Data API (with MEMORY_KEYWORD_DB_SECRET), `postgresql://...` a local PostgreSQL;
    None when unset."""
    spec = (settings.keyword_index or "").strip()
    if not spec:
        return None
    from botmemory.search.postgres_index import PostgresKeywordIndex

    if spec.startswith("postgresql://"):
        from botmemory.search.postgres_transport import LocalTransport

        return PostgresKeywordIndex(LocalTransport(spec), clock=clock)
    cluster = spec.removeprefix("postgres:")
    if cluster == spec or not settings.keyword_db_secret:
        raise ConfigError(
            f"MEMORY_KEYWORD_INDEX={spec!r} needs postgres:<cluster ARN> and "
            "MEMORY_KEYWORD_DB_SECRET (the secret the Data API signs in with)"
        )
    from botmemory.search.postgres_transport import DataApiTransport

    transport = DataApiTransport(cluster, settings.keyword_db_secret, settings.keyword_db_name)
    return PostgresKeywordIndex(transport, clock=clock)
