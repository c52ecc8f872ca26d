"""localrun.fastmoto's items sized once: an item is built as moto builds it, and refused
at moto's limit exactly as moto refuses it, attribute by attribute."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models.dynamo_type import DynamoType, Item

import localrun.fastmoto as fastmoto

KEY = (DynamoType({"S": "P#1"}), DynamoType({"S": "S#1"}))
SHAPES: list[dict[str, Any]] = [
    {},
    {"pk": {"S": "P#1"}, "sk": {"S": "S#1"}, "n": {"N": "12.5"}, "b": {"BOOL": True}},
    {
        "tags": {"SS": ["a", "bb"]},
        "numbers": {"NS": ["1", "22"]},
        "list": {"L": [{"S": "x"}, {"M": {"deep": {"S": "y"}}}, {"NULL": True}]},
        "map": {"M": {"inner": {"M": {"z": {"N": "3"}}}}},
        "blob": {"B": b"\x00\xff"},
        **{f"attribute{n:03d}": {"S": "v" * n} for n in range(200)},
    },
]


def hash_key_table(name: str) -> Any:
    """A client of the running mock, and a table keyed by `pk` alone."""
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return client


def built(init: Any, attrs: dict[str, Any]) -> Any:
    item = Item.__new__(Item)
    try:
        init(item, *KEY, attrs)
    except ItemSizeTooLarge:
        return "refused"
    return item.to_json()


@pytest.mark.parametrize("attrs", SHAPES, ids=["empty", "scalars", "two-hundred"])
def test_an_item_is_built_as_moto_builds_it(attrs: dict[str, Any]) -> None:
    assert built(fastmoto._item_init, attrs) == built(fastmoto.MOTO_ITEM_INIT, attrs) != "refused"


@pytest.mark.parametrize("extra", [-1, 0, 1, 2])
def test_an_item_at_the_limit_is_refused_exactly_when_moto_refuses_it(extra: int) -> None:
    # The limit's edge, reached by the last of several attributes.
    head = {"a": {"S": "x" * 200_000}, "b": {"S": "y" * 100_000}}
    used = sum(len(k) + len(v["S"]) for k, v in head.items())
    attrs = head | {"c": {"S": "z" * (fastmoto.MOTO_ITEM_SIZE_LIMIT - used - 1 + extra)}}

    ours, moto_s = built(fastmoto._item_init, attrs), built(fastmoto.MOTO_ITEM_INIT, attrs)

    assert ours == moto_s
    assert (ours == "refused") == (extra > 0)


def test_a_put_over_the_limit_is_refused_through_the_client() -> None:
    with mock_aws(), fastmoto.fast_dynamodb():
        client = hash_key_table("Sized")
        with pytest.raises(ClientError, match="maximum allowed size"):
            client.put_item(TableName="Sized", Item={"pk": {"S": "p"}, "big": {"S": "x" * 410_000}})
        client.put_item(TableName="Sized", Item={"pk": {"S": "p"}, "fits": {"S": "x" * 1_000}})

        assert client.get_item(TableName="Sized", Key={"pk": {"S": "p"}})["Item"]["fits"]
