"""What catching up on a gap reads and writes (botmemory.catchup): the gaps the relay
recorded under its partition, a guild's channels, whether a channel was active, and the
messages a channel holds over a stretch of time. Every read is by key (no Scan).

Not part of `MemoryRepository`: only CatchUpFunction uses it, over the same client.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from botocore.exceptions import ClientError

from botmemory.records import ObservationKind
from botmemory.storage import keys
from botmemory.storage.backfill import BackfillStore
from botmemory.storage.items import key
from botmemory.storage.ledger import LedgerStore
from botmemory.storage.table import error_code

# The observations that stand for a message having been said (its creation).
_SAID = (ObservationKind.MESSAGE.value, ObservationKind.ANSWER.value)
_COUNTERS = frozenset({"channels", "pages", "stored", "deleted", "edited", "skipped"})


@dataclass(frozen=True)
class Gap:
    """A stretch a shard did not receive, from its last event to the new READY."""

    sk: str
    shard_id: int
    from_ms: int
    to_ms: int
    guild_ids: tuple[str, ...]


class CatchUpStore(LedgerStore, BackfillStore):
    """The gaps and the reads catching up needs, the erasure ledger it checks, and the
    servers' backfill runs."""

    def gaps_waiting(self, limit: int) -> list[Gap]:
        """Gaps nobody has planned yet, oldest first (the relay's partition, one Query)."""
        answer = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :gap)",
            FilterExpression="attribute_not_exists(planned_ms)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.RELAY_PK},
                ":gap": {"S": keys.RELAY_GAP_PREFIX},
            },
            ConsistentRead=True,
        )
        gaps = []
        for item in answer.get("Items", [])[:limit]:
            gaps.append(
                Gap(
                    sk=item["sk"]["S"],
                    shard_id=int(item["shard_id"]["N"]),
                    from_ms=int(item["from_ms"]["N"]),
                    to_ms=int(item["to_ms"]["N"]),
                    guild_ids=tuple(sorted(item.get("guilds", {}).get("SS", []), key=int)),
                )
            )
        return gaps

    def claim_gap(self, sk: str, now_ms: int) -> bool:
        """Mark a gap planned; False when another run already did (one plan a gap)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.RELAY_PK, sk),
                UpdateExpression="SET planned_ms = :now",
                ConditionExpression="attribute_exists(pk) AND attribute_not_exists(planned_ms)",
                ExpressionAttributeValues={":now": {"N": str(now_ms)}},
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def count(self, sk: str | None, **counts: int) -> None:
        """Add to the gap's counters (channels, pages, stored, deleted, edited, skipped):
        what operations and the bench read of a catch-up."""
        added = {name: n for name, n in counts.items() if n and name in _COUNTERS}
        if not added or sk is None:
            return
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.RELAY_PK, sk),
                UpdateExpression="ADD " + ", ".join(f"#{name} :{name}" for name in added),
                ExpressionAttributeNames={f"#{name}": name for name in added},
                ConditionExpression="attribute_exists(pk)",  # an expired gap is not made again
                ExpressionAttributeValues={f":{name}": {"N": str(n)} for name, n in added.items()},
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise

    def counters(self, sk: str) -> dict[str, int]:
        item = self._client.get_item(
            TableName=self.table_name, Key=key(keys.RELAY_PK, sk), ConsistentRead=True
        ).get("Item", {})
        return {name: int(item[name]["N"]) for name in _COUNTERS if name in item}

    def guild_channel_ids(self, guild_id: str) -> list[str]:
        """Every channel and thread of the guild the table knows (its visibility items)."""
        items = self._items_under(keys.guild_pk(guild_id), keys.CHANNEL_VISIBILITY_PREFIX)
        found = (keys.channel_named_by(str(item["sk"])) for item in items)
        return sorted({c for c in found if c and c.isdigit()}, key=int)

    def channel_active(self, channel_id: str, from_ms: int, to_ms: int) -> bool:
        """Whether the channel holds an observation between these times (one item read)."""
        answer = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :low AND :high",
            ExpressionAttributeValues={
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":low": {"S": f"{keys.OBS_PREFIX}{from_ms:013d}"},
                ":high": {"S": f"{keys.OBS_PREFIX}{to_ms:013d}~"},
            },
            ProjectionExpression="pk",
            Limit=1,
        )
        return bool(answer.get("Items"))

    def messages_held(self, channel_id: str, from_ms: int, to_ms: int) -> Iterator[str]:
        """The ids of the messages the channel holds as said between these times (their
        creation observed, their delete not), oldest first."""
        request = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :low AND :high",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":low": {"S": f"{keys.OBS_PREFIX}{from_ms:013d}"},
                ":high": {"S": f"{keys.OBS_PREFIX}{to_ms:013d}~"},
            },
            "ProjectionExpression": "sk",
            "ConsistentRead": True,
        }
        said: dict[str, None] = {}
        gone: set[str] = set()
        for item in self._query_all(request):
            parts = keys.observation_parts(item["sk"]["S"])
            if parts is None or not parts[2]:
                continue
            _, kind, ids = parts
            if kind in _SAID:
                said[ids[0]] = None
            elif kind == ObservationKind.DELETE.value:
                gone.add(ids[0])
        yield from (m for m in said if m not in gone)
