"""All DynamoDB access, behind one class, so the logic elsewhere reads as what it does.

Items are written with the low-level client (cheaper to create than a resource at
cold start); boto3's own serializer converts to and from attribute values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from botmemory import keys
from botmemory.clock import epoch_seconds
from botmemory.records import Episode, Fact, FactStatus, Observation, Pin
from botmemory.schema import (
    ACTIVE_FACTS_INDEX,
    BY_ITEM_ID_INDEX,
    BY_USER_INDEX,
    PENDING_INDEX,
    SWEEP_INDEX,
)

log = logging.getLogger(__name__)

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()

# DynamoDB refuses a transaction of more than 100 actions.
MAX_TRANSACTION_ACTIONS = 100


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _serializer.serialize(v) for k, v in values.items() if v is not None and v != []}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _plain(_deserializer.deserialize(v)) for k, v in item.items()}


@dataclass(frozen=True)
class Lock:
    channel_id: str
    owner: str
    fence: int


@dataclass
class ConsolidationCommit:
    """Everything one consolidation writes, applied atomically."""

    lock: Lock
    consumed: Sequence[Observation]
    facts: Sequence[Fact] = ()
    superseded: Sequence[Fact] = ()
    episode: Episode | None = None
    dropped_episodes: Sequence[str] = ()  # episode sort keys beyond the cap
    more_pending_since_ms: int | None = None  # oldest observation left pending, if any
    now_ms: int = 0
    # People seen in the batch: (user id, display name); their profiles learn the channel.
    people: Sequence[tuple[str, str]] = ()
    # Observations of people who opted out: deleted instead of consumed.
    discarded: Sequence[Observation] = ()

    def action_count(self) -> int:
        return (
            len(self.consumed)
            + len(self.discarded)
            + len(self.people)
            + len(self.facts)
            + len(self.superseded)
            + (1 if self.episode else 0)
            + len(self.dropped_episodes)
            + 1
        )


class CommitRejected(Exception):
    """The transaction's conditions failed: the lock was lost or an input was already consumed."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(", ".join(reasons) or "transaction cancelled")
        self.reasons = reasons


