"""One leg failing never takes the other down (issue 29, item 5): the embedded index with
the project's own `openai:` embedder against an OpenAI-compatible server on 127.0.0.1 that
is down, comes back, or answers vectors of the wrong length."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from botmemory.search.embeddings import EmbeddingDimensionsError, EmbeddingError, OpenAIEmbedder
from botmemory.search.port import KeywordsOnly, Passage, PassageKind, SearchQuery
from botmemory.search.sqlite_index import SqliteSearchIndex
from tests.support.fake_embeddings import EmbeddingServer, closed_url, project_embedder
from tests.support.fake_providers import serving

SCOPE = "G#1"
NOW_S = 1_767_225_600
DIMENSIONS = 64  # what EMBEDDING_DIMENSIONS says


def passage(pid: str, text: str) -> Passage:
    return Passage(
        id=pid, kind=PassageKind.MESSAGE, scope=SCOPE, channel_id="c1", text=text, time_ms=1
    )


def query(text: str) -> SearchQuery:
    return SearchQuery(scope=SCOPE, text=text, now_s=NOW_S)


def embedder(base_url: str) -> OpenAIEmbedder:
    embedder: OpenAIEmbedder = project_embedder(base_url, DIMENSIONS)
    return embedder


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with serving(EmbeddingServer()) as running:
        yield running


def test_an_endpoint_that_is_down_leaves_the_keyword_leg_working() -> None:
    index = SqliteSearchIndex(embedder=embedder(closed_url()))
    try:
        with pytest.raises(KeywordsOnly) as partial:
            index.add([passage("a", "Alice goes to a pottery class"), passage("b", "marathon")])
        assert partial.value.written == 2 and isinstance(partial.value.error, EmbeddingError)
        assert sorted(p.id for p in index.passages()) == ["a", "b"]  # written all the same

        hits = index.search(query("pottery"))

        assert [h.passage.id for h in hits] == ["a"]  # the keyword leg answered alone
        assert isinstance(getattr(hits, "vector_error", None), EmbeddingError)
    finally:
        index.close()


def test_passages_written_while_embedding_failed_get_vectors_on_a_later_write(
    server: EmbeddingServer,
) -> None:
    index = SqliteSearchIndex(embedder=embedder(server.base_url))
    try:
        server.down = True
        with pytest.raises(KeywordsOnly):
            index.add([passage("a", "Alice goes to a pottery class")])
        server.down = False
        # "ceramics" shares no token with "pottery": only the vector leg can find it.
        assert index.search(query("ceramics")) == []

        index.add([passage("b", "Bob ran a marathon")])  # the next write re-embeds "a"

        assert server.calls[-1] == ["Alice goes to a pottery class"]
        hits = index.search(query("ceramics"))
        assert hits[0].passage.id == "a" and hits[0].vector_rank == 1
        assert getattr(hits, "vector_error", None) is None
    finally:
        index.close()


def test_wrong_dimensions_name_both_numbers_and_the_setting(server: EmbeddingServer) -> None:
    server.returned_dimensions = 384  # the model's size, not EMBEDDING_DIMENSIONS
    index = SqliteSearchIndex(embedder=embedder(server.base_url))
    try:
        with pytest.raises(KeywordsOnly) as partial:
            index.add([passage("a", "Alice goes to a pottery class")])
        error = partial.value.error
        assert isinstance(error, EmbeddingDimensionsError)
        assert (error.returned, error.configured) == (384, DIMENSIONS)
        message = str(error)
        assert "384" in message and str(DIMENSIONS) in message
        assert "EMBEDDING_DIMENSIONS" in message

        hits = index.search(query("pottery class"))

        assert [h.passage.id for h in hits] == ["a"]
        assert isinstance(getattr(hits, "vector_error", None), EmbeddingDimensionsError)
    finally:
        index.close()


def test_without_an_embedder_nothing_is_marked_as_failed() -> None:
    index = SqliteSearchIndex()
    try:
        assert index.add([passage("a", "pottery")]) == 1
        hits = index.search(query("pottery"))
        assert [h.passage.id for h in hits] == ["a"]
        assert getattr(hits, "vector_error", None) is None
    finally:
        index.close()


def test_on_s3_vectors_wrong_dimensions_fail_by_name_and_recall_says_so(
    server: EmbeddingServer,
) -> None:
    """The deployed adapter has no keyword leg without vectors: the call fails, naming the
    setting, nothing is put, and recall reports (and counts) the setting, not a failure."""
    import boto3
    from botocore.stub import Stubber

    from botmemory.recall.search_leg import SearchStatus, search_status
    from botmemory.search.s3vectors_index import S3VectorsSearchIndex

    server.returned_dimensions = 384
    client = boto3.client(
        "s3vectors",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stub:  # no response queued: any service call would fail the test
        index = S3VectorsSearchIndex("b", "i", embedder(server.base_url), client=client)
        with pytest.raises(EmbeddingDimensionsError, match="EMBEDDING_DIMENSIONS=64"):
            index.add([passage("a", "pottery")])
        with pytest.raises(EmbeddingDimensionsError) as raised:
            index.search(query("pottery"))
        stub.assert_no_pending_responses()
    assert search_status(None, raised.value) == SearchStatus.WRONG_DIMENSIONS
    assert search_status(None, EmbeddingError("down")) == SearchStatus.FAILED
