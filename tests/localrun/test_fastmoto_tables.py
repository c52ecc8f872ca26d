"""localrun.fastmoto's partition queries and narrow transaction backups: every Query answers
exactly as moto's own does (the table's and its indexes', key conditions, order, pages,
filters), and a refused transaction leaves every item as it was, the one it changed in place
included."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.models.table import Table as MotoTable

import localrun.fastmoto as fastmoto

TABLE = "FastMotoTables"


def item(pk: str, sk: str, **more: Any) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **{k: {"S": v} for k, v in more.items()}}


ITEMS = (
    [item("CH#1", f"OBS#{n:04d}", pending=f"OBS#{n:04d}", who=f"u{n % 3}") for n in range(40)]
    + [item("CH#1", f"EP#{n:03d}", who="u1") for n in range(5)]
    + [item("CH#1", "STATE"), item("CH#2", "OBS#0001", pending="OBS#0001", who="u0")]
    + [item("CH#10", "OBS#0002", pending="OBS#0002", who="u2"), item("SC#1", "NAME#a")]
    # The same sort key as CH#1's, for the same person: the table's key orders them.
    + [item("CH#3", "OBS#0003", who="u0"), item("CH#0", "OBS#0003", who="u0")]
)


@pytest.fixture
def client() -> Iterator[Any]:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": name, "AttributeType": "S"}
                for name in ("pk", "sk", "pending", "who")
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "pending",
                    "KeySchema": [
                        {"AttributeName": "pk", "KeyType": "HASH"},
                        {"AttributeName": "pending", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                },
                {
                    "IndexName": "by_who",
                    "KeySchema": [
                        {"AttributeName": "who", "KeyType": "HASH"},
                        {"AttributeName": "sk", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                },
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for each in ITEMS:
            dynamodb.put_item(TableName=TABLE, Item=each)
        yield dynamodb


def queries(client: Any) -> dict[str, Callable[[], Any]]:
    def query(**kwargs: Any) -> Callable[[], Any]:
        def pages() -> list[dict[str, Any]]:
            found, request = [], {"TableName": TABLE, **kwargs}
            while True:
                answer = client.query(**request)
                found.append({k: v for k, v in answer.items() if k != "ResponseMetadata"})
                if "LastEvaluatedKey" not in answer:
                    return found
                request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]

        return pages

    pk = {":pk": {"S": "CH#1"}}
    return {
        "partition": query(KeyConditionExpression="pk = :pk", ExpressionAttributeValues=pk),
        "prefix, newest first, limit": query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={**pk, ":p": {"S": "EP#"}},
            ScanIndexForward=False,
            Limit=2,
        ),
        "between, in pages": query(
            KeyConditionExpression="pk = :pk AND sk BETWEEN :a AND :b",
            ExpressionAttributeValues={**pk, ":a": {"S": "OBS#0005"}, ":b": {"S": "OBS#0030"}},
            Limit=7,
        ),
        "greater, filtered": query(
            KeyConditionExpression="pk = :pk AND sk > :a",
            FilterExpression="who = :w",
            ExpressionAttributeValues={**pk, ":a": {"S": "OBS#0010"}, ":w": {"S": "u2"}},
        ),
        "no such partition": query(
            KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "CH#9"}}
        ),
        "index on pk, in pages": query(
            IndexName="pending",
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues=pk,
            Limit=9,
        ),
        "index on pk, range": query(
            IndexName="pending",
            KeyConditionExpression="pk = :pk AND pending < :x",
            ExpressionAttributeValues={**pk, ":x": {"S": "OBS#0004"}},
            ScanIndexForward=False,
        ),
        "another index": query(
            IndexName="by_who",
            KeyConditionExpression="who = :w AND begins_with(sk, :p)",
            ExpressionAttributeValues={":w": {"S": "u1"}, ":p": {"S": "OBS#"}},
            Limit=4,
        ),
        "another index, in pages": query(
            IndexName="by_who",
            KeyConditionExpression="who = :w",
            ExpressionAttributeValues={":w": {"S": "u0"}},
            Limit=3,
        ),
        "another index, whole": query(
            IndexName="by_who",
            KeyConditionExpression="who = :w",
            ExpressionAttributeValues={":w": {"S": "u2"}},
        ),
        "another index, filtered, in pages": query(
            IndexName="by_who",
            KeyConditionExpression="who = :w",
            FilterExpression="pk <> :ch",
            ExpressionAttributeValues={":w": {"S": "u0"}, ":ch": {"S": "CH#1"}},
            Limit=2,
        ),
        "another index, range, in pages": query(
            IndexName="by_who",
            KeyConditionExpression="who = :w AND sk BETWEEN :a AND :b",
            ExpressionAttributeValues={
                ":w": {"S": "u0"},
                ":a": {"S": "OBS#0003"},
                ":b": {"S": "OBS#0030"},
            },
            Limit=4,
        ),
        "another index, newest first": query(
            IndexName="by_who",
            KeyConditionExpression="who = :w",
            ExpressionAttributeValues={":w": {"S": "u1"}},
            ScanIndexForward=False,
            Limit=5,
        ),
        "another index, nobody": query(
            IndexName="by_who",
            KeyConditionExpression="who = :w",
            ExpressionAttributeValues={":w": {"S": "nobody"}},
            Limit=5,
        ),
        "another index, after a key of no item": lambda: client.query(
            TableName=TABLE,
            IndexName="by_who",
            KeyConditionExpression="who = :w",
            ExpressionAttributeValues={":w": {"S": "u0"}},
            ExclusiveStartKey={
                "who": {"S": "u0"},
                "sk": {"S": "OBS#0003"},
                "pk": {"S": "CH#2"},
            },
            Limit=4,
        )["Items"],
        "scan": lambda: client.scan(TableName=TABLE, Limit=13)["Items"],
    }


def test_every_query_answers_as_moto_s_own(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fast = {name: run() for name, run in queries(client).items()}
    with monkeypatch.context() as own:  # tests/conftest.py makes them fast: moto's own here
        own.setattr(MotoTable, "query", fastmoto.MOTO_QUERY)
        own.setattr(MotoTable, "all_items", fastmoto.MOTO_ALL_ITEMS)
        generic = {name: run() for name, run in queries(client).items()}

    assert fast == generic
    assert len(generic["between, in pages"]) == 4  # 26 items, 7 a page
    assert [i["sk"]["S"] for i in generic["prefix, newest first, limit"][0]["Items"]] == [
        "EP#004",
        "EP#003",
    ]


def test_a_refused_transaction_leaves_every_item_as_it_was(client: Any) -> None:
    before = client.scan(TableName=TABLE)["Items"]
    key = {"pk": {"S": "CH#1"}, "sk": {"S": "OBS#0003"}}
    with pytest.raises(ClientError, match="TransactionCanceled"):
        client.transact_write_items(
            TransactItems=[
                {  # changes an item in place ...
                    "Update": {
                        "TableName": TABLE,
                        "Key": key,
                        "UpdateExpression": "SET who = :x REMOVE pending",
                        "ExpressionAttributeValues": {":x": {"S": "changed"}},
                    }
                },
                {"Put": {"TableName": TABLE, "Item": item("CH#3", "OBS#0001", who="new")}},
                {
                    "Delete": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "SC#1"}, "sk": {"S": "NAME#a"}},
                    }
                },
                {  # ... and is refused by its last action
                    "ConditionCheck": {
                        "TableName": TABLE,
                        "Key": {"pk": {"S": "CH#1"}, "sk": {"S": "STATE"}},
                        "ConditionExpression": "attribute_exists(holder)",
                    }
                },
            ]
        )
    assert client.scan(TableName=TABLE)["Items"] == before

    client.transact_write_items(  # and one that commits writes
        TransactItems=[
            {
                "Update": {
                    "TableName": TABLE,
                    "Key": key,
                    "UpdateExpression": "SET who = :x",
                    "ExpressionAttributeValues": {":x": {"S": "changed"}},
                }
            }
        ]
    )
    assert client.get_item(TableName=TABLE, Key=key)["Item"]["who"] == {"S": "changed"}
