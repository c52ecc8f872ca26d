"""Invariant 14: the search index holds only what the table may hold. Opted-out people's
words are never indexed; /forgetme, opting out, a deleted message, a rewritten message and
retention expiry take the passages with them (through the table's stream, as
SearchIndexFunction receives it); a deletion racing the indexing write is caught. Each test
scans the whole index, as the erasure tests scan the whole table: the embedded index, and the
deployed keyword leg on a real PostgreSQL, where the scan reads every row of every table (the
passages, and the per-server counts that name each term)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.people.erasure import Eraser
from botmemory.records import Observation
from botmemory.search.index_sync import IndexFollower, passages_to_remove
from botmemory.search.keywords import tokens
from botmemory.search.port import SearchIndex
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_sql import Statement
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.services import MemoryServices
from botmemory.storage import keys
from botmemory.storage.items import observation_values
from localrun.storage import StreamTail, put_items
from scripts.make_events import snowflake
from tests.conftest import START_MS

GUILD = "1100000000000000001"
CHANNEL = "1200000000000000001"
ALICE, BOB, CAROL = "1300000000000000001", "1300000000000000002", "1300000000000000003"
NAMES = {ALICE: "Alicia", BOB: "Bob", CAROL: "Carol"}
_sequence = iter(range(1, 4096))


@pytest.fixture(autouse=True)
def hash_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_HASH_KEY", "search-privacy-hash-key-0123456789")


def said(author: str, content: str, at_ms: int, kind: str = "msg") -> Observation:
    message_id = snowflake(at_ms, next(_sequence))  # Discord ids carry their time
    return Observation(
        channel_id=CHANNEL,
        scope=GUILD,
        sk=keys.observation_sk(at_ms, kind, message_id),
        kind=kind,
        at_ms=at_ms,
        author_id=author,
        author_name=NAMES[author],
        message_id=message_id,
        content=content,
        expires_at=epoch_seconds(at_ms + 30 * DAY_MS),
    )


@pytest.fixture(params=["embedded", "postgres"])
def index(request: pytest.FixtureRequest) -> Iterator[SearchIndex]:
    """The embedded index, and the deployed keyword leg on PostgreSQL."""
    if request.param == "postgres":
        yield request.getfixturevalue("pg_index")
        return
    embedded = SqliteSearchIndex(":memory:")
    yield embedded
    embedded.close()


@pytest.fixture
def services(searching: MemoryServices) -> MemoryServices:
    """Here every service runs with the search index (conftest's `searching`)."""
    return searching


@pytest.fixture
def stream(dynamodb: Any) -> StreamTail:
    return StreamTail(dynamodb)


def follow(services: MemoryServices, stream: StreamTail) -> int:
    """Hand the stream's new records to the follower, as SearchIndexFunction gets them."""
    assert services.index_follower is not None
    return services.index_follower.follow(stream.new_records()).removed


def record(services: MemoryServices, *observations: Observation) -> None:
    put_items(services.repository, (observation_values(o) for o in observations))
    services.consolidator.consolidate(CHANNEL, force=True)


def chat() -> list[Observation]:
    return [
        said(ALICE, "I work as a vet and I adopted a greyhound called Comet.", START_MS),
        said(BOB, "Lovely! Comet is a great name.", START_MS + 60_000),
        said(CAROL, "I restore old sailing boats on weekends.", START_MS + 120_000),
        said(BOB, "Alicia, bring Comet to the picnic on Saturday.", START_MS + 180_000),
    ]


def holding(index: SqliteSearchIndex, *needles: str) -> list[str]:
    """Every passage (any kind) whose text, authors or sources hold one of the needles; on
    PostgreSQL, also any row of any table holding one (or, for a one-word needle, its token)."""
    found = []
    for passage in index.passages():
        blob = " ".join([passage.text, *passage.authors, *passage.sources])
        if any(needle in blob for needle in needles):
            found.append(passage.id)
    if isinstance(index, PostgresKeywordIndex):
        found += [f"row:{needle}" for needle in needles if stored_in_a_row(index, needle)]
    return found


def stored_in_a_row(index: PostgresKeywordIndex, needle: str) -> bool:
    every_row = Statement(
        "SELECT t::text FROM kw_passages t UNION ALL SELECT t::text FROM kw_terms t "
        "UNION ALL SELECT t::text FROM kw_sizes t"
    )
    dump = "\n".join(str(row) for (row,) in index.transport.execute(every_row))
    words = tokens(needle)
    terms = {str(t) for (t,) in index.transport.execute(Statement("SELECT term FROM kw_terms"))}
    return needle in dump or (len(words) == 1 and words[0] in terms)


def test_consolidation_indexes_messages_facts_and_the_episode_at_once(
    services: MemoryServices, index: SqliteSearchIndex
) -> None:
    put_items(services.repository, (observation_values(o) for o in chat()))
    assert list(index.passages()) == []  # ingest writes nothing to the index

    services.consolidator.consolidate(CHANNEL, force=True)

    kinds = sorted({p.kind.value for p in index.passages()})

    assert kinds == ["episode", "fact", "message"]
    stored = {o.sk: o for o in services.repository.channel_observations(CHANNEL)}
    holders = [
        services.repository.client.get_item(
            TableName="MemoryTable",
            Key={"pk": {"S": keys.channel_pk(CHANNEL)}, "sk": {"S": sk}},
        )["Item"].get("passages")
        for sk in stored
    ]
    assert all(h is not None for h in holders)  # each message names the passages copying it


def test_opted_out_words_are_never_indexed(
    services: MemoryServices, index: SqliteSearchIndex
) -> None:
    services.opt_outs.opt_out(CAROL)
    record(services, *chat())

    assert holding(index, CAROL, "sailing") == []
    assert holding(index, ALICE)  # everyone else is indexed


def test_forgetme_leaves_no_passage_with_the_person_s_words_id_or_name(
    services: MemoryServices, index: SqliteSearchIndex, stream: StreamTail
) -> None:
    record(services, *chat())
    assert holding(index, ALICE, "Alicia", "greyhound")

    Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(ALICE)
    follow(services, stream)

    assert holding(index, ALICE, "Alicia", "greyhound") == []
    assert holding(index, "sailing boats")  # Carol's words stay


def test_a_message_deleted_in_discord_takes_its_passages_with_it(
    services: MemoryServices, index: SqliteSearchIndex, stream: StreamTail
) -> None:
    messages = chat()
    record(services, *messages)
    boats = messages[2]
    deletion = Observation(
        channel_id=CHANNEL,
        scope=GUILD,
        sk=keys.observation_sk(START_MS + DAY_MS, "del", boats.message_id or ""),
        kind="del",
        at_ms=START_MS + DAY_MS,
        message_id=boats.message_id,
    )
    record(services, deletion)
    follow(services, stream)

    assert holding(index, "sailing boats") == []


def test_retention_expiry_reaches_the_index_through_the_stream_ttl_records(
    services: MemoryServices, index: SqliteSearchIndex, stream: StreamTail
) -> None:
    record(services, *chat())
    follow(services, stream)
    # What DynamoDB's TTL does at expiry: a REMOVE of the item, with its old image.
    for observation in services.repository.channel_observations(CHANNEL):
        services.repository.client.delete_item(
            TableName="MemoryTable",
            Key={"pk": {"S": keys.channel_pk(CHANNEL)}, "sk": {"S": observation.sk}},
        )
    follow(services, stream)

    assert [p for p in index.passages() if p.kind.value == "message"] == []


def test_a_deletion_racing_the_indexing_write_is_caught_by_the_write(
    services: MemoryServices,
    index: SqliteSearchIndex,
    stream: StreamTail,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stream removes the passages before the consolidation wrote them (their message
    was erased between the commit and the index write): the write reads its sources back
    and withdraws what the table no longer holds."""
    eraser = Eraser(services.repository, services.clock, services.opt_outs.hash_of)
    original = index.add

    def add_after_erasure(passages: Any) -> int:
        eraser.erase(ALICE)
        follow(services, stream)  # nothing indexed yet: removes nothing
        return original(passages)

    monkeypatch.setattr(index, "add", add_after_erasure)
    record(services, *chat())

    assert holding(index, ALICE, "Alicia", "greyhound") == []


def test_a_rewritten_message_loses_its_passages(
    services: MemoryServices, index: SqliteSearchIndex, stream: StreamTail
) -> None:
    """Erasure redacts a person's name from someone else's message: the passages that copied
    the old words go."""
    messages = chat()
    record(services, *messages)
    follow(services, stream)
    picnic = messages[3]
    services.repository.client.update_item(
        TableName="MemoryTable",
        Key={"pk": {"S": keys.channel_pk(CHANNEL)}, "sk": {"S": picnic.sk}},
        UpdateExpression="SET content = :c",
        ExpressionAttributeValues={":c": {"S": "[someone], bring Comet to the picnic."}},
    )
    follow(services, stream)

    assert holding(index, "Alicia, bring Comet") == []


def test_an_unreadable_stream_record_is_skipped_and_counted(index: SqliteSearchIndex) -> None:
    report = IndexFollower(index).follow([{"eventName": "REMOVE"}, {"nonsense": True}])

    assert report.skipped == 2 and report.removed == 0


def test_records_that_change_no_words_remove_nothing() -> None:
    consumed = {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"pk": {"S": "CH#1"}, "sk": {"S": "OBS#0000000000001#msg#5"}},
            "OldImage": {"content": {"S": "hi"}, "pending_sk": {"S": "x"}},
            "NewImage": {"content": {"S": "hi"}, "passages": {"L": [{"S": "M#1#OBS#..."}]}},
        },
    }
    restated = {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"pk": {"S": "SC#1#U#2"}, "sk": {"S": "FACT#f1"}},
            "OldImage": {
                "scope": {"S": "1"},
                "user_id": {"S": "2"},
                "fact_id": {"S": "f1"},
                "text": {"S": "x"},
                "status": {"S": "active"},
                "hits": {"N": "1"},
            },
            "NewImage": {
                "scope": {"S": "1"},
                "user_id": {"S": "2"},
                "fact_id": {"S": "f1"},
                "text": {"S": "x"},
                "status": {"S": "active"},
                "hits": {"N": "2"},
            },
        },
    }

    assert passages_to_remove(consumed) == [] and passages_to_remove(restated) == []
