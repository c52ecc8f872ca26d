"""All DynamoDB access, behind one class, so the logic elsewhere reads as what it does.

Items are written with the low-level client (cheaper to create than a resource at
cold start); boto3's own serializer converts to and from attribute values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from botmemory import keys
from botmemory.clock import epoch_seconds
from botmemory.consolidation_commit import (
    MAX_TRANSACTION_ACTIONS,
    CommitRejected,
    ConsolidationCommit,
    Lock,
)
from botmemory.items import (
    episode_key,
    episode_values,
    fact_key,
    fact_values,
    from_item,
    key,
    observation_key,
    observation_values,
    pin_key,
    pin_values,
    state_key,
    to_item,
)
from botmemory.records import Episode, Fact, Observation, Pin, Profile
from botmemory.schema import (
    ACTIVE_FACTS_INDEX,
    BY_ITEM_ID_INDEX,
    BY_USER_INDEX,
    PENDING_INDEX,
    SWEEP_INDEX,
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


@dataclass(frozen=True)
class ReplayRecord:
    """A command's stored answer, kept by Powertools Idempotency against replays."""

    ref: ItemRef
    data: str


class MemoryRepository:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self.table_name = table_name

    @property
    def client(self) -> DynamoDBClient:
        """The DynamoDB client, for Powertools utilities that share the table."""
        return self._client

    # Observations -----------------------------------------------------------------

    def put_observation(self, observation: Observation) -> bool:
        """Store a new observation; False when this exact event was stored before."""
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=to_item(observation_values(observation)),
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def count_pending(self, channel_id: str, up_to: int) -> int:
        """How many observations wait in the channel, counting no further than `up_to`."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=PENDING_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.channel_pk(channel_id)}},
            Select="COUNT",
            Limit=up_to,
        )
        return int(response["Count"])

    def pending_observations(self, channel_id: str, limit: int) -> tuple[list[Observation], bool]:
        """The oldest pending observations, and whether more wait behind them."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=PENDING_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.channel_pk(channel_id)}},
            Limit=limit + 1,
        )
        items = [Observation.model_validate(from_item(i)) for i in response["Items"]]
        return items[:limit], len(items) > limit

    def still_pending(self, channel_id: str, sks: Iterable[str]) -> set[str]:
        """Of these observations, the ones not yet consumed, read strongly consistent.

        The pending index is eventually consistent; this keeps a model call from being
        spent on observations another run has just consumed.
        """
        wanted = list(dict.fromkeys(sks))
        found: set[str] = set()
        pk = keys.channel_pk(channel_id)
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            request: dict[str, Any] = {
                self.table_name: {
                    "Keys": [key(pk, sk) for sk in wanted[start : start + BATCH_GET_LIMIT]],
                    "ConsistentRead": True,
                    "ProjectionExpression": "sk, pending_sk",
                }
            }
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                for item in response["Responses"].get(self.table_name, []):
                    if "pending_sk" in item:
                        found.add(item["sk"]["S"])
                request = response.get("UnprocessedKeys") or {}
        return found

    def recent_observations(self, channel_id: str, limit: int) -> list[Observation]:
        """The newest observations of a channel, newest first."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :obs)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":obs": {"S": keys.OBS_PREFIX},
            },
            ScanIndexForward=False,
            Limit=limit,
        )
        return [Observation.model_validate(from_item(i)) for i in response["Items"]]

    # Channel state: lock, sweep marker, legacy memory --------------------------------

    def acquire_lock(self, channel_id: str, owner: str, now_ms: int, lease_ms: int) -> Lock | None:
        """Take the channel's consolidation lock unless someone holds an unexpired lease.

        Each acquisition increments the fencing token, so a run whose lease expired and
        was taken over can no longer commit.
        """
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=state_key(channel_id),
                UpdateExpression=(
                    "SET lock_owner = :owner, lease_until = :until, "
                    "fence = if_not_exists(fence, :zero) + :one"
                ),
                ConditionExpression="attribute_not_exists(lock_owner) OR lease_until < :now",
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":until": {"N": str(now_ms + lease_ms)},
                    ":now": {"N": str(now_ms)},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                },
                ReturnValues="UPDATED_NEW",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return None
            raise
        return Lock(channel_id, owner, int(response["Attributes"]["fence"]["N"]))

    def release_lock(self, lock: Lock) -> bool:
        """Give the lock back if still ours; False when it was already taken over."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=state_key(lock.channel_id),
                UpdateExpression="REMOVE lock_owner, lease_until",
                ConditionExpression="lock_owner = :owner AND fence = :fence",
                ExpressionAttributeValues={
                    ":owner": {"S": lock.owner},
                    ":fence": {"N": str(lock.fence)},
                },
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def mark_pending_since(self, channel_id: str, since_ms: int) -> None:
        """Note that the channel has observations waiting, for the idle sweep."""
        self._client.update_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            UpdateExpression=(
                "SET sweep_bucket = :bucket, pending_since = if_not_exists(pending_since, :since), "
                "channel_id = :channel"
            ),
            ExpressionAttributeValues={
                ":bucket": {"S": keys.SWEEP_BUCKET},
                ":since": {"N": str(since_ms)},
                ":channel": {"S": channel_id},
            },
        )

    def channels_pending_before(self, before_ms: int, limit: int) -> list[str]:
        """Channels whose oldest waiting observation is older than `before_ms`."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=SWEEP_INDEX,
            KeyConditionExpression="sweep_bucket = :bucket AND pending_since < :before",
            ExpressionAttributeValues={
                ":bucket": {"S": keys.SWEEP_BUCKET},
                ":before": {"N": str(before_ms)},
            },
            Limit=limit,
        )
        found = (keys.channel_id_of(item["pk"]["S"]) for item in response["Items"])
        return [channel_id for channel_id in found if channel_id]

    def clear_pending_since(self, channel_id: str) -> None:
        self._client.update_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            UpdateExpression="REMOVE sweep_bucket, pending_since",
        )

    def legacy_memory(self, channel_id: str) -> str | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            ProjectionExpression="legacy_memory",
        )
        item = response.get("Item")
        return item["legacy_memory"]["S"] if item and "legacy_memory" in item else None

    # Facts --------------------------------------------------------------------------

    def active_facts(self, scope: str, user_id: str, limit: int) -> list[Fact]:
        """A person's most recently updated active facts, newest first."""
        if limit <= 0:
            return []
        response = self._client.query(
            TableName=self.table_name,
            IndexName=ACTIVE_FACTS_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.user_pk(scope, user_id)}},
            ScanIndexForward=False,
            Limit=limit,
        )
        return [Fact.model_validate(from_item(i)) for i in response["Items"]]

    def oldest_active_facts(self, scope: str, user_id: str, limit: int) -> list[Fact]:
        response = self._client.query(
            TableName=self.table_name,
            IndexName=ACTIVE_FACTS_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.user_pk(scope, user_id)}},
            ScanIndexForward=True,
            Limit=limit,
        )
        return [Fact.model_validate(from_item(i)) for i in response["Items"]]

    def all_facts(self, scope: str, user_id: str) -> list[Fact]:
        """Every fact of a person in a scope, superseded included (staff listings, tests)."""
        items = self._query_all(
            {
                "TableName": self.table_name,
                "KeyConditionExpression": "pk = :pk AND begins_with(sk, :fact)",
                "ExpressionAttributeValues": {
                    ":pk": {"S": keys.user_pk(scope, user_id)},
                    ":fact": {"S": keys.FACT_PREFIX},
                },
            }
        )
        return [Fact.model_validate(from_item(i)) for i in items]

    def put_fact(self, fact: Fact) -> None:
        """Write a fact as is (manual and operator facts, seeding)."""
        self._client.put_item(TableName=self.table_name, Item=to_item(fact_values(fact)))

    def fact_by_id(self, fact_id: str) -> Fact | None:
        """A fact by the short id staff type, in whatever scope it is."""
        item = self._item_by_id(fact_id, keys.ItemKind.FACT)
        return Fact.model_validate(item) if item else None

    def delete_facts(self, facts: Iterable[Fact]) -> int:
        return self._delete_keys([fact_key(f) for f in facts])

    # Pins and episodes --------------------------------------------------------------

    def put_pin(self, pin: Pin) -> None:
        self._client.put_item(TableName=self.table_name, Item=to_item(pin_values(pin)))

    def pin_by_id(self, pin_id: str) -> Pin | None:
        """A pin by the short id staff type, in whatever scope it is."""
        item = self._item_by_id(pin_id, keys.ItemKind.PIN)
        return Pin.model_validate(item) if item else None

    def delete_pin(self, pin: Pin) -> None:
        self._client.delete_item(TableName=self.table_name, Key=pin_key(pin))

    def pins(self, scope: str, target: str, limit: int) -> list[Pin]:
        """Pins of one target (`global` or a channel id), oldest first."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": keys.pin_target_prefix(target)},
            },
            Limit=limit,
        )
        return [Pin.model_validate(from_item(i)) for i in response["Items"]]

    def recent_episodes(self, channel_id: str, limit: int) -> list[Episode]:
        """The channel's newest episodes, newest first."""
        if limit <= 0:
            return []
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :ep)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":ep": {"S": keys.EPISODE_PREFIX},
            },
            ScanIndexForward=False,
            Limit=limit,
        )
        return [Episode.model_validate(from_item(i)) for i in response["Items"]]

    # Consolidation commit ------------------------------------------------------------

    def commit_consolidation(self, commit: ConsolidationCommit) -> None:
        """Write facts and the episode, consume the observations and release the lock, atomically.

        Raises CommitRejected when the lock is no longer ours or an observation was
        already consumed: then nothing at all was written.
        """
        try:
            self._transact(commit.actions(self.table_name))
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            reasons = [
                r.get("Code", "")
                for r in exc.response.get("CancellationReasons", [])
                if r.get("Code") not in (None, "", "None")
            ]
            raise CommitRejected(reasons) from exc

    # Helpers ------------------------------------------------------------------------

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

    # Legacy memory (migration) ------------------------------------------------------
    # The earlier bot's one memory string per channel lives on as the STATE item's
    # `legacy_memory` (recall with memory off) and as one episode marked `legacy`
    # (recall with memory on). See botmemory.migrate.

    def legacy_episodes(self, channel_id: str) -> list[Episode]:
        """The channel's episodes migrated from the earlier bot, oldest first.

        Read strongly consistent, so a migration re-run right after a write sees it.
        """
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ep)",
            "FilterExpression": "legacy = :yes",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":ep": {"S": keys.EPISODE_PREFIX},
                ":yes": {"BOOL": True},
            },
            "ConsistentRead": True,
        }
        return [Episode.model_validate(from_item(i)) for i in self._query_all(request)]

    def save_legacy_memory(
        self,
        channel_id: str,
        *,
        text: str | None = None,
        episode: Episode | None = None,
        replaced: Sequence[Episode] = (),
        scope: str | None = None,
    ) -> None:
        """Set the legacy memory string, write the legacy episode and delete the legacy
        episodes it replaces, in one transaction, so a failed run leaves the channel as it was.

        Only `legacy_memory` is SET on the STATE item: the lock and the sweep marker
        stay untouched. `scope` is stored on the episode only when known.
        """
        table = self.table_name
        actions: list[dict[str, Any]] = []
        if text is not None:
            actions.append(
                {
                    "Update": {
                        "TableName": table,
                        "Key": state_key(channel_id),
                        "UpdateExpression": "SET legacy_memory = :text",
                        "ExpressionAttributeValues": {":text": {"S": text}},
                    }
                }
            )
        if episode is not None:
            values = episode_values(episode, scope or "")
            if scope is None:
                del values["scope"]
            values["legacy"] = True
            actions.append(
                {
                    "Put": {
                        "TableName": table,
                        "Item": to_item(values),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        stale = [episode_key(old) for old in replaced]
        room = MAX_TRANSACTION_ACTIONS - len(actions)
        actions += [{"Delete": {"TableName": table, "Key": key}} for key in stale[:room]]
        if actions:
            self._transact(actions)
        if stale[room:]:  # only after a pathological pile-up of legacy episodes
            self._delete_keys(stale[room:])

    # People: opt-outs, lookups and erasure ------------------------------------------
    # Opt-outs are kept as hashes of user ids under one partition: ingest checks them
    # from a cached list, and an erased person who stays opted out leaves no id behind.

    def add_opt_out(self, user_hash: str, now_ms: int) -> None:
        self._client.put_item(
            TableName=self.table_name,
            Item=to_item({"pk": keys.OPT_OUT_PK, "sk": user_hash, "since_ms": now_ms}),
        )

    def remove_opt_out(self, user_hash: str) -> None:
        self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.OPT_OUT_PK, user_hash),
        )

    def opted_out_hashes(self) -> set[str]:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": keys.OPT_OUT_PK}},
            "ProjectionExpression": "sk",
        }
        return {item["sk"]["S"] for item in self._query_all(request)}

    def items_of_user(self, user_id: str) -> list[ItemRef]:
        """Every item that holds this person's id (the by_user index)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": BY_USER_INDEX,
            "KeyConditionExpression": "user_id = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
        }
        return [ItemRef(i["pk"]["S"], i["sk"]["S"]) for i in self._query_all(request)]

    def profile_at(self, ref: ItemRef) -> Profile | None:
        item = self._get(ref)
        return Profile.model_validate(item) if item else None

    def observation_at(self, ref: ItemRef) -> Observation | None:
        item = self._get(ref)
        return Observation.model_validate(item) if item else None

    def fact_at(self, ref: ItemRef) -> Fact | None:
        item = self._get(ref)
        return Fact.model_validate(item) if item else None

    def delete_items(self, refs: Iterable[ItemRef]) -> int:
        return self._delete_keys([key(r.pk, r.sk) for r in refs])

    def replay_records(self) -> Iterator[ReplayRecord]:
        """Every stored command answer (Powertools Idempotency's records), page by page."""
        for item in self._items_under(keys.IDEMPOTENCY_PK):
            yield ReplayRecord(
                ItemRef(keys.IDEMPOTENCY_PK, str(item["sk"])), str(item.get("data", ""))
            )

    def channel_episodes(self, channel_id: str) -> Iterator[Episode]:
        """Every episode of a channel, oldest first, page by page."""
        for item in self._items_under(keys.channel_pk(channel_id), keys.EPISODE_PREFIX):
            yield Episode.model_validate(item)

    def delete_episodes(self, episodes: Iterable[Episode]) -> int:
        return self._delete_keys([episode_key(e) for e in episodes])

    def channel_observations(self, channel_id: str) -> Iterator[Observation]:
        """Every stored observation of a channel, oldest first, page by page."""
        for item in self._items_under(keys.channel_pk(channel_id), keys.OBS_PREFIX):
            yield Observation.model_validate(item)

    def scope_pins(self, scope: str, limit: int) -> list[Pin]:
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": keys.PIN_PREFIX},
            },
            Limit=limit,
        )
        return [Pin.model_validate(from_item(i)) for i in response["Items"]]

    def redact_observation(self, observation: Observation, content: str) -> None:
        """Replace a stored observation's text (erasure takes a name out of it)."""
        self._client.update_item(
            TableName=self.table_name,
            Key=observation_key(observation.channel_id, observation.sk),
            UpdateExpression="SET content = :content",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":content": {"S": content}},
        )


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def ttl_alive(expires_at: int | None, now_ms: int) -> bool:
    """DynamoDB deletes expired items lazily (moto never does): filter them on read."""
    return expires_at is None or expires_at > epoch_seconds(now_ms)
