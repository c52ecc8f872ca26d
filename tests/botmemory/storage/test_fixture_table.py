"""The tests' `dynamodb` fixture copies one empty table per worker (tests/conftest.py): the
copy must be the table `create_table` makes, indexes, stream and TTL alike, and empty in
every test however the tests before it filled theirs."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.storage.schema import create_table
from tests.conftest import TABLE

# What differs between two tables made one after the other: when, and the stream's label.
MOMENTS = {"CreationDateTime", "LatestStreamLabel", "LatestStreamArn"}


def described(client: Any) -> dict[str, Any]:
    table = client.describe_table(TableName=TABLE)["Table"]
    ttl = client.describe_time_to_live(TableName=TABLE)["TimeToLiveDescription"]
    return {"table": {k: v for k, v in table.items() if k not in MOMENTS}, "ttl": ttl}


def test_the_copied_table_is_the_created_one(dynamodb: Any) -> None:
    copied = described(dynamodb)
    dynamodb.delete_table(TableName=TABLE)
    create_table(dynamodb, TABLE)
    created = described(dynamodb)

    assert copied == created
    assert copied["ttl"]["TimeToLiveStatus"] == "ENABLED"
    assert copied["table"]["StreamSpecification"]["StreamEnabled"] is True


@pytest.mark.parametrize("round_", [1, 2])
def test_each_test_starts_from_an_empty_table(dynamodb: Any, round_: int) -> None:
    assert dynamodb.scan(TableName=TABLE)["Items"] == []
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": f"P#{round_}"}, "sk": {"S": "S"}})
    assert dynamodb.scan(TableName=TABLE, Select="COUNT")["Count"] == 1
