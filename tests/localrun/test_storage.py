"""localrun.storage's two ways of seeding the table: `put_in_moto`, straight into moto's
in-process table, leaves what `put_items` (BatchWriteItem requests) leaves, items, indexes
and stream alike, and refuses what moto refuses."""

from __future__ import annotations

from typing import Any

import pytest
from moto.dynamodb.exceptions import MockValidationException

from botmemory.clock import ManualClock
from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from botmemory.storage.items import observation_values
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.schema import PENDING_INDEX
from localrun import gateway as gw
from localrun.storage import StreamTail, put_in_moto, put_items
from tests.conftest import TABLE


def observations(dynamodb: Any, clock: ManualClock) -> list[dict[str, Any]]:
    """30 observations (pending) of two channels, as the recorder stores them."""
    services = build_services(Settings(table_name=TABLE), dynamodb=dynamodb, clock=clock)
    return [
        observation_values(
            services.recorder.parse(
                gw.message(gw.ALICE, f"line {n}", 1_700_000_000_000 + n, channel=channel)
            )
        )
        for n in range(15)
        for channel in (gw.CHANNEL, "1300000000000000002")
    ]


def seeded(
    dynamodb: Any, tail: StreamTail, seed: Any, items: list[dict[str, Any]]
) -> tuple[Any, Any, list[Any]]:
    """The table's items, its pending index and the stream's new records after seeding."""
    seed(MemoryRepository(dynamodb, TABLE), items)
    stored = sorted(dynamodb.scan(TableName=TABLE)["Items"], key=lambda i: i["sk"]["S"])
    pending = dynamodb.scan(TableName=TABLE, IndexName=PENDING_INDEX, Select="COUNT")["Count"]
    records = [(r["eventName"], r["dynamodb"]["NewImage"]) for r in tail.new_records()]
    return stored, pending, sorted(records, key=lambda r: r[1]["sk"]["S"])


def test_put_in_moto_leaves_the_table_put_items_leaves(dynamodb: Any, clock: ManualClock) -> None:
    items = observations(dynamodb, clock)
    tail = StreamTail(dynamodb)
    in_moto = seeded(dynamodb, tail, put_in_moto, items)
    for item in in_moto[0]:
        dynamodb.delete_item(TableName=TABLE, Key={"pk": item["pk"], "sk": item["sk"]})
    assert len(tail.new_records()) == 30  # the deletes' records
    through_requests = seeded(dynamodb, tail, put_items, items)

    assert len(in_moto[0]) == 30 and in_moto[1] == 30 and len(in_moto[2]) == 30
    assert in_moto == through_requests


def test_put_in_moto_refuses_an_item_without_its_sort_key(dynamodb: Any) -> None:
    with pytest.raises(MockValidationException, match="Missing the key sk"):
        put_in_moto(MemoryRepository(dynamodb, TABLE), [{"pk": "CH#1"}])
    assert dynamodb.scan(TableName=TABLE)["Count"] == 0


def test_put_in_moto_needs_the_mock_in_this_process() -> None:
    import boto3

    client = boto3.client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url="http://127.0.0.1:1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    with pytest.raises(RuntimeError, match="run it under mock_aws"):
        put_in_moto(MemoryRepository(client, TABLE), [{"pk": "CH#1", "sk": "OBS#1"}])
