"""All DynamoDB access, behind one class, so the logic elsewhere reads as what it does.

Items are written with the low-level client (cheaper to create than a resource at
cold start); boto3's own serializer converts to and from attribute values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from botmemory import keys
from botmemory.attempts import Attempts
from botmemory.clock import epoch_seconds
from botmemory.consolidation_commit import (
    MAX_TRANSACTION_ACTIONS,
    CommitRejected,
    ConsolidationCommit,
    Lock,
    LockRefused,
)
from botmemory.items import (
    attempts_of,
    attempts_update,
    attribute,
    episode_key,
    episode_values,
    fact_key,
    fact_values,
    forgotten_values,
    from_item,
    key,
    named_values,
    observation_key,
    observation_values,
    pin_key,
    pin_values,
    state_key,
    to_item,
)
from botmemory.records import (
    Episode,
    Fact,
    Forgotten,
    Named,
    Observation,
    ObservationKind,
    Pin,
    Profile,
    Quarantine,
)
from botmemory.schema import (
    ACTIVE_FACTS_INDEX,
    BY_ITEM_ID_INDEX,
    BY_USER_INDEX,
    PENDING_INDEX,
    SWEEP_INDEX,
)
from botmemory.snowflake import snowflake_ms
from botmemory.text import normalized

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
        found = self._channel_items_at(channel_id, sks, "sk, pending_sk")
        return {sk for sk, item in found.items() if "pending_sk" in item}

    # Deleted messages: a message's observation and its delete carry the message's own
    # snowflake time, so both are found by key from the message id alone.

    def deleted_messages(self, channel_id: str, message_ids: Iterable[str]) -> set[str]:
        """Of these messages, the ones whose delete was observed, consumed or not."""
        wanted = {_delete_sk(m): m for m in message_ids}
        return {wanted[sk] for sk in self._channel_items_at(channel_id, wanted, "sk")}

    def message_observations(
        self, channel_id: str, message_ids: Iterable[str]
    ) -> list[Observation]:
        """The stored observations of these messages (their creation, not edits)."""
        sks = (
            keys.observation_sk(snowflake_ms(m), ObservationKind.MESSAGE, m) for m in message_ids
        )
        found = self._channel_items_at(channel_id, sks)
        return [Observation.model_validate(from_item(item)) for item in found.values()]

    def mark_deleted(self, bulk: Observation) -> None:
        """One delete mark per message of a bulk delete, so that a message arriving after
        the bulk delete was consolidated is still found deleted by key."""
        for message_id in bulk.message_ids:
            mark = bulk.model_copy(
                update={
                    "sk": _delete_sk(message_id),
                    "kind": ObservationKind.DELETE,
                    "at_ms": snowflake_ms(message_id),
                    "message_id": message_id,
                    "message_ids": [],
                }
            )
            try:
                self._client.put_item(
                    TableName=self.table_name,
                    Item=to_item(observation_values(mark, pending=False)),
                    ConditionExpression="attribute_not_exists(pk)",  # a delete of its own stays
                )
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise

    def retire_evidence(self, fact: Fact, provenance: list[str]) -> None:
        """Keep only this evidence of a fact; a fact left with none is deleted."""
        if not provenance:
            self._client.delete_item(TableName=self.table_name, Key=fact_key(fact))
            return
        self._client.update_item(
            TableName=self.table_name,
            Key=fact_key(fact),
            UpdateExpression="SET provenance = :provenance",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":provenance": attribute(provenance)},
        )

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

    def acquire_lock(
        self, channel_id: str, owner: str, now_ms: int, lease_ms: int
    ) -> Lock | LockRefused:
        """Take the channel's consolidation lock unless someone holds an unexpired lease or
        the channel backs off after a failure (its next try is still ahead).

        Each acquisition increments the fencing token, so a run whose lease expired and
        was taken over can no longer commit. The lock carries the channel's failure record.
        """
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=state_key(channel_id),
                UpdateExpression=(
                    "SET lock_owner = :owner, lease_until = :until, "
                    "fence = if_not_exists(fence, :zero) + :one"
                ),
                ConditionExpression=(
                    "(attribute_not_exists(lock_owner) OR lease_until < :now) "
                    "AND (attribute_not_exists(retry_at) OR retry_at <= :now)"
                ),
                ExpressionAttributeValues={
                    ":owner": {"S": owner},
                    ":until": {"N": str(now_ms + lease_ms)},
                    ":now": {"N": str(now_ms)},
                    ":zero": {"N": "0"},
                    ":one": {"N": "1"},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                held = cast("dict[str, Any]", exc.response).get("Item") or {}
                attempts = attempts_of(from_item(held))
                retry_at = attempts.retry_at_ms if attempts else None
                return LockRefused(retry_at if retry_at and retry_at > now_ms else None)
            raise
        state = from_item(response["Attributes"])
        return Lock(channel_id, owner, int(state["fence"]), attempts_of(state))

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

    def record_failure(self, lock: Lock, attempts: Attempts, sweep_since_ms: int) -> bool:
        """Release the lock after a failed round, keeping the failure record and moving the
        channel's place on the sweep's list to `sweep_since_ms`. False when the lock was
        already taken over (then nothing is written)."""
        sets, removes, values = attempts_update(attempts)
        values.update(
            {
                ":owner": {"S": lock.owner},
                ":fence": {"N": str(lock.fence)},
                ":bucket": {"S": keys.SWEEP_BUCKET},
                ":since": {"N": str(sweep_since_ms)},
                ":channel": {"S": lock.channel_id},
            }
        )
        sets += ["sweep_bucket = :bucket", "pending_since = :since", "channel_id = :channel"]
        removes = ["lock_owner", "lease_until", *removes]
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=state_key(lock.channel_id),
                UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}",
                ConditionExpression="lock_owner = :owner AND fence = :fence",
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def reschedule_sweep(self, channel_id: str, since_ms: int) -> None:
        """Move a channel that is on the sweep's list to a later place (it backs off)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=state_key(channel_id),
                UpdateExpression="SET pending_since = :since",
                ConditionExpression="attribute_exists(sweep_bucket)",
                ExpressionAttributeValues={":since": {"N": str(since_ms)}},
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise

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
        return list(islice(self.channels_due(before_ms, limit), limit))

    def channels_due(self, before_ms: int, page_size: int) -> Iterator[str]:
        """Every channel on the sweep's list due before `before_ms`, longest waiting first,
        read page by page as the caller goes on."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": SWEEP_INDEX,
            "KeyConditionExpression": "sweep_bucket = :bucket AND pending_since < :before",
            "ExpressionAttributeValues": {
                ":bucket": {"S": keys.SWEEP_BUCKET},
                ":before": {"N": str(before_ms)},
            },
            "Limit": page_size,
        }
        for item in self._query_all(request):
            channel_id = keys.channel_id_of(item["pk"]["S"])
            if channel_id:
                yield channel_id

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

    def quarantined(self, channel_id: str, limit: int = 25) -> list[Quarantine]:
        """The channel's quarantined batches (consumed without facts after failing even
        alone), newest first, for staff. TTL deletes them lazily: filter with `ttl_alive`."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":prefix": {"S": keys.QUARANTINE_PREFIX},
            },
            ScanIndexForward=False,
            Limit=limit,
        )
        return [Quarantine.model_validate(from_item(i)) for i in response["Items"]]

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

    # Erasure wins every race: what consolidation reads and writes for it -------------

    def marks(
        self, opt_out_hashes: Iterable[str], erased_hashes: Iterable[str], now_ms: int
    ) -> tuple[set[str], set[str]]:
        """Of these person hashes, the ones with an OPTOUT item and the ones with a live ERASED
        marker, read strongly consistent (one BatchGetItem per 100 keys)."""
        wanted = [key(keys.OPT_OUT_PK, h) for h in dict.fromkeys(opt_out_hashes)]
        wanted += [key(keys.ERASED_PK, h) for h in dict.fromkeys(erased_hashes)]
        opted: set[str] = set()
        erased: set[str] = set()
        for item in self._items_at(wanted, "pk, sk, expires_at"):
            plain = from_item(item)
            if plain["pk"] == keys.OPT_OUT_PK:
                opted.add(plain["sk"])
            elif ttl_alive(plain.get("expires_at"), now_ms):
                erased.add(plain["sk"])
        return opted, erased

    def forgotten_times(
        self, facts: Iterable[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], int]:
        """Of these (scope, user id, fact id), the ones forgotten, and when; strongly
        consistent, one BatchGetItem per 100."""
        wanted = [key(keys.user_pk(s, u), keys.forgotten_sk(f)) for s, u, f in dict.fromkeys(facts)]
        found: dict[tuple[str, str, str], int] = {}
        for item in self._items_at(
            wanted, "#scope, user_id, fact_id, forgotten_ms", {"#scope": "scope"}
        ):
            plain = from_item(item)
            found[(plain["scope"], plain["user_id"], plain["fact_id"])] = int(plain["forgotten_ms"])
        return found

    def forget_facts(self, facts: Sequence[Fact], now_ms: int, expires_at: int) -> int:
        """Delete these facts and leave a tombstone for each, so that consolidation never
        brings one back from words said before now: both in one transaction (up to 50 facts
        per transaction). Returns how many facts were deleted."""
        unique = list({(f.scope, f.user_id, f.fact_id): f for f in facts}.values())
        per_transaction = MAX_TRANSACTION_ACTIONS // 2
        for start in range(0, len(unique), per_transaction):
            actions: list[dict[str, Any]] = []
            for fact in unique[start : start + per_transaction]:
                tombstone = Forgotten(
                    scope=fact.scope,
                    user_id=fact.user_id,
                    fact_id=fact.fact_id,
                    forgotten_ms=now_ms,
                    expires_at=expires_at,
                )
                actions.append({"Delete": {"TableName": self.table_name, "Key": fact_key(fact)}})
                actions.append(
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": to_item(forgotten_values(tombstone)),
                        }
                    }
                )
            self._transact(actions)
        return len(unique)

    def name_registry(self, scope: str, limit: int) -> dict[str, list[str]]:
        """The scope's name registry, at most `limit` names: normalized name -> the members
        seen using it. Eventually consistent, projected, page by page."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": keys.NAME_PREFIX},
            },
            "ProjectionExpression": "sk, user_ids",
        }
        registry: dict[str, list[str]] = {}
        for item in self._query_all(request):
            plain = from_item(item)
            registry[str(plain["sk"]).removeprefix(keys.NAME_PREFIX)] = list(
                plain.get("user_ids", [])
            )
            if len(registry) >= limit:
                break
        return registry

    def put_named(self, pointers: Iterable[Named]) -> int:
        """Named pointers that did not fit a consolidation's transaction (idempotent)."""
        items = [to_item(named_values(n)) for n in pointers]
        for start in range(0, len(items), BATCH_WRITE_LIMIT):
            request: dict[str, Any] = {
                self.table_name: [
                    {"PutRequest": {"Item": i}} for i in items[start : start + BATCH_WRITE_LIMIT]
                ]
            }
            while request:
                response = self._client.batch_write_item(RequestItems=request)
                request = response.get("UnprocessedItems") or {}
        return len(items)

    # Helpers ------------------------------------------------------------------------

    def _items_at(
        self,
        wanted: list[dict[str, Any]],
        projection: str,
        names: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """The items at these keys that exist, read strongly consistent."""
        found: list[dict[str, Any]] = []
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            batch: dict[str, Any] = {
                "Keys": wanted[start : start + BATCH_GET_LIMIT],
                "ConsistentRead": True,
                "ProjectionExpression": projection,
            }
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
        wanted = list(dict.fromkeys(sks))
        found: dict[str, dict[str, Any]] = {}
        pk = keys.channel_pk(channel_id)
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            batch: dict[str, Any] = {
                "Keys": [key(pk, sk) for sk in wanted[start : start + BATCH_GET_LIMIT]],
                "ConsistentRead": True,
            }
            if projection:
                batch["ProjectionExpression"] = projection
            request: dict[str, Any] = {self.table_name: batch}
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                for item in response["Responses"].get(self.table_name, []):
                    found[item["sk"]["S"]] = item
                request = response.get("UnprocessedKeys") or {}
        return found

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

    # Erasure: paged listings, pointers, the name registry, the in-progress marker --------

    def mark_erasing(self, user_hash: str, now_ms: int, expires_at: int) -> None:
        """Write or refresh the marker that makes consolidation refuse to commit anything of
        this person while an erasure runs (keys.ERASED_PK, TTL `expires_at`)."""
        self._client.update_item(
            TableName=self.table_name,
            Key=key(keys.ERASED_PK, user_hash),
            UpdateExpression="SET since_ms = if_not_exists(since_ms, :now), expires_at = :exp",
            ExpressionAttributeValues={
                ":now": {"N": str(now_ms)},
                ":exp": {"N": str(expires_at)},
            },
        )

    def user_items_page(
        self,
        user_id: str,
        limit: int,
        start: dict[str, Any] | None = None,
        kind: keys.ItemKind | None = None,
    ) -> tuple[list[ItemRef], dict[str, Any] | None]:
        """One page of the items that hold this person's id (the by_user index), and where
        the next page starts (None after the last). The start is plain JSON: a caller may
        keep it in a checkpoint."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": BY_USER_INDEX,
            "KeyConditionExpression": "user_id = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
            "Limit": limit,
        }
        if kind is not None:  # only items of one kind: their sort keys share a prefix
            request["KeyConditionExpression"] += " AND begins_with(sk, :prefix)"
            request["ExpressionAttributeValues"][":prefix"] = {"S": _USER_KIND_PREFIX[kind]}
        if start:
            request["ExclusiveStartKey"] = start
        response = self._client.query(**request)
        refs = [ItemRef(i["pk"]["S"], i["sk"]["S"]) for i in response["Items"]]
        return refs, cast("dict[str, Any] | None", response.get("LastEvaluatedKey"))

    def observation_heads(self, refs: Iterable[ItemRef]) -> list[dict[str, Any]]:
        """Channel, scope and author name of these observations (plain values), batched."""
        wanted = list(dict.fromkeys(refs))
        found: list[dict[str, Any]] = []
        for start in range(0, len(wanted), BATCH_GET_LIMIT):
            batch: dict[str, Any] = {
                "Keys": [key(r.pk, r.sk) for r in wanted[start : start + BATCH_GET_LIMIT]],
                "ProjectionExpression": "channel_id, #scope, author_name",
                "ExpressionAttributeNames": {"#scope": "scope"},
            }
            request: dict[str, Any] = {self.table_name: batch}
            while request:
                response = self._client.batch_get_item(RequestItems=request)
                found += [from_item(i) for i in response["Responses"].get(self.table_name, [])]
                request = response.get("UnprocessedKeys") or {}
        return found

    def delete_if_present(self, ref: ItemRef) -> bool:
        """Delete one item; whether it was there."""
        response = self._client.delete_item(
            TableName=self.table_name, Key=key(ref.pk, ref.sk), ReturnValues="ALL_OLD"
        )
        return "Attributes" in response

    def named_at(self, ref: ItemRef) -> Named | None:
        item = self._get(ref)
        return Named.model_validate(item) if item else None

    def target_of(self, named: Named) -> ItemRef:
        """The channel item a Named pointer points at."""
        return ItemRef(keys.channel_pk(named.channel_id), named.target_sk)

    def users_with_name(self, scope: str, name: str) -> list[str]:
        """Every member of the scope seen using this display name (the name registry)."""
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.scope_pk(scope), keys.name_sk(normalized(name))),
            ProjectionExpression="user_ids",
        )
        return list(from_item(response.get("Item", {})).get("user_ids", []))

    def drop_from_name(self, scope: str, name: str, user_id: str) -> None:
        """Take a person out of a name's registry entry; an entry left with nobody goes."""
        entry = key(keys.scope_pk(scope), keys.name_sk(normalized(name)))
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=entry,
                UpdateExpression="DELETE user_ids :user",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":user": {"SS": [user_id]}},
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if _code(exc) == "ConditionalCheckFailedException":
                return
            raise
        if "user_ids" not in response.get("Attributes", {}):
            try:
                self._client.delete_item(
                    TableName=self.table_name,
                    Key=entry,
                    ConditionExpression="attribute_not_exists(user_ids)",
                )
            except ClientError as exc:
                if _code(exc) != "ConditionalCheckFailedException":
                    raise

    def redact_observation(self, observation: Observation, content: str) -> None:
        """Replace a stored observation's text (erasure takes a name out of it)."""
        self._client.update_item(
            TableName=self.table_name,
            Key=observation_key(observation.channel_id, observation.sk),
            UpdateExpression="SET content = :content",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":content": {"S": content}},
        )


# The person's items of one kind, as the by_user index lists them (sort key prefixes).
_USER_KIND_PREFIX = {
    keys.ItemKind.PROFILE: keys.PROFILE_SK,
    keys.ItemKind.OBSERVATION: keys.OBS_PREFIX,
    keys.ItemKind.FACT: keys.FACT_PREFIX,
    keys.ItemKind.NAMED: keys.NAMED_PREFIX,
}


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _delete_sk(message_id: str) -> str:
    return keys.observation_sk(snowflake_ms(message_id), ObservationKind.DELETE, message_id)


def ttl_alive(expires_at: int | None, now_ms: int) -> bool:
    """DynamoDB deletes expired items lazily (moto never does): filter them on read."""
    return expires_at is None or expires_at > epoch_seconds(now_ms)
