"""The table, as the repository's parts reach it: the client, its name, item addresses
(`ItemRef`) and the paging, batching and transaction helpers every part uses.

Items are written with the low-level client (cheaper to create than a resource at
cold start); boto3's own serializer converts to and from attribute values.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

from botocore.exceptions import ClientError

from botmemory.storage import keys
from botmemory.storage.items import from_item, key
from botmemory.storage.schema import BY_ITEM_ID_INDEX

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

log = logging.getLogger(__name__)

# DynamoDB takes at most this many keys in one BatchWriteItem and one BatchGetItem.
BATCH_WRITE_LIMIT = 25
BATCH_GET_LIMIT = 100

Sleep = Callable[[float], None]


class UnprocessedItemsError(RuntimeError):
    """DynamoDB still left part of a batch unprocessed after every allowed attempt.

    Raised, never swallowed: the caller's own retry (a stream record's, an asynchronous
    invoke's, the next consolidation round's) repeats the whole call, and every batch
    operation here is idempotent (puts of whole items, deletes, reads).
    """

    def __init__(self, operation: str, table_name: str, left: int, attempts: int) -> None:
        self.operation = operation
        self.left = left
        self.attempts = attempts
        super().__init__(
            f"{operation} on table {table_name!r}: {left} requests still unprocessed "
            f"after {attempts} attempts"
        )


@dataclass(frozen=True)
class Backoff:
    """Waits between the attempts of a batch that came back partly unprocessed (DynamoDB's
    advice: back off exponentially, or the retry is throttled again). The defaults wait
    0.05, 0.1, 0.2 ... seconds, at most 1 s each, some 3.5 s in all over 8 attempts."""

    first_seconds: float = 0.05
    cap_seconds: float = 1.0
    max_attempts: int = 8

    def wait(self, retry: int) -> float:
        """Seconds before retry number `retry` (0 for the first): between half and all of
        the doubled ceiling. The jitter keeps concurrent functions from retrying in
        lockstep; the half kept fixed makes every wait at least the one before."""
        ceiling: float = min(self.cap_seconds, self.first_seconds * 2**retry)
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # nosec B311 # retry jitter, not a secret


UNPROCESSED_BACKOFF = Backoff()


def _requests_in(request: dict[str, Any]) -> int:
    """How many items a RequestItems map asks for (puts and deletes, or keys to read)."""
    return sum(
        len(value.get("Keys", [])) if isinstance(value, dict) else len(value)
        for value in request.values()
    )


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
    def server(self) -> str | None:
        """The server (a guild id, or `dm`) of an item of a scope's or a member's partition
        in a scope; None for a channel's item (its channel tells) and any other."""
        if not self.pk.startswith(keys.SCOPE_PREFIX):
            return None
        scope = self.pk.removeprefix(keys.SCOPE_PREFIX).split("#", 1)[0]
        return keys.server_scope_of(scope) or None

    @property
    def item_id(self) -> str:
        """The short id at the end of a fact's or pin's key (what command answers quote)."""
        return self.sk.rsplit("#", 1)[-1]


class Table:
    """The client and the table name, and the helpers the repository's parts share."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        *,
        sleep: Sleep = time.sleep,
        backoff: Backoff = UNPROCESSED_BACKOFF,
    ) -> None:
        self._client = client
        self.table_name = table_name
        self._sleep = sleep  # tests record the waits instead of sleeping
        self._backoff = backoff

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
        *,
        consistent: bool = True,
    ) -> list[dict[str, Any]]:
        """The items at these keys that exist, read strongly consistent unless told."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            batch: dict[str, Any] = {
                "Keys": wanted[start : start + BATCH_GET_LIMIT],
                "ConsistentRead": consistent,
            }
            if projection:
                batch["ProjectionExpression"] = projection
            if names:
                batch["ExpressionAttributeNames"] = names
            for response in self._until_processed("BatchGetItem", {self.table_name: batch}):
                found += response.get("Responses", {}).get(self.table_name, [])
        return found

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        """Puts and deletes (`{"PutRequest": ...}`, `{"DeleteRequest": ...}`), 25 at a time,
        each batch until DynamoDB has processed all of it."""
        for start in range(0, len(requests), BATCH_WRITE_LIMIT):
            batch = requests[start : start + BATCH_WRITE_LIMIT]
            for _ in self._until_processed("BatchWriteItem", {self.table_name: batch}):
                pass

    def _until_processed(
        self, operation: Literal["BatchGetItem", "BatchWriteItem"], request: dict[str, Any]
    ) -> Iterator[dict[str, Any]]:
        """Send a batch, then what DynamoDB left unprocessed (throttling, size limits), with
        `Backoff` waits between the attempts; yields each answer. Raises
        UnprocessedItemsError when something is still left after the last attempt."""
        leftover_key = "UnprocessedKeys" if operation == "BatchGetItem" else "UnprocessedItems"
        for attempt in range(self._backoff.max_attempts):
            if attempt:
                self._sleep(self._backoff.wait(attempt - 1))
            response: dict[str, Any]
            if operation == "BatchGetItem":
                response = cast("dict[str, Any]", self._client.batch_get_item(RequestItems=request))
            else:
                response = cast(
                    "dict[str, Any]", self._client.batch_write_item(RequestItems=request)
                )
            yield response
            request = response.get(leftover_key) or {}
            if not request:
                return
            log.info(
                "%s left %d requests unprocessed (attempt %d)",
                operation,
                _requests_in(request),
                attempt + 1,
            )
        raise UnprocessedItemsError(
            operation, self.table_name, _requests_in(request), self._backoff.max_attempts
        )

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

    def _newest_under(self, pk: str, prefix: str, limit: int) -> list[dict[str, Any]]:
        """A partition's newest `limit` items whose sort key starts with `prefix` (sort keys
        that carry their time), newest first, as plain values: one Query."""
        if limit <= 0:
            return []
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":prefix": {"S": prefix}},
            ScanIndexForward=False,
            Limit=limit,
        )
        return [from_item(item) for item in response["Items"]]

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
        self._batch_write([{"DeleteRequest": {"Key": k}} for k in keys_])
        return len(keys_)


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
