"""EMBEDDING_QUERY_PREFIX and EMBEDDING_PASSAGE_PREFIX: a model trained with role marks
(multilingual-e5's "query: " and "passage: ") gets them, through the project's `openai:`
embedder against an OpenAI-compatible server on 127.0.0.1, on every search path."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from botmemory.search.embeddings import (
    Embedder,
    OpenAIEmbedder,
    PrefixedEmbedder,
    build_embedder,
    embed_query,
)
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.settings.config import settings_from
from tests.support.fake_embeddings import EmbeddingServer
from tests.support.fake_providers import serving


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with serving(EmbeddingServer()) as running:
        yield running


def embedder(base_url: str, query_prefix: str = "", passage_prefix: str = "") -> Embedder | None:
    return build_embedder(
        "openai:e5",
        base_url=base_url,
        api_key=None,
        dimensions=64,
        timeout_seconds=2.0,
        max_attempts=1,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
    )


def test_passages_and_questions_carry_their_own_marks(server: EmbeddingServer) -> None:
    prefixed = embedder(server.base_url, "query: ", "passage: ")
    assert isinstance(prefixed, PrefixedEmbedder)
    index = SqliteSearchIndex(embedder=prefixed)
    try:
        index.add(
            [
                Passage(
                    id="a",
                    kind=PassageKind.MESSAGE,
                    scope="G#1",
                    channel_id="c",
                    text="kiln",
                    time_ms=1,
                )
            ]
        )
        index.search(SearchQuery(scope="G#1", text="ceramics", now_s=0))
    finally:
        index.close()

    assert server.calls == [["passage: kiln"], ["query: ceramics"]]


def test_without_prefixes_texts_go_as_they_are(server: EmbeddingServer) -> None:
    plain = embedder(server.base_url)
    assert isinstance(plain, OpenAIEmbedder)

    embed_query(plain, "ceramics")
    plain.embed(["kiln"])

    assert server.calls == [["ceramics"], ["kiln"]]


def test_another_prefix_is_another_model_so_old_vectors_are_embedded_again(
    server: EmbeddingServer,
) -> None:
    before = embedder(server.base_url)
    after = embedder(server.base_url, "query: ", "passage: ")
    assert before is not None and after is not None
    assert before.name != after.name  # the embedded index re-embeds rows of another name


def test_the_prefixes_are_settings_read_from_the_environment() -> None:
    settings = settings_from(
        {
            "EMBEDDING_QUERY_PREFIX": "query: ",
            "EMBEDDING_PASSAGE_PREFIX": "passage: ",
        }
    )
    assert (settings.embedding_query_prefix, settings.embedding_passage_prefix) == (
        "query: ",
        "passage: ",
    )
