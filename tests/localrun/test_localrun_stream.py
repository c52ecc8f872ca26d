"""localrun.fastmoto keeps the table's stream through a refused transaction: the readers
`make dev` opened before it go on reading the live stream, which holds every committed
write (those before the refusal not yet read, those after it) and none of the refused ones.
Through moto in process, as the suite runs it (tests/conftest.py enters fast_dynamodb)."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models import DynamoDBBackend

TABLE = "MemoryTable"


def put(client: Any, sk: str) -> None:
    client.put_item(TableName=TABLE, Item={"pk": {"S": "CH#1"}, "sk": {"S": sk}})


def refused_transaction(client: Any, sk: str) -> None:
    """A write and a condition that fails: DynamoDB refuses the whole transaction."""
    with pytest.raises(ClientError) as refused:
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "CH#1"}, "sk": {"S": sk}}}},
                {
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "CH#1"}, "sk": {"S": "LOCK"}},
                        "ConditionExpression": "attribute_exists(pk)",
                    }
                },
            ]
        )
    assert refused.value.response["Error"]["Code"] == "TransactionCanceledException"


class Reader:
    """One shard iterator kept across reads, as make dev's event sources keep theirs."""

    def __init__(self, client: Any) -> None:
        self.streams = boto3.client("dynamodbstreams", region_name="us-east-1")
        self.arn = client.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        (shard,) = self.streams.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"]
        self.iterator = self.streams.get_shard_iterator(
            StreamArn=self.arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]

    def keys(self) -> list[str]:
        page = self.streams.get_records(ShardIterator=self.iterator, Limit=1000)
        self.iterator = page["NextShardIterator"]
        return [r["dynamodb"]["Keys"]["sk"]["S"] for r in page["Records"]]


def test_a_refused_transaction_keeps_the_stream_its_readers_read(dynamodb: Any) -> None:
    reader = Reader(dynamodb)
    put(dynamodb, "OBS#1")
    assert reader.keys() == ["OBS#1"]
    put(dynamodb, "OBS#2")  # committed, not yet read when the transaction is refused

    refused_transaction(dynamodb, "OBS#refused")
    put(dynamodb, "OBS#3")  # after the refusal

    assert reader.keys() == ["OBS#2", "OBS#3"]
    assert dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"] == reader.arn
    assert "Item" not in dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": "CH#1"}, "sk": {"S": "OBS#refused"}}
    )
    # A reader opened afterwards sees the same stream: every committed write, once.
    assert Reader(dynamodb).keys() == ["OBS#1", "OBS#2", "OBS#3"]


def test_a_write_during_a_refused_transaction_is_neither_undone_nor_lost_from_the_stream(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto answers requests in threads; a refused transaction restores its backup, which
    would undo a write that landed meanwhile. Each request runs alone instead."""
    reader = Reader(dynamodb)
    inside = threading.Event()
    transaction_thread: list[int] = []
    get_item = DynamoDBBackend.get_item

    def slow_get_item(self: DynamoDBBackend, *args: Any, **kwargs: Any) -> Any:
        # The transaction reads each item it writes: give another writer time to land.
        if transaction_thread == [threading.get_ident()] and not inside.is_set():
            inside.set()
            time.sleep(0.5)
        return get_item(self, *args, **kwargs)

    monkeypatch.setattr(DynamoDBBackend, "get_item", slow_get_item)

    def transaction() -> None:
        transaction_thread.append(threading.get_ident())
        refused_transaction(boto3.client("dynamodb", region_name="us-east-1"), "OBS#refused")

    worker = threading.Thread(target=transaction)
    worker.start()
    assert inside.wait(10)
    put(boto3.client("dynamodb", region_name="us-east-1"), "OBS#meanwhile")
    worker.join(10)

    assert "Item" in dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": "CH#1"}, "sk": {"S": "OBS#meanwhile"}}
    )
    assert reader.keys() == ["OBS#meanwhile"]