class MemoryRepository:
    def __init__(self, client: Any, table_name: str) -> None:
        self._client = client
        self.table_name = table_name

    @property
    def client(self) -> Any:
        """The DynamoDB client, for Powertools utilities that share the table."""
        return self._client

    # Observations -----------------------------------------------------------------

    def put_observation(self, observation: Observation) -> bool:
        """Store a new observation; False when this exact event was stored before."""
        values = observation.model_dump(mode="json")
        values.update(
            pk=keys.channel_pk(observation.channel_id),
            sk=observation.sk,
            pending_sk=observation.sk,
            user_id=observation.author_id,
        )
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=to_item(values),
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
        for start in range(0, len(wanted), 100):
            request: dict[str, Any] = {
                self.table_name: {
                    "Keys": [
                        {"pk": {"S": pk}, "sk": {"S": sk}} for sk in wanted[start : start + 100]
                    ],
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
                Key=self._state_key(channel_id),
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
                Key=self._state_key(lock.channel_id),
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
            Key=self._state_key(channel_id),
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
        return [item["pk"]["S"].removeprefix("CH#") for item in response["Items"]]

    def clear_pending_since(self, channel_id: str) -> None:
        self._client.update_item(
            TableName=self.table_name,
            Key=self._state_key(channel_id),
            UpdateExpression="REMOVE sweep_bucket, pending_since",
        )

    def legacy_memory(self, channel_id: str) -> str | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=self._state_key(channel_id),
            ProjectionExpression="legacy_memory",
        )
        item = response.get("Item")
        return item["legacy_memory"]["S"] if item and "legacy_memory" in item else None

    def channel_state(self, channel_id: str) -> dict[str, Any]:
        response = self._client.get_item(
            TableName=self.table_name, Key=self._state_key(channel_id), ConsistentRead=True
        )
        return from_item(response.get("Item", {}))

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
        self._client.put_item(TableName=self.table_name, Item=to_item(_fact_values(fact)))

    def delete_facts(self, facts: Iterable[Fact]) -> int:
        keys_ = [self._fact_key(f) for f in facts]
        return self._delete_keys(keys_)

    # Pins and episodes --------------------------------------------------------------

    def put_pin(self, pin: Pin) -> None:
        values = pin.model_dump(mode="json")
        # user_id puts the pin in the by_user index: erasure finds pins made in a person's name.
        values.update(
            pk=keys.scope_pk(pin.scope),
            sk=keys.pin_sk(pin.target, pin.pin_id),
            item_id=pin.pin_id,
            user_id=pin.author_id,
        )
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def pins(self, scope: str, target: str, limit: int) -> list[Pin]:
        """Pins of one target (`global` or a channel id), oldest first."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.scope_pk(scope)},
                ":prefix": {"S": f"{keys.PIN_PREFIX}{target}#"},
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

    def put_episode(self, episode: Episode, scope: str) -> None:
        self._client.put_item(
            TableName=self.table_name, Item=to_item(_episode_values(episode, scope))
        )

    # Consolidation commit ------------------------------------------------------------

    def commit_consolidation(self, commit: ConsolidationCommit, scope: str) -> None:
        """Write facts and the episode, consume the observations and release the lock, atomically.

        Raises CommitRejected when the lock is no longer ours or an observation was
        already consumed: then nothing at all was written.
        """
        if commit.action_count() > MAX_TRANSACTION_ACTIONS:
            raise ValueError(f"commit of {commit.action_count()} actions exceeds one transaction")
        table = self.table_name
        actions: list[dict[str, Any]] = []
        for fact in commit.facts:
            actions.append({"Update": {"TableName": table, **_fact_upsert(fact)}})
        for fact in commit.superseded:
            actions.append(
                {
                    "Update": {
                        "TableName": table,
                        "Key": self._fact_key(fact),
                        "UpdateExpression": "SET #status = :superseded, updated_ms = :now REMOVE fact_rank",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeNames": {"#status": "status"},
                        "ExpressionAttributeValues": {
                            ":superseded": {"S": FactStatus.SUPERSEDED.value},
                            ":now": {"N": str(commit.now_ms)},
                        },
                    }
                }
            )
        if commit.episode:
            actions.append(
                {
                    "Put": {
                        "TableName": table,
                        "Item": to_item(_episode_values(commit.episode, scope)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        channel_pk = keys.channel_pk(commit.lock.channel_id)
        for sk in commit.dropped_episodes:
            actions.append(
                {"Delete": {"TableName": table, "Key": {"pk": {"S": channel_pk}, "sk": {"S": sk}}}}
            )
        for observation in commit.consumed:
            actions.append(
                {
                    "Update": {
                        "TableName": table,
                        "Key": {"pk": {"S": channel_pk}, "sk": {"S": observation.sk}},
                        "UpdateExpression": "REMOVE pending_sk",
                        "ConditionExpression": "attribute_exists(pending_sk)",
                    }
                }
            )
        for observation in commit.discarded:
            actions.append(
                {
                    "Delete": {
                        "TableName": table,
                        "Key": {"pk": {"S": channel_pk}, "sk": {"S": observation.sk}},
                        "ConditionExpression": "attribute_exists(pending_sk)",
                    }
                }
            )
        for user_id, name in commit.people:
            actions.append(
                {"Update": {"TableName": table, **_profile_seen(scope, user_id, name, commit)}}
            )
        actions.append({"Update": {"TableName": table, **self._release_and_record(commit)}})
        try:
            self._client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            reasons = [
                r.get("Code", "")
                for r in exc.response.get("CancellationReasons", [])
                if r.get("Code") not in (None, "", "None")
            ]
            raise CommitRejected(reasons) from exc

    def _release_and_record(self, commit: ConsolidationCommit) -> dict[str, Any]:
        values: dict[str, Any] = {
            ":owner": {"S": commit.lock.owner},
            ":fence": {"N": str(commit.lock.fence)},
            ":now": {"N": str(commit.now_ms)},
            ":one": {"N": "1"},
            ":zero": {"N": "0"},
        }
        update = "SET last_consolidated_ms = :now, consolidations = if_not_exists(consolidations, :zero) + :one"
        if commit.more_pending_since_ms is None:
            update += " REMOVE lock_owner, lease_until, sweep_bucket, pending_since"
        else:
            update += (
                ", sweep_bucket = :bucket, pending_since = :since REMOVE lock_owner, lease_until"
            )
            values[":bucket"] = {"S": keys.SWEEP_BUCKET}
            values[":since"] = {"N": str(commit.more_pending_since_ms)}
        return {
            "Key": self._state_key(commit.lock.channel_id),
            "UpdateExpression": update,
            "ConditionExpression": "lock_owner = :owner AND fence = :fence",
            "ExpressionAttributeValues": values,
        }

    # Helpers ------------------------------------------------------------------------

    def _query_all(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every item a query matches, following its pages."""
        while True:
            response = self._client.query(**request)
            yield from response["Items"]
            if "LastEvaluatedKey" not in response:
                return
            request = {**request, "ExclusiveStartKey": response["LastEvaluatedKey"]}

    def _delete_keys(self, keys_: list[dict[str, Any]]) -> int:
        for start in range(0, len(keys_), 25):
            request: dict[str, Any] = {
                self.table_name: [{"DeleteRequest": {"Key": k}} for k in keys_[start : start + 25]]
            }
            while request:
                response = self._client.batch_write_item(RequestItems=request)
                request = response.get("UnprocessedItems") or {}
        return len(keys_)

    def batch_put(self, items: Iterable[dict[str, Any]]) -> None:
        """Plain batched writes of already-shaped items (seeding tests and the bench)."""
        pending = [{"PutRequest": {"Item": to_item(i)}} for i in items]
        for start in range(0, len(pending), 25):
            request: dict[str, Any] = {self.table_name: pending[start : start + 25]}
            while request:
                response = self._client.batch_write_item(RequestItems=request)
                request = response.get("UnprocessedItems") or {}

    @staticmethod
    def _state_key(channel_id: str) -> dict[str, Any]:
        return {"pk": {"S": keys.channel_pk(channel_id)}, "sk": {"S": keys.STATE_SK}}

    @staticmethod
    def _fact_key(fact: Fact) -> dict[str, Any]:
        return {
            "pk": {"S": keys.user_pk(fact.scope, fact.user_id)},
            "sk": {"S": keys.fact_sk(fact.fact_id)},
        }

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
                        "Key": self._state_key(channel_id),
                        "UpdateExpression": "SET legacy_memory = :text",
                        "ExpressionAttributeValues": {":text": {"S": text}},
                    }
                }
            )
        if episode is not None:
            values = _episode_values(episode, scope or "")
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
        stale = [
            {"pk": {"S": keys.channel_pk(channel_id)}, "sk": {"S": old.sk}} for old in replaced
        ]
        room = MAX_TRANSACTION_ACTIONS - len(actions)
        actions += [{"Delete": {"TableName": table, "Key": key}} for key in stale[:room]]
        if actions:
            self._client.transact_write_items(TransactItems=actions)
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
            Key={"pk": {"S": keys.OPT_OUT_PK}, "sk": {"S": user_hash}},
        )

    def opted_out_hashes(self) -> set[str]:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": keys.OPT_OUT_PK}},
            "ProjectionExpression": "sk",
        }
        return {item["sk"]["S"] for item in self._query_all(request)}

    def keys_of_user(self, user_id: str) -> list[dict[str, Any]]:
        """The key of every item that holds this person's id (the by_user index)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "IndexName": BY_USER_INDEX,
            "KeyConditionExpression": "user_id = :user",
            "ExpressionAttributeValues": {":user": {"S": user_id}},
        }
        return [{"pk": i["pk"], "sk": i["sk"]} for i in self._query_all(request)]

    def get(self, key: dict[str, Any]) -> dict[str, Any] | None:
        response = self._client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True)
        return from_item(response["Item"]) if "Item" in response else None

    def item_by_id(self, item_id: str) -> dict[str, Any] | None:
        """A fact or pin by the short id staff type."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=BY_ITEM_ID_INDEX,
            KeyConditionExpression="item_id = :id",
            ExpressionAttributeValues={":id": {"S": item_id}},
            Limit=1,
        )
        if not response["Items"]:
            return None
        found = response["Items"][0]
        return self.get({"pk": found["pk"], "sk": found["sk"]})

    def channel_items(self, channel_id: str, prefix: str) -> Iterator[dict[str, Any]]:
        """Every item of a channel whose sort key starts with `prefix`, page by page."""
        return self.items_under(keys.channel_pk(channel_id), prefix)

    def items_under(self, pk: str, prefix: str = "") -> Iterator[dict[str, Any]]:
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

    def redact_observation(self, channel_id: str, sk: str, content: str) -> None:
        self._client.update_item(
            TableName=self.table_name,
            Key={"pk": {"S": keys.channel_pk(channel_id)}, "sk": {"S": sk}},
            UpdateExpression="SET content = :content",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":content": {"S": content}},
        )

    def delete_keys(self, keys_: list[dict[str, Any]]) -> int:
        return self._delete_keys(keys_)


