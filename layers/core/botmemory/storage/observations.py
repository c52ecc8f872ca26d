"""What the table keeps of a channel's observations and its consolidation state: the
observations (pending, consumed, deleted), the lock, the failure record and the sweep's list.
Part of `MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, cast

from botocore.exceptions import ClientError

from botmemory.records import Attempts, Observation, ObservationKind
from botmemory.snowflake import snowflake_ms
from botmemory.storage import keys
from botmemory.storage.commit import Lock, LockRefused
from botmemory.storage.items import (
    attempts_of,
    attempts_update,
    from_item,
    key,
    observation_values,
    state_key,
    to_item,
)
from botmemory.storage.schema import PENDING_INDEX, SWEEP_INDEX
from botmemory.storage.table import Table, error_code


@dataclass(frozen=True)
class PendingCount:
    """What waits in a channel: its observations, of them the bot's answers, and when the
    oldest of them was said (its key's time; None when nothing waits)."""

    observations: int
    answers: int
    oldest_ms: int | None = None


class ObservationStore(Table):
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
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def count_pending(self, channel_id: str, up_to: int) -> int:
        """How many observations wait in the channel, counting no further than `up_to`."""
        return self.pending_count(channel_id, up_to).observations

    def pending_count(self, channel_id: str, up_to: int) -> PendingCount:
        """How many observations wait in the channel (no further than `up_to`), how many of
        them are the bot's answers, and when the oldest was said: one Query of the pending
        index (oldest first), reading only each item's kind and key (the read costs what a
        count costs: DynamoDB bills the items read, not the attributes)."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=PENDING_INDEX,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.channel_pk(channel_id)}},
            ProjectionExpression="#kind, pending_sk",
            ExpressionAttributeNames={"#kind": "kind"},
            Limit=up_to,
        )
        items = response.get("Items", [])
        answers = sum(
            1 for i in items if i.get("kind", {}).get("S") == ObservationKind.ANSWER.value
        )
        first = items[0].get("pending_sk", {}).get("S", "") if items else ""
        parts = keys.observation_parts(first) if first else None
        return PendingCount(
            observations=int(response["Count"]),
            answers=answers,
            oldest_ms=parts[0] if parts else None,
        )

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
        wanted = {delete_sk(m): m for m in message_ids}
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

    def messages_still_held(self, wanted: dict[str, list[str]]) -> dict[str, list[Observation]]:
        """Per channel, its observations at these sort keys that the table still holds and
        whose message was not deleted, as stored now (redactions included), in the keys'
        order: strongly consistent, one BatchGetItem per 100 keys, as for search passages."""
        if not wanted:
            return {}
        sources = {
            channel_id: [(keys.channel_pk(channel_id), sk) for sk in dict.fromkeys(sks)]
            for channel_id, sks in wanted.items()
        }
        at: set[tuple[str, str]] = set()
        for channel_sources in sources.values():
            at.update(channel_sources)
            at.update(deletion_keys(channel_sources))
        found: dict[tuple[str, str], Observation] = {}
        for item in self._items_at([key(pk, sk) for pk, sk in sorted(at)]):
            plain = from_item(item)
            if keys.kind_of(plain["sk"]) == keys.ItemKind.OBSERVATION:
                found[(plain["pk"], plain["sk"])] = Observation.model_validate(plain)
        return {
            channel_id: [found[k] for k in channel_sources if k in found and not deleted(k, found)]
            for channel_id, channel_sources in sources.items()
        }

    def mark_deleted(self, bulk: Observation) -> None:
        """One delete mark per message of a bulk delete, so that a message arriving after
        the bulk delete was consolidated is still found deleted by key."""
        for message_id in bulk.message_ids:
            mark = bulk.model_copy(
                update={
                    "sk": delete_sk(message_id),
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
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

    def recent_observations(self, channel_id: str, limit: int) -> list[Observation]:
        """The newest observations of a channel, newest first."""
        items = self._newest_under(keys.channel_pk(channel_id), keys.OBS_PREFIX, limit)
        return [Observation.model_validate(i) for i in items]

    # Channel state: lock, sweep marker ----------------------------------------------

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
            if error_code(exc) == "ConditionalCheckFailedException":
                held = cast("dict[str, Any]", exc.response).get("Item") or {}
                attempts = attempts_of(from_item(held))
                retry_at = attempts.retry_at_ms if attempts else None
                return LockRefused(retry_at if retry_at and retry_at > now_ms else None)
            raise
        state = from_item(response["Attributes"])
        return Lock(
            channel_id,
            owner,
            int(state["fence"]),
            attempts_of(state),
            candidates=bool(state.get("candidates_waiting")),
            people_due=str(state["people_due"]) if state.get("people_due") else None,
        )

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
            if error_code(exc) == "ConditionalCheckFailedException":
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
            if error_code(exc) == "ConditionalCheckFailedException":
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
            if error_code(exc) != "ConditionalCheckFailedException":
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
        for channel_id, _since in self.channels_due_since(before_ms, page_size):
            yield channel_id

    def channels_due_since(self, before_ms: int, page_size: int) -> Iterator[tuple[str, int]]:
        """As `channels_due`, each channel with its place on the list (pending_since, ms)."""
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
                yield channel_id, int(item["pending_since"]["N"])

    def clear_pending_since(self, channel_id: str) -> None:
        self._client.update_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            UpdateExpression="REMOVE sweep_bucket, pending_since",
        )


def delete_sk(message_id: str) -> str:
    """Where the delete of a message is recorded (its observation's partition, its time)."""
    return keys.observation_sk(snowflake_ms(message_id), ObservationKind.DELETE, message_id)


def deletion_keys(sources: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Where the deletes of the messages at these observation keys (pk, sk) would be
    recorded."""
    found = ((pk, keys.message_of(sk)) for pk, sk in sources)
    return [(pk, delete_sk(message)) for pk, message in found if message]


def deleted(source: tuple[str, str], found: Container[tuple[str, str]]) -> bool:
    """Whether the message of the observation at `source` was deleted: its delete is among
    the keys `found` (read with `deletion_keys`). A message whose delete was observed counts
    as gone, whether or not that delete was consolidated yet."""
    message = keys.message_of(source[1])
    return bool(message) and (source[0], delete_sk(message or "")) in found
