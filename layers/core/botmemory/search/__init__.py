"""Search over the whole history: one port (search.port), two adapters, chosen by
MEMORY_SEARCH_INDEX. Adapter modules are imported only when chosen."""

from __future__ import annotations

from botmemory.search.port import Passage, PassageKind, SearchHit, SearchIndex, SearchQuery
from botmemory.settings.config import ConfigError, Settings

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


def build_search_index(settings: Settings) -> SearchIndex | None:
    """The configured index, or None when search is off."""
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
        from botmemory.search.s3vectors_index import S3VectorsSearchIndex

        return S3VectorsSearchIndex(bucket, index, embedder)
    raise ConfigError(
        f"MEMORY_SEARCH_INDEX={spec!r} is not one of 'sqlite:<path>', "
        "'s3vectors:<bucket>/<index>', 'off' or unset"
    )
