"""A server's retention in the table (botmemory.people.retention): what staff chose (one item
of the guild's controls, `CTRL#RETENTION`, read with them), the pointer that hands a
shortened retention to the background job (the `RETAIN` partition, by guild id, found by
key), and the job's page of a partition with the expiry of what outlives the new retention
brought in. Part of `MemoryRepository` (see repository.py), which callers use.

The items name nobody: days by kind, the staff member who set them (for the log), and the
job's checkpoint (partition keys and a position).
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from botmemory.storage import keys
from botmemory.storage.items import from_item, key, to_item
from botmemory.storage.table import Table, error_code

# What a page of the job reads of an item: its keys, its expiry, its time (whichever its kind
# has), and the people it names (their partitions are the server's too).
_PAGE_FIELDS = (
    "pk, sk, expires_at, at_ms, updated_ms, created_ms, quarantined_ms, "
    "author_id, user_id, user_ids, participant_ids"
)


class RetentionStore(Table):
    def set_server_retention(
        self, guild_id: str, days: dict[str, int], *, staff_id: str, now_ms: int
    ) -> None:
        """What staff chose (kind -> days; empty: the deployment's everywhere)."""
        ref = key(keys.guild_pk(guild_id), keys.RETENTION_SK)
        if not days:
            self._client.delete_item(TableName=self.table_name, Key=ref)
            return
        values = {"days": days, "staff_id": staff_id, "updated_ms": now_ms}
        self._client.put_item(TableName=self.table_name, Item={**ref, **to_item(values)})

    def set_leavers_days(self, guild_id: str, days: int, *, staff_id: str, now_ms: int) -> None:
        """Members who leave are erased `days` after (0: never)."""
        ref = key(keys.guild_pk(guild_id), keys.LEAVERS_SK)
        if days <= 0:
            self._client.delete_item(TableName=self.table_name, Key=ref)
            return
        values = {"days": days, "staff_id": staff_id, "updated_ms": now_ms}
        self._client.put_item(TableName=self.table_name, Item={**ref, **to_item(values)})

    def schedule_retention_run(self, guild_id: str, start_ms: int) -> None:
        """The job brings this server's stored items in line from `start_ms` on (a run under
        way starts again: the checkpoint goes)."""
        values = {"pk": keys.RETAIN_PK, "sk": guild_id, "start_ms": start_ms}
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def retention_runs(self, limit: int) -> list[tuple[str, int, dict[str, Any] | None]]:
        """Servers waiting for the job: guild id, when it may start, its checkpoint."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.RETAIN_PK}},
            ConsistentRead=True,
            Limit=limit,
        )
        runs = []
        for item in map(from_item, response["Items"]):
            checkpoint = item.get("checkpoint")
            runs.append(
                (
                    str(item["sk"]),
                    int(item.get("start_ms", 0)),
                    json.loads(checkpoint) if isinstance(checkpoint, str) else None,
                )
            )
        return runs

    def keep_retention_checkpoint(
        self, guild_id: str, start_ms: int, checkpoint: dict[str, Any]
    ) -> None:
        """Where the run stopped; nothing when staff changed the retention meanwhile (the
        run starts again)."""
        self._conditional(
            "update_item",
            guild_id,
            start_ms,
            UpdateExpression="SET #checkpoint = :checkpoint",
            ExpressionAttributeNames={"#checkpoint": "checkpoint"},
            extra_values={":checkpoint": {"S": json.dumps(checkpoint)}},
        )

    def finish_retention_run(self, guild_id: str, start_ms: int) -> None:
        """The run is done; the pointer stays when staff changed the retention meanwhile."""
        self._conditional("delete_item", guild_id, start_ms)

    def _conditional(
        self,
        action: str,
        guild_id: str,
        start_ms: int,
        extra_values: dict[str, Any] | None = None,
        **request: Any,
    ) -> None:
        try:
            getattr(self._client, action)(
                TableName=self.table_name,
                Key=key(keys.RETAIN_PK, guild_id),
                ConditionExpression="start_ms = :start",
                ExpressionAttributeValues={
                    ":start": {"N": str(start_ms)},
                    **(extra_values or {}),
                },
                **request,
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def expiry_page(
        self, pk: str, after_sk: str | None, limit: int
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Up to `limit` items of a partition after `after_sk` (what the job reads of each),
        and where the next page starts (None: the partition is done)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": pk}},
            "ProjectionExpression": _PAGE_FIELDS,
            "Limit": limit,
        }
        if after_sk is not None:
            request["ExclusiveStartKey"] = key(pk, after_sk)
        response = self._client.query(**request)
        last = response.get("LastEvaluatedKey")
        return [from_item(i) for i in response["Items"]], last["sk"]["S"] if last else None

    def shorten_expiry(self, pk: str, sk: str, expires_at: int) -> bool:
        """An item expires at `expires_at` (epoch seconds) if it would outlive it; False when
        it is gone or expires sooner already."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(pk, sk),
                UpdateExpression="SET expires_at = :new",
                ConditionExpression="attribute_exists(pk) AND "
                "(attribute_not_exists(expires_at) OR expires_at > :new)",
                ExpressionAttributeValues={":new": {"N": str(expires_at)}},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True
