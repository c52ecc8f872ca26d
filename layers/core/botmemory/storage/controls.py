"""What the table keeps of members' and staff's controls over what is kept
(botmemory.people.controls): a server's channels whose memory is off, its consent mode, the
members who agreed to be recorded in it, the members told once that the bot keeps memory
(all under the guild's partition, `GUILD#<guild>`, which IngestFunction may read), and the
members who paused being recorded (one partition, by person hash). Part of
`MemoryRepository` (see repository.py), which callers use.

A channel's memory switch and the consent mode name no member (staff's id is kept as who
switched it, for the log); consent, notice and pause items name a person by keyed hash only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from botmemory.clock import epoch_seconds, ttl_alive
from botmemory.records import Fact
from botmemory.storage import keys
from botmemory.storage.items import fact_key, from_item, key, to_item
from botmemory.storage.schema import BY_USER_INDEX
from botmemory.storage.table import ItemRef, Table, error_code


@dataclass(frozen=True)
class GuildControls:
    """A server's controls as staff set them: the channels whose memory is off (since when),
    and whether only members who agreed are recorded."""

    off_channels: dict[str, int] = field(default_factory=dict)  # channel id -> since (ms)
    opt_in: bool = False
    # What staff shortened: "facts" | "messages" | "episodes" -> days (botmemory.people.retention).
    retention: dict[str, int] = field(default_factory=dict)
    # Members who leave are erased from the server this many days later (0: never;
    # botmemory.people.departures).
    leavers_days: int = 0
    # Days of history imported when the bot joins (0: never); None: the deployment's default
    # (botmemory.catchup.on_join).
    backfill_on_join_days: int | None = None


class ControlsStore(Table):
    def guild_controls(self, guild_id: str) -> GuildControls:
        """A server's controls: one Query of its few control items."""
        off: dict[str, int] = {}
        opt_in = False
        retention: dict[str, int] = {}
        leavers = 0
        on_join: int | None = None
        for item in self._items_under(keys.guild_pk(guild_id), keys.CONTROL_PREFIX):
            sk = str(item["sk"])
            if sk.startswith(keys.CHANNEL_OFF_PREFIX):
                off[sk.removeprefix(keys.CHANNEL_OFF_PREFIX)] = int(item.get("since_ms", 0))
            elif sk == keys.CONSENT_MODE_SK:
                opt_in = item.get("mode") == "opt-in"
            elif sk == keys.RETENTION_SK and isinstance(item.get("days"), dict):
                retention = {str(k): int(v) for k, v in item["days"].items()}
            elif sk == keys.LEAVERS_SK:
                leavers = int(item.get("days", 0))
            elif sk == keys.BACKFILL_ON_JOIN_SK:
                on_join = int(item.get("days", 0))
        return GuildControls(off, opt_in, retention, leavers, on_join)

    def set_backfill_on_join(self, guild_id: str, days: int, *, staff_id: str, now_ms: int) -> None:
        """The days of history imported when the bot joins this server again (0: never); kept
        as staff chose it, 0 included, so the deployment's default no longer applies here."""
        values = {
            "pk": keys.guild_pk(guild_id),
            "sk": keys.BACKFILL_ON_JOIN_SK,
            "days": days,
            "staff_id": staff_id,
            "updated_ms": now_ms,
        }
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def set_channel_memory(
        self, guild_id: str, channel_id: str, *, off: bool, staff_id: str, now_ms: int
    ) -> bool:
        """Switch a channel's memory off (an item) or on (no item); True when it changed."""
        ref = key(keys.guild_pk(guild_id), keys.channel_off_sk(channel_id))
        if not off:
            response = self._client.delete_item(
                TableName=self.table_name, Key=ref, ReturnValues="ALL_OLD"
            )
            return bool(response.get("Attributes"))
        values = {**ref, **to_item({"since_ms": now_ms, "staff_id": staff_id})}
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=values,
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def set_consent_mode(self, guild_id: str, *, opt_in: bool, staff_id: str, now_ms: int) -> None:
        values = {
            "pk": keys.guild_pk(guild_id),
            "sk": keys.CONSENT_MODE_SK,
            "mode": "opt-in" if opt_in else "opt-out",
            "staff_id": staff_id,
            "updated_ms": now_ms,
        }
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def consented(self, guild_id: str, user_hash: str) -> bool:
        """Whether this member agreed to be recorded in this server (one GetItem)."""
        return self._get(ItemRef(keys.guild_pk(guild_id), keys.consented_sk(user_hash))) is not None

    def set_consented(self, guild_id: str, user_hash: str, *, agreed: bool, now_ms: int) -> None:
        ref = key(keys.guild_pk(guild_id), keys.consented_sk(user_hash))
        if agreed:
            item = {**ref, **to_item({"agreed_ms": now_ms})}
            self._client.put_item(TableName=self.table_name, Item=item)
        else:
            self._client.delete_item(TableName=self.table_name, Key=ref)

    def first_notice(self, guild_id: str, user_hash: str, now_ms: int) -> bool:
        """Record that this member was told the bot keeps memory here; True only the first
        time (a conditional put: two answers at once tell once)."""
        item = {
            **key(keys.guild_pk(guild_id), keys.noticed_sk(user_hash)),
            **to_item({"noticed_ms": now_ms}),
        }
        try:
            self._client.put_item(
                TableName=self.table_name, Item=item, ConditionExpression="attribute_not_exists(pk)"
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    # Pauses, deployment-wide ------------------------------------------------------------

    def pause(self, user_hash: str, until_ms: int) -> None:
        """Not recorded until `until_ms`: the item expires then (TTL) and is read as such."""
        values: dict[str, Any] = {
            "pk": keys.PAUSE_PK,
            "sk": user_hash,
            "until_ms": until_ms,
            "expires_at": epoch_seconds(until_ms),
        }
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def unpause(self, user_hash: str) -> None:
        self._client.delete_item(TableName=self.table_name, Key=key(keys.PAUSE_PK, user_hash))

    def pauses(self, now_ms: int) -> dict[str, int]:
        """Every live pause, by person hash: until when (one paged Query)."""
        found: dict[str, int] = {}
        for item in self._items_under(keys.PAUSE_PK):
            until = int(item.get("until_ms", 0))
            if until > now_ms and ttl_alive(item.get("expires_at"), now_ms):
                found[str(item["sk"])] = until
        return found

    # What `/memory-staff channel forget` erases --------------------------------------------

    def channel_items_page(self, channel_id: str, limit: int) -> tuple[list[ItemRef], set[str]]:
        """Up to `limit` items of a channel's partition (observations, episodes, summaries,
        quarantined batches, candidates, its state) and the people they name as author,
        participant or subject: one strongly consistent Query. Deleting them and asking
        again walks the whole partition."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": keys.channel_pk(channel_id)}},
            ProjectionExpression="pk, sk, author_id, participant_ids, user_id",
            ConsistentRead=True,
            Limit=limit,
        )
        refs: list[ItemRef] = []
        people: set[str] = set()
        for item in response["Items"]:
            refs.append(ItemRef(item["pk"]["S"], item["sk"]["S"]))
            plain = from_item(item)
            for name in ("author_id", "user_id"):
                if isinstance(plain.get(name), str):
                    people.add(plain[name])
            people.update(str(p) for p in plain.get("participant_ids") or [])
        return refs, people

    def drop_channel_traces(self, scope: str, user_ids: list[str], channel_id: str) -> None:
        """A channel's short-term entries and SPOKE# items of these people in a scope."""
        self._delete_keys(
            [key(keys.user_pk(scope, u), keys.spoke_sk(channel_id)) for u in user_ids]
        )
        self.drop_short_term(scope, user_ids, channel_id)

    def drop_short_term(self, scope: str, user_ids: list[str], channel_id: str) -> None:
        """These people's short-term entries for one channel of a scope."""
        for user_id in user_ids:
            try:
                self._client.update_item(
                    TableName=self.table_name,
                    Key=key(keys.user_pk(scope, user_id), keys.SHORT_TERM_SK),
                    UpdateExpression="REMOVE #entry",
                    ConditionExpression="attribute_exists(pk)",
                    ExpressionAttributeNames={"#entry": keys.short_term_attribute(channel_id)},
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise

    def delete_facts_with_history(self, facts: list[Fact]) -> int:
        """Delete these facts and every history entry of each (which quotes its text)."""
        doomed = [fact_key(f) for f in facts]
        for fact in facts:
            pk = keys.scope_pk(fact.scope)
            doomed += [
                key(pk, str(item["sk"]))
                for item in self._items_under(pk, keys.history_prefix(fact.fact_id))
            ]
        return self._delete_keys(doomed)

    # What `/memory forget-recent` erases ------------------------------------------------------

    def observations_since(self, user_id: str, since_ms: int, limit: int) -> list[ItemRef]:
        """Up to `limit` of the observations this person wrote at or after `since_ms` (the
        by_user index: their sort keys begin with their time)."""
        response = self._client.query(
            TableName=self.table_name,
            IndexName=BY_USER_INDEX,
            KeyConditionExpression="user_id = :user AND sk BETWEEN :from AND :to",
            ExpressionAttributeValues={
                ":user": {"S": user_id},
                ":from": {"S": keys.observation_sk(since_ms, "")[: len(keys.OBS_PREFIX) + 13]},
                ":to": {"S": f"{keys.OBS_PREFIX}~"},
            },
            Limit=limit,
        )
        return [ItemRef(i["pk"]["S"], i["sk"]["S"]) for i in response["Items"]]

    # What `/memory export` reads ----------------------------------------------------------

    def plain_items_at(self, refs: list[ItemRef]) -> list[dict[str, Any]]:
        """The items at these keys that still exist, as plain values (batched, consistent)."""
        return [from_item(i) for i in self._items_at([key(r.pk, r.sk) for r in refs])]

    def export_allowed(self, user_hash: str, now_ms: int, every_ms: int) -> bool:
        """Whether this member may start an export now (one per `every_ms`): a conditional
        put of the time it started; False when the last one is more recent."""
        values = {
            "pk": keys.EXPORT_PK,
            "sk": user_hash,
            "started_ms": now_ms,
            "expires_at": epoch_seconds(now_ms + every_ms),
        }
        try:
            self._client.put_item(
                TableName=self.table_name,
                Item=to_item(values),
                ConditionExpression="attribute_not_exists(pk) OR started_ms <= :before",
                ExpressionAttributeValues={":before": {"N": str(now_ms - every_ms)}},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def export_cursor(self, user_hash: str) -> dict[str, Any] | None:
        """Where this member's unfinished export stopped; None when none is unfinished."""
        item = self._get(ItemRef(keys.EXPORT_PK, user_hash))
        cursor = item.get("cursor") if item else None
        return json.loads(cursor) if isinstance(cursor, str) else None

    def keep_export_cursor(self, user_hash: str, cursor: dict[str, Any] | None) -> None:
        """Keep where an unfinished export stopped (None: it finished)."""
        if cursor is None:
            update: dict[str, Any] = {"UpdateExpression": "REMOVE #cursor"}
        else:
            update = {
                "UpdateExpression": "SET #cursor = :cursor",
                "ExpressionAttributeValues": {":cursor": {"S": json.dumps(cursor)}},
            }
        self._client.update_item(
            TableName=self.table_name,
            Key=key(keys.EXPORT_PK, user_hash),
            ExpressionAttributeNames={"#cursor": "cursor"},
            **update,
        )

    def channel_of_guild(self, guild_id: str, channel_id: str) -> bool:
        """Whether the guild's visibility items know this channel (its GUILD_CREATE lists
        every channel): a channel of another server is never this one's to erase."""
        ref = ItemRef(keys.guild_pk(guild_id), keys.channel_visibility_sk(channel_id))
        return self._get(ref) is not None

    def thread_parent(self, guild_id: str, channel_id: str) -> str | None:
        """The parent channel of a thread, as its visibility item says; None otherwise."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.channel_visibility_sk(channel_id)))
        parent = item.get("parent_id") if item else None
        return str(parent) if parent else None
