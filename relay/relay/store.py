"""The relay's shared state in the main stack's table: shard leases with their sessions,
the IDENTIFY counters, the pinned shard count. Every item lives under one partition,
`RELAY`, so the task role can be limited to it (relay/template.yaml).

All writes are conditional, so tasks racing for a lease or a counter never both win:
DynamoDB applies one and refuses the other (ConditionalCheckFailedException).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

log = logging.getLogger(__name__)

PARTITION = "RELAY"
SHARD_COUNT_SK = "SHARDS"
DAY_SK = "IDENTIFY#DAY"
BUCKET_PREFIX = "IDENTIFY#BUCKET#"
SHARD_PREFIX = "SHARD#"
# A gap a shard could not receive (a session Discord refused): kept for catching up.
GAP_PREFIX = "GAP#"
GAP_DAYS = 14
_REFUSED = "ConditionalCheckFailedException"


def shard_sk(shard_id: int) -> str:
    return f"{SHARD_PREFIX}{shard_id:05d}"


def bucket_sk(bucket: int) -> str:
    return f"{BUCKET_PREFIX}{bucket:04d}"


def _refused(error: ClientError) -> bool:
    return bool(error.response.get("Error", {}).get("Code") == _REFUSED)


@dataclass(frozen=True)
class SavedSession:
    """What a RESUME needs, and when the last event arrived (the start of a gap if the
    session cannot be resumed). `shard_count` is the count it was started with: a session
    of another count cannot be resumed."""

    session_id: str
    seq: int | None
    resume_url: str
    shard_count: int
    last_event_ms: int


class Store:
    """Conditional reads and writes of the relay's items; time from `clock` (epoch seconds)."""

    def __init__(self, client: Any, table: str, clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._table = table
        self.clock = clock

    def _key(self, sk: str) -> dict[str, Any]:
        return {"pk": {"S": PARTITION}, "sk": {"S": sk}}

    def _get(self, sk: str) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self._client.get_item(
            TableName=self._table, Key=self._key(sk), ConsistentRead=True
        ).get("Item")
        return item

    def _update(
        self, sk: str, expression: str, condition: str | None, values: dict[str, Any]
    ) -> bool:
        """One UpdateItem, conditional unless `condition` is None; False when refused."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "Key": self._key(sk),
            "UpdateExpression": expression,
            "ExpressionAttributeValues": values,
        }
        if condition is not None:
            request["ConditionExpression"] = condition
        try:
            self._client.update_item(**request)
        except ClientError as error:
            if _refused(error):
                return False
            raise
        return True

    # The shard count, pinned by the first task so that every task agrees on it.

    def pin_shard_count(self, count: int) -> int:
        """The pinned count: `count` if none was pinned yet, else the one already there."""
        if self._update(
            SHARD_COUNT_SK,
            "SET shard_count = :n",
            "attribute_not_exists(shard_count)",
            {":n": {"N": str(count)}},
        ):
            return count
        item = self._get(SHARD_COUNT_SK) or {}
        return int(item.get("shard_count", {}).get("N", count))

    def set_shard_count(self, count: int) -> None:
        """The operator chose a count (SHARD_COUNT): it replaces the pinned one."""
        self._update(SHARD_COUNT_SK, "SET shard_count = :n", None, {":n": {"N": str(count)}})

    # Leases: one item per shard, held by one task until `lease_until`.

    def acquire(self, shard_id: int, owner: str, seconds: float) -> bool:
        now = self.clock()
        return self._update(
            shard_sk(shard_id),
            "SET lease_owner = :me, lease_until = :until",
            "attribute_not_exists(lease_until) OR lease_until < :now OR lease_owner = :me",
            {
                ":me": {"S": owner},
                ":until": {"N": f"{now + seconds:.3f}"},
                ":now": {"N": f"{now:.3f}"},
            },
        )

    def renew(
        self, shard_id: int, owner: str, seconds: float, session: SavedSession | None
    ) -> bool:
        """Extend a lease this owner holds, saving the session with it; False if lost. A
        lease another task took and let go at once (its claim of a range failed halfway)
        is free again: the holder takes it back rather than losing it."""
        now = self.clock()
        values: dict[str, Any] = {
            ":me": {"S": owner},
            ":until": {"N": f"{now + seconds:.3f}"},
            ":now": {"N": f"{now:.3f}"},
        }
        expression = "SET lease_owner = :me, lease_until = :until"
        if session is not None:
            expression += _session_set(values, session)
        condition = "lease_owner = :me OR lease_until < :now"
        return self._update(shard_sk(shard_id), expression, condition, values)

    def save(
        self, shard_id: int, owner: str, session: SavedSession, *, release: bool = False
    ) -> bool:
        """Save the session if this owner holds the lease; `release` lets the lease go in
        the same write (the handover)."""
        values: dict[str, Any] = {":me": {"S": owner}}
        expression = "SET" + _session_set(values, session).removeprefix(",")
        if release:
            values[":gone"] = {"N": "0"}
            expression += ", lease_until = :gone"
        return self._update(shard_sk(shard_id), expression, "lease_owner = :me", values)

    def forget_session(self, shard_id: int, owner: str) -> bool:
        return self._update(
            shard_sk(shard_id),
            "REMOVE session_id, seq, resume_url",
            "lease_owner = :me",
            {":me": {"S": owner}},
        )

    def release(self, shard_id: int, owner: str) -> bool:
        """Let the lease go now (the session stays for the next holder to RESUME)."""
        return self._update(
            shard_sk(shard_id),
            "SET lease_until = :gone",
            "lease_owner = :me",
            {":me": {"S": owner}, ":gone": {"N": "0"}},
        )

    def holds(self, shard_id: int, owner: str) -> bool:
        """Whether `owner` holds the shard's lease now (checked before every reconnect)."""
        item = self._get(shard_sk(shard_id)) or {}
        until = float(item.get("lease_until", {}).get("N", 0))
        return bool(item.get("lease_owner", {}).get("S") == owner and until > self.clock())

    def session(self, shard_id: int) -> SavedSession | None:
        item = self._get(shard_sk(shard_id)) or {}
        if "session_id" not in item or "resume_url" not in item:
            last = item.get("last_event_ms", {}).get("N")
            if last is None:
                return None
            # No session to resume, but a last event: the start of a gap.
            return SavedSession(
                "", None, "", int(item.get("shard_count", {}).get("N", 0)), int(last)
            )
        seq = item.get("seq", {}).get("N")
        return SavedSession(
            session_id=item["session_id"]["S"],
            seq=None if seq is None else int(seq),
            resume_url=item["resume_url"]["S"],
            shard_count=int(item.get("shard_count", {}).get("N", 0)),
            last_event_ms=int(item.get("last_event_ms", {}).get("N", 0)),
        )

    def record_gap(
        self,
        shard_id: int,
        shard_count: int,
        from_ms: int,
        to_ms: int,
        guild_ids: tuple[str, ...] = (),
    ) -> None:
        """Keep a gap (from the last event received to the new READY) for catching up
        (CatchUpFunction reads the shard's guilds back, by key); it expires after GAP_DAYS
        (the table's TTL attribute `expires_at`)."""
        guilds = {"guilds": {"SS": list(guild_ids)}} if guild_ids else {}
        self._client.put_item(
            TableName=self._table,
            Item={
                **guilds,
                **self._key(self.gaps_sk(to_ms, shard_id)),
                "shard_id": {"N": str(shard_id)},
                "shard_count": {"N": str(shard_count)},
                "from_ms": {"N": str(from_ms)},
                "to_ms": {"N": str(to_ms)},
                "expires_at": {"N": str(int(self.clock()) + GAP_DAYS * 86_400)},
            },
        )

    @staticmethod
    def gaps_sk(to_ms: int, shard_id: int) -> str:
        """A gap's key: when it ended, then the shard (botmemory.catchup reads it)."""
        return f"{GAP_PREFIX}{to_ms:013d}#{shard_id:05d}"

    def gaps(self) -> list[dict[str, int]]:
        """The gaps recorded, oldest first (for the tests; a catch-up worker would read them)."""
        answer = self._client.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :gap)",
            ExpressionAttributeValues={":pk": {"S": PARTITION}, ":gap": {"S": GAP_PREFIX}},
            ConsistentRead=True,
        )
        fields = ("shard_id", "shard_count", "from_ms", "to_ms")
        return [{f: int(item[f]["N"]) for f in fields} for item in answer.get("Items", [])]

    # IDENTIFY counters.

    def reserve_bucket_slot(self, bucket: int, window_seconds: float) -> float:
        """Reserve the next free IDENTIFY slot of `bucket`: the epoch second it begins.
        Slots are `window_seconds` apart; each is handed to one caller only (optimistic
        writes: a caller that loses a race reads again and takes the next)."""
        while True:
            item = self._get(bucket_sk(bucket)) or {}
            seen = item.get("next_at", {}).get("N")
            slot = max(float(seen) if seen is not None else 0.0, self.clock())
            values: dict[str, Any] = {":next": {"N": f"{slot + window_seconds:.3f}"}}
            if seen is None:
                condition = "attribute_not_exists(next_at)"
            else:
                condition = "next_at = :seen"
                values[":seen"] = {"N": seen}
            if self._update(bucket_sk(bucket), "SET next_at = :next", condition, values):
                return slot

    def count_identify(self, cap: int, window_seconds: float) -> int | None:
        """Count one IDENTIFY in the daily window: the new count, or None when `cap` is
        reached (nothing counted). A window that ended starts again at 1."""
        while True:
            now = self.clock()
            now_value = {"N": f"{now:.3f}"}
            try:
                answer = self._client.update_item(
                    TableName=self._table,
                    Key=self._key(DAY_SK),
                    UpdateExpression="SET identifies = identifies + :one",
                    ConditionExpression="window_end > :now AND identifies < :cap",
                    ExpressionAttributeValues={
                        ":one": {"N": "1"},
                        ":now": now_value,
                        ":cap": {"N": str(cap)},
                    },
                    ReturnValues="UPDATED_NEW",
                )
                return int(answer["Attributes"]["identifies"]["N"])
            except ClientError as error:
                if not _refused(error):
                    raise
            if self._update(
                DAY_SK,
                "SET identifies = :one, window_end = :end",
                "attribute_not_exists(window_end) OR window_end <= :now",
                {
                    ":one": {"N": "1"},
                    ":end": {"N": f"{now + window_seconds:.3f}"},
                    ":now": now_value,
                },
            ):
                return 1
            if self.identifies()[0] >= cap:
                return None
            # Another task opened the window between the two writes: count in it.

    def identifies(self) -> tuple[int, float]:
        """IDENTIFYs counted in the current window, and the seconds until it ends."""
        item = self._get(DAY_SK) or {}
        end = float(item.get("window_end", {}).get("N", 0))
        now = self.clock()
        if end <= now:
            return 0, 0.0
        return int(item.get("identifies", {}).get("N", 0)), end - now

    def align_identifies(self, used: int, reset_after: float) -> None:
        """Discord's own session_start_limit, read at start: the window never counts fewer
        starts than Discord does (another process on the token spends them too)."""
        now = self.clock()
        count, left = self.identifies()
        if count >= used and left > 0:
            return
        self._client.put_item(
            TableName=self._table,
            Item={
                **self._key(DAY_SK),
                "identifies": {"N": str(max(used, count))},
                "window_end": {"N": f"{now + max(reset_after, left):.3f}"},
            },
        )


def _session_set(values: dict[str, Any], session: SavedSession) -> str:
    values[":count"] = {"N": str(session.shard_count)}
    values[":last"] = {"N": str(session.last_event_ms)}
    parts = ", shard_count = :count, last_event_ms = :last"
    if session.session_id:
        values[":sid"] = {"S": session.session_id}
        values[":url"] = {"S": session.resume_url}
        parts += ", session_id = :sid, resume_url = :url"
        if session.seq is not None:
            values[":seq"] = {"N": str(session.seq)}
            parts += ", seq = :seq"
    return parts
