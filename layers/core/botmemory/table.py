"""The table, as the repository's parts reach it: the client, its name, item addresses
(`ItemRef`) and the paging, batching and transaction helpers every part uses.

Items are written with the low-level client (cheaper to create than a resource at
cold start); boto3's own serializer converts to and from attribute values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from botmemory import keys
from botmemory.clock import epoch_seconds
from botmemory.items import (
    from_item,
    key,
)
from botmemory.schema import (
    BY_ITEM_ID_INDEX,
)

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

log = logging.getLogger(__name__)

# DynamoDB takes at most this many keys in one BatchWriteItem and one BatchGetItem.
BATCH_WRITE_LIMIT = 25
BATCH_GET_LIMIT = 100


@dataclass(frozen=True)
class ItemRef:
    """Where an item is, as an index lists it. Callers read only what its key tells (what
    kind of item it is, the channel of a channel's item); the key itself stays here."""

    pk: str
    sk: str

    @property
    def kind(self) -> keys.ItemKind:
        return keys.kind_of(self.sk)

    @property
    def channel_id(self) -> str | None:
        return keys.channel_id_of(self.pk)

    @property
    def item_id(self) -> str:
        """The short id at the end of a fact's or pin's key (what command answers quote)."""
        return self.sk.rsplit("#", 1)[-1]


class Table:
    """The client and the table name, and the helpers the repository's parts share."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self.table_name = table_name

    @property
    def client(self) -> DynamoDBClient:
        """The DynamoDB client, for Powertools utilities that share the table."""
        return self._client

    # Helpers ------------------------------------------------------------------------

    def _items_at(
        self,
        wanted: list[dict[str, Any]],
        projection: str | None = None,
        names: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """The items at these keys that exist, read strongly consistent."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            batch: dict[str, Any] = {
                "Keys": wanted[start : start + BATCH_GET_LIMIT],
                "ConsistentRead": True,
            }
            if projection:
                batch["ProjectionExpression"] = projection
            if names:
                batch["ExpressionAttributeNames"] = names
            request: dict[str, Any] = {self.table_name: batch}
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                found += response["Responses"].get(self.table_name, [])
                request = response.get("UnprocessedKeys") or {}
        return found

    def _get(self, ref: ItemRef) -> dict[str, Any] | None:
        response = self._client.get_item(
            TableName=self.table_name, Key=key(ref.pk, ref.sk), ConsistentRead=True
        )
        return from_item(response["Item"]) if "Item" in response else None

    def _item_by_id(self, item_id: str, kind: keys.ItemKind) -> dict[str, Any] | None:
        """A fact or pin by the short id staff type, when it is of that kind."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=BY_ITEM_ID_INDEX,
            KeyConditionExpression="item_id = :id",
            ExpressionAttributeValues={":id": {"S": item_id}},
            Limit=1,
        )
        if not response["Items"]:
            return None
        found = ItemRef(response["Items"][0]["pk"]["S"], response["Items"][0]["sk"]["S"])
        return self._get(found) if found.kind == kind else None

    def _items_under(self, pk: str, prefix: str = "") -> Iterator[dict[str, Any]]:
        """Every item of a partition (whose sort key starts with `prefix`), page by page."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}},
        }
        if prefix:  # an empty string is not a valid key condition value
            request["KeyConditionExpression"] += " AND begins_with(sk, :prefix)"
            request["ExpressionAttributeValues"][":prefix"] = {"S": prefix}
        for item in self._query_all(request):
            yield from_item(item)

    def _query_all(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every item a query matches, following its pages."""
        while True:
            response = self._client.query(**request)
            yield from response["Items"]
            if "LastEvaluatedKey" not in response:
                return
            request = {**request, "ExclusiveStartKey": response["LastEvaluatedKey"]}

    def _transact(self, actions: list[dict[str, Any]]) -> None:
        # Actions are built as plain dicts; the stubs' TypedDicts describe the same shape.
        self._client.transact_write_items(
            TransactItems=cast("list[TransactWriteItemTypeDef]", actions)
        )

    def _channel_items_at(
        self, channel_id: str, sks: Iterable[str], projection: str | None = None
    ) -> dict[str, dict[str, Any]]:
        """The channel's items with these sort keys that exist, by sort key, read strongly
        consistent."""
        pk = keys.channel_pk(channel_id)
        wanted = [key(pk, sk) for sk in dict.fromkeys(sks)]
        return {item["sk"]["S"]: item for item in self._items_at(wanted, projection)}

    def _delete_keys(self, keys_: list[dict[str, Any]]) -> int:
        for start in range(0, len(keys_), BATCH_WRITE_LIMIT):
            batch = keys_[start : start + BATCH_WRITE_LIMIT]
            request: dict[str, Any] = {
                self.table_name: [{"DeleteRequest": {"Key": k}} for k in batch]
            }
            while request:
                response = self._client.batch_write_item(RequestItems=request)
                request = response.get("UnprocessedItems") or {}
        return len(keys_)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def ttl_alive(expires_at: int | None, now_ms: int) -> bool:
    """DynamoDB deletes expired items lazily (moto never does): filter them on read."""
    return expires_at is None or expires_at > epoch_seconds(now_ms)
