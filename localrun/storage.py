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


def put_in_moto(repository: MemoryRepository, items: Iterable[dict[str, Any]]) -> None:
    """`put_items` straight into moto's in-process table (under `mock_aws`): what moto does
    for each item of a BatchWriteItem (keys, types and sizes checked, indexes and the stream
    kept), without botocore serializing and moto parsing 25 items a request. For seeding
    thousands of items (100,000 observations: some 20 s this way, 45 s as requests); a test
    of writing itself writes through the API."""
    from moto.core.models import DEFAULT_ACCOUNT_ID, botocore_stubber
    from moto.dynamodb.models import dynamodb_backends

    if not botocore_stubber.enabled:
        raise RuntimeError("put_in_moto writes to moto in this process: run it under mock_aws")
    backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][repository.client.meta.region_name]
    for values in items:
        backend.put_item(repository.table_name, to_item(values))


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
