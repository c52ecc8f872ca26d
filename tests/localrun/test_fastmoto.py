"""localrun.fastmoto's plain JSON reads: a client parses every read exactly as it parses
moto's own serializer's output, for every attribute type, pagination and projection."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.responses import DynamoResult

import localrun.fastmoto as fastmoto

TABLE = "FastMotoCheck"
ITEMS: list[dict[str, Any]] = [
    {
        "pk": {"S": "P#1"},
        "sk": {"S": f"S#{n:03d}"},
        "text": {"S": f'line {n}: quotes " and \\ and émoji 🎨'},
        "count": {"N": str(n)},
        "ratio": {"N": "0.125"},
        "tags": {"SS": ["a", "b"]},
        "numbers": {"NS": ["1", "2.5"]},
        "list": {"L": [{"S": "x"}, {"N": "1"}, {"NULL": True}, {"BOOL": False}]},
        "map": {"M": {"inner": {"M": {"deep": {"S": "y"}}}, "empty": {"L": []}}},
        "flag": {"BOOL": True},
        "nothing": {"NULL": True},
    }
    for n in range(7)
] + [
    # Binary values reach the generic serializer as bytes: it base64-encodes them.
    {
        "pk": {"S": "P#3"},
        "sk": {"S": "S#000"},
        "blob": {"B": b"\x00\xffbytes"},
        "blobs": {"BS": [b"x", b"y"]},
    }
]


def reads(client: Any) -> dict[str, Callable[[], dict[str, Any]]]:
    key = {"pk": {"S": "P#1"}, "sk": {"S": "S#003"}}
    return {
        "get": lambda: client.get_item(TableName=TABLE, Key=key, ConsistentRead=True),
        "get missing": lambda: client.get_item(
            TableName=TABLE, Key={"pk": {"S": "P#1"}, "sk": {"S": "none"}}
        ),
        "batch get": lambda: client.batch_get_item(
            RequestItems={
                TABLE: {"Keys": [key, {"pk": {"S": "P#9"}, "sk": {"S": "S#000"}}]},
            },
            ReturnConsumedCapacity="TOTAL",
        ),
        "query page": lambda: client.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :s)",
            ExpressionAttributeValues={":pk": {"S": "P#1"}, ":s": {"S": "S#"}},
            ScanIndexForward=False,
            Limit=3,
        ),
        "query projected": lambda: client.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "P#1"}},
            ProjectionExpression="sk, #m.inner, flag",
            ExpressionAttributeNames={"#m": "map"},
        ),
        "get binary": lambda: client.get_item(
            TableName=TABLE, Key={"pk": {"S": "P#3"}, "sk": {"S": "S#000"}}
        ),
        "query empty": lambda: client.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": "nobody"}},
        ),
        "scan filtered": lambda: client.scan(
            TableName=TABLE,
            FilterExpression="#c > :two",
            ExpressionAttributeNames={"#c": "count"},
            ExpressionAttributeValues={":two": {"N": "2"}},
        ),
    }


def without_metadata(response: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in response.items() if k != "ResponseMetadata"}


@pytest.fixture
def client() -> Any:
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(
            TableName=TABLE,
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for item in ITEMS:
            dynamodb.put_item(TableName=TABLE, Item=item)
        yield dynamodb


def count_plain_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The start of each response fastmoto writes as plain JSON, from now on."""
    dumped: list[str] = []
    real_dumps = json.dumps

    def counting_dumps(value: Any, *args: Any, **kwargs: Any) -> str:
        dumped.append(str(value)[:40])
        return real_dumps(value, *args, **kwargs)

    monkeypatch.setattr(fastmoto, "json", SimpleNamespace(dumps=counting_dumps))
    return dumped


def test_every_read_parses_the_same_as_through_moto_s_serializer(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tests/conftest.py makes every test's reads plain: this one first reads through moto's.
    monkeypatch.setattr(DynamoResult, "execute_result", fastmoto.MOTO_EXECUTE_RESULT)
    generic = {name: without_metadata(read()) for name, read in reads(client).items()}
    dumped = count_plain_writes(monkeypatch)
    with fastmoto.plain_json_reads():
        fast = {name: without_metadata(read()) for name, read in reads(client).items()}

    assert fast == generic
    assert generic["query page"]["LastEvaluatedKey"] == {"pk": {"S": "P#1"}, "sk": {"S": "S#004"}}
    assert "Item" not in generic["get missing"]
    assert fast["get binary"]["Item"]["blob"] == {"B": b"\x00\xffbytes"}
    # The fast path was taken by every read but the one holding binary values.
    assert len(dumped) == len(generic) - 1


def test_writes_and_errors_keep_moto_s_serializer(client: Any) -> None:
    with fastmoto.plain_json_reads():
        client.put_item(TableName=TABLE, Item={"pk": {"S": "P#2"}, "sk": {"S": "S#000"}})
        with pytest.raises(client.exceptions.ResourceNotFoundException):
            client.get_item(TableName="NoSuchTable", Key={"pk": {"S": "x"}, "sk": {"S": "y"}})
        with pytest.raises(client.exceptions.ConditionalCheckFailedException):
            client.put_item(
                TableName=TABLE,
                Item={"pk": {"S": "P#2"}, "sk": {"S": "S#000"}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        described = client.describe_table(TableName=TABLE)["Table"]

    assert described["TableName"] == TABLE
    assert hasattr(described["CreationDateTime"], "year")  # a datetime, as moto writes it


def stream_pages(dynamodb: Any) -> list[dict[str, Any]]:
    """Every GetRecords page of the table's stream, from its start."""
    arn = dynamodb.describe_table(TableName="MemoryTable")["Table"]["LatestStreamArn"]
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    pages: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = without_metadata(streams.get_records(ShardIterator=iterator, Limit=3))
            pages.append(page)
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return pages


def test_stream_records_parse_the_same_as_through_moto_s_serializer(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The table of tests/conftest.py: its stream keeps new and old images.
    for item in ITEMS[:4]:
        dynamodb.put_item(TableName="MemoryTable", Item=item)
    dynamodb.put_item(TableName="MemoryTable", Item=ITEMS[0] | {"count": {"N": "99"}})
    dynamodb.delete_item(TableName="MemoryTable", Key={"pk": ITEMS[1]["pk"], "sk": ITEMS[1]["sk"]})
    dynamodb.put_item(TableName="MemoryTable", Item=ITEMS[-1])  # binary: moto's way
    monkeypatch.setattr(fastmoto.DynamoDBStreamsHandler, "get_records", fastmoto.MOTO_GET_RECORDS)
    generic = stream_pages(dynamodb)
    dumped = count_plain_writes(monkeypatch)
    with fastmoto.plain_json_reads():
        fast = [
            {k: v for k, v in page.items() if k != "NextShardIterator"}
            for page in stream_pages(dynamodb)
        ]

    assert fast == [{k: v for k, v in p.items() if k != "NextShardIterator"} for p in generic]
    records = [r for page in generic for r in page["Records"]]
    assert [r["eventName"] for r in records] == ["INSERT"] * 4 + ["MODIFY", "REMOVE", "INSERT"]
    assert records[4]["dynamodb"]["OldImage"]["count"] == {"N": "0"}
    assert hasattr(records[0]["dynamodb"]["ApproximateCreationDateTime"], "year")
    # Pages of three: the first two plain, the third holds the binary item, then the end.
    assert len(dumped) == len(generic) - 1
