"""SearchIndexFunction processes its stream batch with Powertools' BatchProcessor: a record
whose removal fails is reported alone (`batchItemFailures`), and the others' passages are
removed. Through the function as the template wires it (its CodeUri, handler and
environment, the stream's FilterCriteria), on moto's table stream and a SQLite index file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.records import Observation, scope_of
from botmemory.search.port import Passage, PassageKind
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.storage import keys
from botmemory.storage.items import observation_values
from botmemory.storage.repository import MemoryRepository
from localrun.samtemplate import passes_filters
from localrun.storage import StreamTail, put_items
from scripts.make_events import snowflake
from tests.conftest import START_MS, TABLE
from tests.support.lambda_local import LocalLambda, sample_env

FUNCTION = "SearchIndexFunction"
GUILD = "1100000000000000001"
CHANNEL = "1200000000000000001"
ALICE = "1300000000000000001"


@pytest.fixture(autouse=True)
def hash_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_HASH_KEY", "search-index-batch-hash-key-0123456789")


@pytest.fixture
def index_path(tmp_path: Path) -> Path:
    return tmp_path / "index.sqlite3"


@pytest.fixture
def local(monkeypatch: pytest.MonkeyPatch, index_path: Path) -> LocalLambda:
    env = sample_env()
    env[FUNCTION]["MEMORY_SEARCH_INDEX"] = f"sqlite:{index_path}"
    return LocalLambda(monkeypatch, env)


def passage(passage_id: str) -> Passage:
    return Passage(
        id=passage_id,
        kind=PassageKind.MESSAGE,
        scope=scope_of(GUILD),
        channel_id=CHANNEL,
        text=f"words of {passage_id}",
        time_ms=START_MS,
    )


def stored_message(n: int, passages: list[Any]) -> dict[str, Any]:
    """An observation as the table holds it, naming the passages that copy it."""
    at_ms = START_MS + n * 1000
    message_id = snowflake(at_ms, n)
    observation = Observation(
        channel_id=CHANNEL,
        scope=GUILD,
        sk=keys.observation_sk(at_ms, "msg", message_id),
        kind="msg",
        at_ms=at_ms,
        author_id=ALICE,
        author_name="Alicia",
        message_id=message_id,
        content=f"message {n}",
        expires_at=epoch_seconds(at_ms + 30 * DAY_MS),
    )
    return {**observation_values(observation, pending=False), "passages": passages}


def indexed(index_path: Path) -> set[str]:
    index = SqliteSearchIndex(str(index_path))
    try:
        return {p.id for p in index.passages()}
    finally:
        index.close()


def delete_and_deliver(
    local: LocalLambda, dynamodb: Any, items: list[dict[str, Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    """Delete the items, then hand their stream records to the function through the
    template's filter, as the event source mapping would."""
    stream = StreamTail(dynamodb)
    stream.new_records()  # the writes: not this test's batch
    for item in items:
        dynamodb.delete_item(
            TableName=TABLE, Key={"pk": {"S": item["pk"]}, "sk": {"S": item["sk"]}}
        )
    filters = local.template.stream_filters(FUNCTION)
    delivered = [r for r in stream.new_records() if passes_filters(filters, r)]
    assert len(delivered) == len(items)
    return local.invoke(FUNCTION, {"Records": delivered}), delivered


def test_a_poison_record_fails_alone_and_the_others_are_removed(
    local: LocalLambda, dynamodb: Any, index_path: Path
) -> None:
    store = SqliteSearchIndex(str(index_path))
    store.add([passage(p) for p in ("msg-a", "msg-b", "msg-poison", "msg-kept")])
    store.close()
    # A stored item may say anything: this one names a passage "id" that is not a string,
    # and removing its passages raises (so the whole batch's single removal fails too).
    items = [
        stored_message(1, ["msg-a"]),
        stored_message(2, ["msg-poison", {"not": "an id"}]),
        stored_message(3, ["msg-b"]),
    ]
    put_items(MemoryRepository(dynamodb, TABLE), items)

    answer, delivered = delete_and_deliver(local, dynamodb, items)

    poison = delivered[1]["dynamodb"]["SequenceNumber"]
    assert answer == {"batchItemFailures": [{"itemIdentifier": poison}]}
    assert indexed(index_path) == {"msg-poison", "msg-kept"}  # the rest are gone


def test_a_batch_the_index_takes_is_removed_whole_and_fails_nothing(
    local: LocalLambda, dynamodb: Any, index_path: Path
) -> None:
    store = SqliteSearchIndex(str(index_path))
    store.add([passage(p) for p in ("msg-a", "msg-b", "msg-kept")])
    store.close()
    items = [stored_message(1, ["msg-a"]), stored_message(2, ["msg-b"])]
    put_items(MemoryRepository(dynamodb, TABLE), items)

    answer, _ = delete_and_deliver(local, dynamodb, items)

    assert answer == {"batchItemFailures": []}
    assert indexed(index_path) == {"msg-kept"}


def test_a_batch_whose_every_record_fails_is_retried_whole(
    local: LocalLambda, dynamodb: Any, index_path: Path
) -> None:
    SqliteSearchIndex(str(index_path)).close()
    items = [stored_message(1, [{"not": "an id"}]), stored_message(2, [["nested"]])]
    put_items(MemoryRepository(dynamodb, TABLE), items)

    # An error of the invocation: Lambda bisects the batch and retries it.
    with pytest.raises(BatchProcessingError):
        delete_and_deliver(local, dynamodb, items)