def _profile_seen(
    scope: str, user_id: str, name: str, commit: ConsolidationCommit
) -> dict[str, Any]:
    """A person's profile in a scope: names, first and last seen, and the channels they
    took part in (erasure finds their episodes through it)."""
    return {
        "Key": {"pk": {"S": keys.user_pk(scope, user_id)}, "sk": {"S": keys.PROFILE_SK}},
        "UpdateExpression": (
            "SET user_id = :user, #scope = :scope, display_name = :name, "
            "first_seen_ms = if_not_exists(first_seen_ms, :now), last_seen_ms = :now "
            "ADD channels :channel"
        ),
        "ExpressionAttributeNames": {"#scope": "scope"},
        "ExpressionAttributeValues": {
            ":user": {"S": user_id},
            ":scope": {"S": scope},
            ":name": {"S": name},
            ":now": {"N": str(commit.now_ms)},
            ":channel": {"SS": [commit.lock.channel_id]},
        },
    }


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _fact_values(fact: Fact) -> dict[str, Any]:
    values = fact.model_dump(mode="json")
    values.update(
        pk=keys.user_pk(fact.scope, fact.user_id),
        sk=keys.fact_sk(fact.fact_id),
        item_id=fact.fact_id,
    )
    if fact.status == FactStatus.ACTIVE:
        values["fact_rank"] = keys.fact_rank(fact.updated_ms, fact.fact_id)
    return values


