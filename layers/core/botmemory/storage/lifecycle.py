"""A server's lifecycle in the table (botmemory.people.server_removal): the bot removed from a
guild schedules its purge (a marker under the guild's partition, and a pointer in the
`PURGE` partition sorted by when it is due, so the scheduled purge finds what is due by key),
the bot's return cancels it, and the purge finds the server's partitions by key, never by
Scan. Part of `MemoryRepository` (see repository.py), which callers use.

What names a server's partitions, read by key: its visibility items (`GUILD#<guild>`,
`CHAN#<channel>`: its channels), its personas (`SC#<guild>`, `PERSONA#`: their scopes), and
every item of its scope partitions and channels that carries a member's id (names, history,
observations, episodes): their partitions in those scopes.
"""

from __future__ import annotations

import json
from typing import Any

from botmemory.storage import keys
from botmemory.storage.items import from_item, key, to_item
from botmemory.storage.table import ItemRef, Table

# The person fields an item may carry (observations, facts, history, names, episodes).
_PEOPLE_FIELDS = ("author_id", "user_id", "user_ids", "participant_ids")


class ServerLifecycleStore(Table):
    def schedule_server_purge(self, guild_id: str, removed_ms: int, purge_at_ms: int) -> None:
        """The bot was removed: the server is purged at `purge_at_ms` unless it comes back.
        A later removal reschedules (the earlier pointer goes)."""
        self.cancel_server_purge(guild_id)
        marker = {
            "pk": keys.guild_pk(guild_id),
            "sk": keys.REMOVED_SK,
            "removed_ms": removed_ms,
            "purge_at_ms": purge_at_ms,
        }
        pointer = {"pk": keys.PURGE_PK, "sk": keys.purge_sk(purge_at_ms, guild_id)}
        # Two puts, not one batch: IngestFunction's role grants each partition apart.
        for values in (pointer, marker):
            self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def cancel_server_purge(self, guild_id: str) -> bool:
        """The bot is back (or removed again): no purge is due; True when one was."""
        response = self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.guild_pk(guild_id), keys.REMOVED_SK),
            ReturnValues="ALL_OLD",
        )
        old = from_item(response.get("Attributes") or {})
        if "purge_at_ms" not in old:
            return False
        pointer = key(keys.PURGE_PK, keys.purge_sk(int(old["purge_at_ms"]), guild_id))
        self._client.delete_item(TableName=self.table_name, Key=pointer)
        return True

    def server_purges_due(self, now_ms: int, limit: int) -> list[str]:
        """The guilds whose purge is due, earliest first (one Query of the PURGE partition)."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND sk <= :now",
            ExpressionAttributeValues={
                ":pk": {"S": keys.PURGE_PK},
                ":now": {"S": keys.purge_sk(now_ms, "~")},
            },
            ConsistentRead=True,
            Limit=limit,
        )
        return [keys.guild_of_purge_sk(i["sk"]["S"]) for i in response["Items"]]

    def server_purge_state(self, guild_id: str) -> tuple[int | None, dict[str, Any] | None]:
        """When a removed server's purge is due, and the checkpoint of a purge under way."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.REMOVED_SK))
        if item is None:
            return None, None
        checkpoint = item.get("checkpoint")
        return int(item["purge_at_ms"]), json.loads(checkpoint) if isinstance(
            checkpoint, str
        ) else None

    def keep_server_purge_checkpoint(self, guild_id: str, checkpoint: dict[str, Any]) -> None:
        self._client.update_item(
            TableName=self.table_name,
            Key=key(keys.guild_pk(guild_id), keys.REMOVED_SK),
            UpdateExpression="SET #checkpoint = :checkpoint",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#checkpoint": "checkpoint"},
            ExpressionAttributeValues={":checkpoint": {"S": json.dumps(checkpoint)}},
        )

    def finish_server_purge(self, guild_id: str, purge_at_ms: int) -> None:
        """The server's purge is done: its marker (in its guild partition), its pointer and
        its entry among the servers the deployment knows go."""
        self._delete_keys(
            [
                key(keys.guild_pk(guild_id), keys.REMOVED_SK),
                key(keys.PURGE_PK, keys.purge_sk(purge_at_ms, guild_id)),
                key(keys.SERVERS_PK, guild_id),
            ]
        )

    # Members who left a server that erases them ---------------------------------------------

    def schedule_departure(self, guild_id: str, user_id: str, due_ms: int) -> None:
        """A member left: checked, and erased from the server if gone, from `due_ms` on (the
        pointer expires a week after, should nothing handle it)."""
        values = {
            "pk": keys.DEPARTED_PK,
            "sk": keys.departed_sk(due_ms, guild_id, user_id),
            "expires_at": due_ms // 1000 + 7 * 86_400,
        }
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def departures_due(self, now_ms: int, limit: int) -> list[tuple[str, dict[str, Any] | None]]:
        """The departures due, earliest first: their pointer's sort key and the checkpoint
        of an erasure under way."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND sk <= :now",
            ExpressionAttributeValues={
                ":pk": {"S": keys.DEPARTED_PK},
                ":now": {"S": f"{now_ms:013d}#~"},
            },
            ConsistentRead=True,
            Limit=limit,
        )
        due = []
        for item in map(from_item, response["Items"]):
            checkpoint = item.get("checkpoint")
            due.append(
                (str(item["sk"]), json.loads(checkpoint) if isinstance(checkpoint, str) else None)
            )
        return due

    def keep_departure_checkpoint(self, sk: str, checkpoint: dict[str, Any]) -> None:
        self._client.update_item(
            TableName=self.table_name,
            Key=key(keys.DEPARTED_PK, sk),
            UpdateExpression="SET #checkpoint = :checkpoint",
            ExpressionAttributeNames={"#checkpoint": "checkpoint"},
            ExpressionAttributeValues={":checkpoint": {"S": json.dumps(checkpoint)}},
        )

    def drop_departure(self, sk: str) -> None:
        self._client.delete_item(TableName=self.table_name, Key=key(keys.DEPARTED_PK, sk))

    # The servers the deployment knows -------------------------------------------------------

    def know_server(self, guild_id: str, now_ms: int, joined_at_ms: int | None = None) -> None:
        """A GUILD_CREATE: the deployment knows this server (names nobody), and when the bot
        joined it (`joined_at`, botmemory.catchup.on_join), when known."""
        values: dict[str, Any] = {"pk": keys.SERVERS_PK, "sk": guild_id, "seen_ms": now_ms}
        if joined_at_ms is not None:
            values["joined_at_ms"] = joined_at_ms
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def server_joined_at(self, guild_id: str) -> int | None:
        """When the bot joined this known server, as its last GUILD_CREATE said; None for a
        server not known, or known from before that was recorded (one GetItem)."""
        item = self._get(ItemRef(keys.SERVERS_PK, guild_id))
        joined = None if item is None else item.get("joined_at_ms")
        return int(joined) if joined is not None else None

    def forget_known_server(self, guild_id: str) -> bool:
        """A server purged by hand (ops.purge_server): no longer one the deployment knows;
        True when it was one."""
        response = self._client.delete_item(
            TableName=self.table_name, Key=key(keys.SERVERS_PK, guild_id), ReturnValues="ALL_OLD"
        )
        return bool(response.get("Attributes"))

    def known_servers(self) -> list[str]:
        """Every server the deployment knows (one paged Query of keys)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": keys.SERVERS_PK}},
            "ProjectionExpression": "sk",
        }
        return [item["sk"]["S"] for item in self._query_all(request)]

    # Finding a server's partitions by key ---------------------------------------------------

    def server_channel_ids(self, guild_id: str) -> list[str]:
        """The server's channels and threads, as its visibility items name them."""
        return sorted(
            str(item["sk"]).removeprefix(keys.CHANNEL_VISIBILITY_PREFIX)
            for item in self._items_under(keys.guild_pk(guild_id), keys.CHANNEL_VISIBILITY_PREFIX)
        )

    def server_lineages(self, guild_id: str) -> list[str]:
        """The lineages of the server's personas (removed ones included)."""
        found = {
            str(item["lineage_id"])
            for item in self._items_under(keys.scope_pk(guild_id), keys.PERSONA_PREFIX)
            if item.get("lineage_id")
        }
        return sorted(found)

    def purge_partition_page(
        self, pk: str, limit: int, *, keep_sk: str | None = None
    ) -> tuple[int, set[str]]:
        """Delete up to `limit` items of one partition (all but `keep_sk`); how many went, and
        the people they named (their partitions are the server's too). 0: it is empty."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ProjectionExpression="pk, sk, " + ", ".join(_PEOPLE_FIELDS),
            ConsistentRead=True,
            Limit=limit,
        )
        doomed = []
        people: set[str] = set()
        for item in response["Items"]:
            plain = from_item(item)
            for field in _PEOPLE_FIELDS:
                value = plain.get(field)
                values = value if isinstance(value, list) else [value]
                people.update(str(v) for v in values if isinstance(v, str) and v.isdigit())
            if plain["sk"] != keep_sk:
                doomed.append(key(plain["pk"], plain["sk"]))
        return self._delete_keys(doomed), people
