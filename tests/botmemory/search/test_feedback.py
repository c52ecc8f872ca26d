"""Pseudo-relevance feedback (keywords.feedback_terms): a second keyword pass widened with
the words the first pass's best passages share, fused with the first, on the embedded index
and on the deployed keyword shards alike."""

from __future__ import annotations

from botmemory.search.keywords import feedback_terms
from botmemory.search.port import SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.sqlite_index import SqliteSearchIndex
from tests.support.passages import message_passage

GUILD = "100"
CHANNEL = "200"

# Asked about Zephyr, the first pass finds the two messages that name him; both also speak
# of the dunes, and the third message, about the dunes alone, is found through them.
PASSAGES = [
    message_passage("1", "Zephyr our greyhound loves running on the dunes", CHANNEL, GUILD),
    message_passage("2", "took Zephyr to the dunes again, he was so happy", CHANNEL, GUILD),
    message_passage("3", "the dunes at sunrise were glorious this morning", CHANNEL, GUILD),
    message_passage("4", "my sister is visiting next week", CHANNEL, GUILD),
]
ASK = SearchQuery(scope=GUILD, channel_ids=[CHANNEL, ""], text="how is Zephyr?", now_s=0)


def test_the_words_two_best_passages_share_widen_the_query() -> None:
    best = ["zephyr greyhound love run dune", "took zephyr dune again happi", "sister visit"]

    assert feedback_terms(["zephyr"], best) == ["dune"]
    # Never a word already asked, one of fewer than 3 characters, or one only one holds.
    assert feedback_terms(["zephyr", "dune"], best) == []
    assert feedback_terms(["x"], ["ab ab", "ab ab"]) == []


def test_the_embedded_index_finds_what_the_best_passages_lead_to() -> None:
    index = SqliteSearchIndex()
    try:
        index.add(PASSAGES)
        found = [h.passage.id for h in index.search(ASK)]
    finally:
        index.close()

    assert found[:2] == ["M#200#2", "M#200#1"] or found[:2] == ["M#200#1", "M#200#2"]
    assert "M#200#3" in found  # no "Zephyr" in it: found through the dunes
    assert "M#200#4" not in found


def test_the_deployed_keyword_leg_widens_the_query_the_same_way(
    pg_index: PostgresKeywordIndex,
) -> None:
    pg_index.add(PASSAGES)

    found = [h.passage.id for h in pg_index.search(ASK)]

    assert set(found[:2]) == {"M#200#1", "M#200#2"}
    assert "M#200#3" in found and "M#200#4" not in found
