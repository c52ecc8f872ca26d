"""The keyword leg's dated pass (SearchQuery.during): a query naming a time also ranks what
was said within it alone, fused with the other passes, on the embedded index and on the
deployed keyword leg (PostgreSQL) alike, and filters nothing out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from botmemory.search.port import LISTED_SPAN_MS, SearchIndex, SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.sqlite_index import SqliteSearchIndex
from tests.botmemory.search.test_deployed import POTTERY, deployed
from tests.support.fake_embeddings import EmbeddingServer
from tests.support.passages import message_passage

GUILD = "100"
CHANNEL = "200"
LIMIT = 20

# Thirty messages about painting; the one of the day asked about (time 10, its id) says it
# once among many other words, so BM25 ranks it last of all of them.
PASSAGES = [
    message_passage(
        str(n),
        "we talked for hours about the trip, the weather, the food, the hotel and some painting"
        if n == 10
        else f"painting painting word{n}",
        CHANNEL,
        GUILD,
    )
    for n in range(1, 31)
]
THAT_DAY = "M#200#10"


def ask(during: list[tuple[int, int]]) -> SearchQuery:
    return SearchQuery(
        scope=GUILD,
        channel_ids=[CHANNEL, ""],
        text="what painting?",
        limit=LIMIT,
        now_s=0,
        during=during,
    )


def found(index: SearchIndex, during: list[tuple[int, int]]) -> list[str]:
    return [hit.passage.id for hit in index.search(ask(during))]


@pytest.fixture(params=["embedded", "postgres"])
def index(request: pytest.FixtureRequest) -> Iterator[SearchIndex]:
    if request.param == "embedded":
        embedded = SqliteSearchIndex()
        embedded.add(PASSAGES)
        yield embedded
        embedded.close()
        return
    keywords: PostgresKeywordIndex = request.getfixturevalue("pg_index")
    keywords.add(PASSAGES)
    yield keywords


def test_what_was_said_in_the_time_a_query_names_is_found_below_the_others(
    index: SearchIndex,
) -> None:
    # The shards answer their deeper candidate list (the deployed index cuts it): compare
    # the first LIMIT of each.
    undated = found(index, [])[:LIMIT]
    dated = found(index, [(10, 11)])[:LIMIT]

    assert THAT_DAY not in undated  # ranked 30th of 30, below the 20 asked
    assert THAT_DAY in dated
    # Nothing is filtered out: the rest of what the query finds is still there.
    assert len(dated) == LIMIT and len(set(undated) & set(dated)) == LIMIT - 1


def test_a_time_with_nothing_of_the_query_in_it_changes_nothing(index: SearchIndex) -> None:
    assert found(index, [(1_000, 2_000)]) == found(index, [])


def test_a_query_names_at_most_eight_times() -> None:
    with pytest.raises(ValueError):
        SearchQuery(scope=GUILD, text="x", now_s=0, during=[(n, n + 1) for n in range(9)])


def test_a_day_is_read_whole_and_a_month_is_not(index: SearchIndex) -> None:
    quiet = message_passage("40", "I just needed some time alone by the lake", CHANNEL, GUILD)
    index.add([quiet])

    def feeling(during: list[tuple[int, int]]) -> list[str]:
        asked = ask(during).model_copy(update={"text": "how was he feeling?"})
        return [hit.passage.id for hit in index.search(asked)]

    # No word shared: found only because it was said on the day asked about.
    assert feeling([(40, 41)]) == [quiet.id]
    assert feeling([]) == []
    # A month is too much to read whole: only what shares the query's words is ranked.
    assert feeling([(0, LISTED_SPAN_MS + 1)]) == []


def test_the_deployed_index_reads_a_named_day_whole_too(
    pg_index: PostgresKeywordIndex, embedding_server: EmbeddingServer
) -> None:
    # What the template deploys: S3 Vectors' nearest beside the keyword leg.
    index, _ = deployed(pg_index, embedding_server.base_url)
    quiet = message_passage("40", "I just needed some time alone by the lake", CHANNEL, GUILD)
    index.add([*POTTERY, quiet])
    asked = SearchQuery(
        scope=GUILD, channel_ids=[CHANNEL, ""], text="pottery, and how was he?", limit=10, now_s=0
    )

    undated = index.search(asked)
    dated = index.search(asked.model_copy(update={"during": [(40, 41)]}))

    def keyword_rank(hits: list[Any]) -> int | None:
        return next((h.keyword_rank for h in hits if h.passage.id == quiet.id), None)

    # No word shared: the keyword leg finds it only on the day asked about.
    assert keyword_rank(undated) is None
    assert keyword_rank(dated) is not None
