"""A server's backfill run (botmemory.catchup.backfill): one item under the guild's
partition (keys.BACKFILL_SK), so one run a server at a time (a conditional put), its
progress counted by the workers, and a cancel they see before every page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from botmemory.storage import keys
from botmemory.storage.items import key
from botmemory.storage.table import Table, error_code

RUNNING = "running"
_COUNTS = frozenset({"channels_done", "messages", "pages", "skipped"})


@dataclass(frozen=True)
class BackfillRun:
    guild_id: str
    run_ms: int  # when it started: its id, and the end of what it imports
    from_ms: int  # the oldest message it imports
    days: int
    cap: int  # messages at most
    channels: int
    status: str  # running, done, capped, cancelled
    channels_done: int = 0
    messages: int = 0
    pages: int = 0
    skipped: int = 0
    started_by: str = ""  # STAFF or ON_JOIN (botmemory.catchup.backfill); names nobody

    @property
    def running(self) -> bool:
        return self.status == RUNNING


def _run_of(guild_id: str, item: dict[str, Any]) -> BackfillRun:
    def number(name: str) -> int:
        return int(item.get(name, {}).get("N", 0))

    return BackfillRun(
        guild_id=guild_id,
        run_ms=number("run_ms"),
        from_ms=number("from_ms"),
        days=number("days"),
        cap=number("cap"),
        channels=number("channels"),
        status=item.get("status", {}).get("S", ""),
        channels_done=number("channels_done"),
        messages=number("messages"),
        pages=number("pages"),
        skipped=number("skipped"),
        started_by=item.get("started_by", {}).get("S", ""),
    )


class BackfillStore(Table):
    def start_backfill(self, run: BackfillRun) -> bool:
        """Start the run unless one is running in the server (False then)."""
        item = {
            **key(keys.guild_pk(run.guild_id), keys.BACKFILL_SK),
            "status": {"S": RUNNING},
            **({"started_by": {"S": run.started_by}} if run.started_by else {}),
            **{
                name: {"N": str(getattr(run, name))}
                for name in ("run_ms", "from_ms", "days", "cap", "channels")
            },
        }
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR #status <> :running",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={":running": {"S": RUNNING}},
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def backfill_run(self, guild_id: str) -> BackfillRun | None:
        item = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.guild_pk(guild_id), keys.BACKFILL_SK),
            ConsistentRead=True,
        ).get("Item")
        return None if item is None else _run_of(guild_id, item)

    def count_backfill(self, guild_id: str, run_ms: int, **counts: int) -> BackfillRun | None:
        """Add to a running run's progress; the run as it stands after, or None when it is
        no longer running (cancelled, finished, or another run)."""
        added = {name: n for name, n in counts.items() if name in _COUNTS}
        expression = "ADD " + ", ".join(f"#{name} :{name}" for name in added) if added else ""
        names = {"#status": "status"} | {f"#{name}": name for name in added}
        values: dict[str, Any] = {f":{name}": {"N": str(n)} for name, n in added.items()}
        values |= {":run": {"N": str(run_ms)}, ":running": {"S": RUNNING}}
        try:
            answer = self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.guild_pk(guild_id), keys.BACKFILL_SK),
                UpdateExpression=expression or "SET run_ms = :run",
                ConditionExpression="run_ms = :run AND #status = :running",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return None
            raise
        return _run_of(guild_id, answer["Attributes"])

    def end_backfill(self, guild_id: str, run_ms: int, status: str) -> bool:
        """Mark a running run done, capped or cancelled; False when it was not running."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.guild_pk(guild_id), keys.BACKFILL_SK),
                UpdateExpression="SET #status = :status",
                ConditionExpression="run_ms = :run AND #status = :running",
                ExpressionAttributeNames={"#status": "status"},
                ExpressionAttributeValues={
                    ":status": {"S": status},
                    ":run": {"N": str(run_ms)},
                    ":running": {"S": RUNNING},
                },
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return False
            raise
        return True
