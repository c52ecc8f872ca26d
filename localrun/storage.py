"""Writing and reading the table directly, for the tests and the bench.

Production never seeds items in bulk or reads a channel's raw state, so these live here,
in the library of runs without AWS, not in the repository. They shape items with
`botmemory.storage.items`, the same code the repository writes with.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from botmemory.records import Episode, Fact
from botmemory.storage.items import episode_values, fact_values, from_item, state_key, to_item
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.table import BATCH_WRITE_LIMIT


def put_items(repository: MemoryRepository, items: Iterable[dict[str, Any]]) -> None:
    """Batched plain writes of already-shaped items (plain values, keys included)."""
    pending = [{"PutRequest": {"Item": to_item(i)}} for i in items]
    for start in range(0, len(pending), BATCH_WRITE_LIMIT):
        request: dict[str, Any] = {
            repository.table_name: pending[start : start + BATCH_WRITE_LIMIT]
        }
        while request:
            response = repository.client.batch_write_item(RequestItems=request)
            request = response.get("UnprocessedItems") or {}


def put_facts(repository: MemoryRepository, facts: Iterable[Fact]) -> None:
    put_items(repository, (fact_values(f) for f in facts))


def put_episode(repository: MemoryRepository, episode: Episode, scope: str) -> None:
    repository.client.put_item(
        TableName=repository.table_name, Item=to_item(episode_values(episode, scope))
    )


def channel_state(repository: MemoryRepository, channel_id: str) -> dict[str, Any]:
    """The channel's STATE item as plain values (lock, sweep marker, counters)."""
    response = repository.client.get_item(
        TableName=repository.table_name, Key=state_key(channel_id), ConsistentRead=True
    )
    return from_item(response.get("Item", {}))


class StreamTail:
    """The table's stream (moto serves it in-process), read from the start; each call
    returns only the records not returned before, as Lambda's event source hands them on."""

    def __init__(self, client: Any, region: str = "us-east-1") -> None:
        import boto3

        self._streams = boto3.client("dynamodbstreams", region_name=region)
        table = client.describe_table(TableName="MemoryTable")["Table"]
        self._arn = table["LatestStreamArn"]
        self._seen: set[str] = set()

    def new_records(self) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        description = self._streams.describe_stream(StreamArn=self._arn)["StreamDescription"]
        for shard in description["Shards"]:
            iterator = self._streams.get_shard_iterator(
                StreamArn=self._arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                page = self._streams.get_records(ShardIterator=iterator, Limit=1000)
                records += [dict(r) for r in page["Records"]]
                if not page["Records"]:
                    break
                iterator = page.get("NextShardIterator")
        fresh = [r for r in records if r["dynamodb"]["SequenceNumber"] not in self._seen]
        self._seen |= {r["dynamodb"]["SequenceNumber"] for r in fresh}
        for record in fresh:
            record["eventSourceARN"] = self._arn
        return fresh