def _fact_upsert(fact: Fact) -> dict[str, Any]:
    """Create a fact, or refresh the same fact restated: one more hit, newer timestamps."""
    values = {
        ":user": fact.user_id,
        ":scope": fact.scope,
        ":id": fact.fact_id,
        ":text": fact.text,
        ":kind": fact.kind.value,
        ":source": fact.source.value,
        ":active": FactStatus.ACTIVE.value,
        ":provenance": fact.provenance,
        ":created": fact.created_ms,
        ":updated": fact.updated_ms,
        ":rank": keys.fact_rank(fact.updated_ms, fact.fact_id),
        ":expires": fact.expires_at,
        ":zero": 0,
        ":one": 1,
    }
    return {
        "Key": {
            "pk": {"S": keys.user_pk(fact.scope, fact.user_id)},
            "sk": {"S": keys.fact_sk(fact.fact_id)},
        },
        "UpdateExpression": (
            "SET user_id = :user, #scope = :scope, fact_id = :id, item_id = :id, #text = :text, "
            "#kind = :kind, #source = if_not_exists(#source, :source), #status = :active, "
            "provenance = :provenance, created_ms = if_not_exists(created_ms, :created), "
            "updated_ms = :updated, hits = if_not_exists(hits, :zero) + :one, "
            "fact_rank = :rank, expires_at = :expires"
        ),
        "ExpressionAttributeNames": {
            "#scope": "scope",
            "#text": "text",
            "#kind": "kind",
            "#source": "source",
            "#status": "status",
        },
        "ExpressionAttributeValues": {k: _serializer.serialize(v) for k, v in values.items()},
    }


def _episode_values(episode: Episode, scope: str) -> dict[str, Any]:
    values = episode.model_dump(mode="json")
    values.update(pk=keys.channel_pk(episode.channel_id), sk=episode.sk, scope=scope)
    return values


def ttl_alive(expires_at: int | None, now_ms: int) -> bool:
    """DynamoDB deletes expired items lazily (moto never does): filter them on read."""
    return expires_at is None or expires_at > epoch_seconds(now_ms)
