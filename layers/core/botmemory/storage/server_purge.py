"""Every item the table holds for one server, found and deleted (botmemory.ops.purge_server).
Part of `MemoryRepository` (see repository.py), which callers use.

A server's items live in partitions of its own, whatever their kind:

- its scope partition `SC#<guild>` (names, fact history, pins, personas, notes) and its
  personas' scopes `SC#<guild>~<lineage>`;
- its members' partitions in those scopes, `SC#<guild>#U#<user>` and
  `SC#<guild>~<lineage>#U#<user>` (facts, profiles, tombstones, pointers, SPOKE# items,
  short-term entries): a member's items in another server or in direct messages are in
  other partitions and stay;
- its channels' partitions `CH#<channel>` (observations, episodes, summaries, quarantined
  batches, candidates, the channel's state);
- its visibility partition `GUILD#<guild>` and its answer rate counters `RATE#<guild>`.

No index is keyed by server, and a member's partition is known only by the member's id, so
finding them takes one paginated Scan of the whole table (keys and `scope` only, filtered by
DynamoDB): it reads every item once, about one read unit per 8 KB eventually consistent (a
10 GB table: some 1.3 million read units, cents on demand, minutes of time). A channel is
the server's when one of its items says the server's scope (observations, episodes,
summaries do), or the server's visibility items or a member's SPOKE# item name it; then every
item of each partition is deleted by a Query of its keys, so items that say no scope (a
channel's state) go with their partition. The marker of the server's index purge
(keys.INDEX_PURGED_SK, naming nobody, expiring in an hour) is the one item kept: it stops a
write racing the purge from creating the index again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from botmemory.storage import keys
from botmemory.storage.table import Table


@dataclass
class ServerPartitions:
    """The partitions that hold a server's items."""

    scopes: set[str] = field(default_factory=set)  # SC#, GUILD#, RATE# partitions
    channels: set[str] = field(default_factory=set)  # channel ids

    def in_order(self) -> list[str]:
        """Channels first, the scope partition last: a run cut short is run again (the
        Scan finds what is left), and what it reads to find channels goes last."""
        channel_pks = sorted(keys.channel_pk(c) for c in self.channels)
        return channel_pks + sorted(self.scopes, key=lambda pk: (pk.count("#"), pk), reverse=True)


@dataclass
class ServerPurge:
    """What a purge deleted: items by kind, across how many partitions."""

    partitions: int = 0
    channels: int = 0
    deleted: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


class ServerPurgeStore(Table):
    def server_partitions(self, guild_id: str) -> ServerPartitions:
        """The partitions of a server's items (module docstring: one paginated Scan)."""
        scope = keys.scope_pk(guild_id)
        persona_scopes = keys.scope_pk(keys.persona_scope(guild_id, ""))
        guild = keys.guild_pk(guild_id)
        found = ServerPartitions()
        values = {
            ":scope": {"S": scope},
            ":people": {"S": f"{scope}#"},
            ":personas": {"S": persona_scopes},
            ":guild": {"S": guild},
            ":rate": {"S": keys.rate_pk(guild_id)},
            ":rate_personas": {"S": keys.rate_pk(keys.persona_scope(guild_id, ""))},
            ":channel": {"S": keys.CHANNEL_PREFIX},
            ":server": {"S": guild_id},
            ":server_personas": {"S": keys.persona_scope(guild_id, "")},
        }
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "ProjectionExpression": "pk, sk, #scope",
            "FilterExpression": (
                "pk = :scope OR begins_with(pk, :people) OR begins_with(pk, :personas) "
                "OR pk = :guild OR pk = :rate OR begins_with(pk, :rate_personas) "
                "OR (begins_with(pk, :channel) "
                "AND (#scope = :server OR begins_with(#scope, :server_personas)))"
            ),
            "ExpressionAttributeNames": {"#scope": "scope"},
            "ExpressionAttributeValues": values,
        }
        for item in self._scan_all(request):
            pk, sk = item["pk"]["S"], item["sk"]["S"]
            if channel := keys.channel_id_of(pk):
                found.channels.add(channel)
                continue
            found.scopes.add(pk)
            named = keys.channel_named_by(sk)
            if named:
                found.channels.add(named)
        return found

    def purge_partitions(self, partitions: ServerPartitions) -> ServerPurge:
        """Delete every item of these partitions but the index purge's marker."""
        purge = ServerPurge(channels=len(partitions.channels))
        for pk in partitions.in_order():
            request: dict[str, Any] = {
                "TableName": self.table_name,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": pk}},
                "ProjectionExpression": "pk, sk",
                "ConsistentRead": True,
            }
            doomed = [item for item in self._query_all(request) if not _kept(pk, item["sk"]["S"])]
            if not doomed:
                continue
            purge.partitions += 1
            self._delete_keys(doomed)
            purge.deleted.update(keys.kind_of(item["sk"]["S"]).value for item in doomed)
        return purge

    def servers_with_items(self) -> set[str]:
        """Every server (guild id) the table holds items of: its visibility partition, its
        scope or its members' partitions, or a channel item saying its scope; the index
        purge's marker alone is nothing kept (one paginated Scan of keys and `scope`, as
        above; botmemory.ops.census)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "ProjectionExpression": "pk, sk, #scope",
            "ExpressionAttributeNames": {"#scope": "scope"},
        }
        found: set[str] = set()
        for item in self._scan_all(request):
            pk, sk = item["pk"]["S"], item["sk"]["S"]
            if _kept(pk, sk):
                continue
            if pk.startswith(keys.GUILD_PREFIX):
                found.add(pk.removeprefix(keys.GUILD_PREFIX))
            elif pk.startswith(keys.SCOPE_PREFIX):
                found.add(keys.server_scope_of(pk.removeprefix(keys.SCOPE_PREFIX).split("#")[0]))
            elif keys.channel_id_of(pk) and "scope" in item:
                found.add(keys.server_scope_of(item["scope"]["S"]))
        return {guild for guild in found if guild.isdigit()}  # not `dm`

    def _scan_all(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        while True:
            response = self._client.scan(**request)
            yield from response["Items"]
            if "LastEvaluatedKey" not in response:
                return
            request = {**request, "ExclusiveStartKey": response["LastEvaluatedKey"]}


def _kept(pk: str, sk: str) -> bool:
    """The index purge's marker stays (module docstring)."""
    return sk == keys.INDEX_PURGED_SK and pk.startswith(keys.SCOPE_PREFIX)
