"""The deployed hybrid (botmemory.search.deployed): S3 Vectors' nearest passages (the
service played in process, eval/vector_service.py, as moto has no QueryVectors) beside the
keyword leg on a real PostgreSQL (tests/support/postgres.py), with the project's `openai:`
embedder against an OpenAI-compatible server on 127.0.0.1. A word the vector leg never proposes is found, and
one leg failing never takes the other down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from botmemory.search import build_search_index
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.embeddings import EmbeddingError, OpenAIEmbedder
from botmemory.search.port import KeywordsOnly, Passage, SearchQuery, VectorsOnly
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_transport import KeywordIndexUnavailable, LocalTransport
from botmemory.search.s3vectors_index import S3VectorsSearchIndex
from botmemory.settings.config import ConfigError, Settings, settings_from
from eval.vector_service import InMemoryS3Vectors
from tests.support.fake_embeddings import EmbeddingServer, closed_url, project_embedder
from tests.support.fake_providers import serving
from tests.support.passages import message_passage

GUILD = "100"
CHANNEL = "200"
NOW_S = 1_767_225_600
DIMENSIONS = 64


def message(pid: str, text: str) -> Passage:
    return message_passage(pid, text, CHANNEL, GUILD)


def query(text: str, limit: int = 20) -> SearchQuery:
    return SearchQuery(scope=GUILD, channel_ids=[CHANNEL, ""], text=text, now_s=NOW_S, limit=limit)


def embedder(base_url: str) -> OpenAIEmbedder:
    embedder: OpenAIEmbedder = project_embedder(base_url, DIMENSIONS)
    return embedder


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with serving(EmbeddingServer()) as running:
        yield running


def deployed(
    keywords: PostgresKeywordIndex, base_url: str, candidates: int = 50
) -> tuple[DeployedSearchIndex, S3VectorsSearchIndex]:
    vectors = S3VectorsSearchIndex(
        "vectors", "passages", embedder(base_url), client=InMemoryS3Vectors(), candidates=candidates
    )
    return DeployedSearchIndex(vectors, keywords), vectors


# Pottery talk fills the vector leg's candidates; the rare name shares no concept with it.
POTTERY = [message(str(n), f"pottery class number {n}, the kiln and the clay") for n in range(1, 9)]
RARE = message("20", "my cousin Thaddeus arrives on the ferry")


def test_a_word_the_vector_leg_never_proposes_is_found(
    pg_index: PostgresKeywordIndex, server: EmbeddingServer
) -> None:
    index, vectors_alone = deployed(pg_index, server.base_url, candidates=3)
    index.add([*POTTERY, RARE])
    # Its vector is the pottery concept's; only the name is a word a passage holds.
    ask = query("Thaddeus, ceramics?", limit=3)

    # S3 Vectors alone: the three nearest are pottery talk, and keywords only re-rank them.
    assert RARE.id not in [h.passage.id for h in vectors_alone.search(ask)]
    hits = index.search(ask)
    assert RARE.id in [h.passage.id for h in hits]
    assert next(h for h in hits if h.passage.id == RARE.id).keyword_rank == 1


def test_an_embedding_endpoint_down_at_writing_leaves_the_words_searchable(
    pg_index: PostgresKeywordIndex, server: EmbeddingServer
) -> None:
    index, _ = deployed(pg_index, server.base_url)
    server.down = True

    with pytest.raises(KeywordsOnly) as partial:
        index.add([RARE])

    assert partial.value.written == 1 and isinstance(partial.value.error, EmbeddingError)
    server.down = False
    hits = index.search(query("Thaddeus"))
    assert [h.passage.id for h in hits] == [RARE.id]
    assert hits[0].vector_rank is None  # no vector yet: found by its words alone


def test_a_later_write_embeds_the_passages_the_vectors_missed(
    pg_index: PostgresKeywordIndex, server: EmbeddingServer
) -> None:
    index, vectors_alone = deployed(pg_index, server.base_url)
    server.down = True
    with pytest.raises(KeywordsOnly):
        index.add([message("1", "Alice goes to a pottery class")])
    server.down = False
    # "ceramics" shares no token with "pottery": only the vector leg can find it.
    assert vectors_alone.search(query("ceramics")) == []

    index.add([message("2", "Bob ran a marathon")])

    assert server.calls[-1] == ["Alice goes to a pottery class"]
    assert next(h.passage.id for h in index.search(query("ceramics"))) == f"M#{CHANNEL}#1"
    assert pg_index.write([], reembed=10) == []  # marks cleared


def test_an_embedding_endpoint_down_at_search_answers_from_keywords(
    pg_index: PostgresKeywordIndex,
) -> None:
    index, _ = deployed(pg_index, closed_url())
    index.keywords.add([RARE])

    hits = index.search(query("Thaddeus"))

    assert [h.passage.id for h in hits] == [RARE.id]
    assert isinstance(getattr(hits, "vector_error", None), EmbeddingError)


def down() -> PostgresKeywordIndex:
    """A keyword leg whose database does not answer (nothing listens on port 9)."""
    return PostgresKeywordIndex(LocalTransport("postgresql://postgres@127.0.0.1:9/none"))


def test_a_keyword_leg_that_fails_leaves_the_vectors_answering(
    pg_index: PostgresKeywordIndex, server: EmbeddingServer
) -> None:
    _index, vectors = deployed(pg_index, server.base_url)
    vectors.add([message("1", "Alice goes to a pottery class")])
    broken = DeployedSearchIndex(vectors, down())

    hits = broken.search(query("ceramics"))

    assert [h.passage.id for h in hits] == [f"M#{CHANNEL}#1"]
    assert isinstance(getattr(hits, "keyword_error", None), KeywordIndexUnavailable)


def test_a_keyword_leg_down_at_writing_still_writes_the_vectors(
    server: EmbeddingServer,
) -> None:
    vectors = S3VectorsSearchIndex(
        "vectors", "passages", embedder(server.base_url), client=InMemoryS3Vectors()
    )
    broken = DeployedSearchIndex(vectors, down())

    with pytest.raises(VectorsOnly) as partial:
        broken.add([message("1", "Alice goes to a pottery class")])

    assert partial.value.written == 1
    assert isinstance(partial.value.error, KeywordIndexUnavailable)
    assert [p.id for p in vectors.passages()] == [f"M#{CHANNEL}#1"]


def test_both_legs_failing_is_an_error_for_the_caller_to_fail_open() -> None:
    vectors = S3VectorsSearchIndex(
        "vectors", "passages", embedder(closed_url()), client=InMemoryS3Vectors()
    )
    broken = DeployedSearchIndex(vectors, down())

    with pytest.raises(KeywordIndexUnavailable):
        broken.search(query("anything"))


def test_a_removal_empties_both_legs(
    pg_index: PostgresKeywordIndex, server: EmbeddingServer
) -> None:
    index, vectors = deployed(pg_index, server.base_url)
    index.add([RARE, *POTTERY[:2]])

    index.remove([RARE.id], scope=GUILD)

    assert RARE.id not in {p.id for p in index.passages()}
    assert RARE.id not in {p.id for p in vectors.passages()}
    assert RARE.id not in [h.passage.id for h in index.search(query("Thaddeus"))]


def test_the_settings_choose_the_deployed_hybrid_only_beside_s3_vectors() -> None:
    common = {"table_name": "t", "embedding_model": "openai:fake-embed"}
    both = Settings(
        **common,
        search_index="s3vectors:vectors/passages",
        keyword_index="postgres:arn:aws:rds:eu-west-1:123456789012:cluster:memory-keywords",
        # RDS names the cluster's managed secret "rds!cluster-<id>".
        keyword_db_secret="arn:aws:secretsmanager:eu-west-1:123456789012:secret:rds!cluster-1a2b-AbCdEf",
    )
    assert isinstance(build_search_index(both), DeployedSearchIndex)
    alone = Settings(**common, search_index="s3vectors:vectors/passages")
    assert not isinstance(build_search_index(alone), DeployedSearchIndex)
    no_secret = Settings(**common, search_index="s3vectors:vectors/passages",
                         keyword_index="postgres:arn:aws:rds:eu-west-1:123456789012:cluster:c")  # fmt: skip
    with pytest.raises(ConfigError, match="MEMORY_KEYWORD_DB_SECRET"):
        build_search_index(no_secret)
    for spec in (
        "s3:kw-bucket/keywords",
        "postgres:c",
        "postgres:arn:aws:s3:::b",
        "opensearch:x/y",
    ):
        with pytest.raises(ConfigError, match="MEMORY_KEYWORD_INDEX"):
            settings_from({"MEMORY_KEYWORD_INDEX": spec})
