"""What the table keeps about channel visibility (botmemory.ingest.channels): per guild one item
(its @everyone permissions, owner and staff roles) and per channel one item (whether
@everyone can view it, and the @everyone overwrite's View Channel that decided it); a thread
is a channel item too, holding its parent's id instead, resolved when read. Part of
`MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from botmemory.records import GuildStaff
from botmemory.storage import keys
from botmemory.storage.items import attribute, from_item, key, to_item
from botmemory.storage.table import ItemRef, Table, error_code


class GuildUnseen(LookupError):
    """A change to a guild whose GUILD_CREATE was never recorded: nothing to change."""


@dataclass(frozen=True)
class StoredChannel:
    """A (non-thread) channel's item: whether it is public, and the @everyone overwrite's
    View Channel ("allow", "deny", "none"; "" on items older than the field)."""

    channel_id: str
    public: bool
    everyone_view: str


@dataclass(frozen=True)
class ThreadRef:
    """A thread: its parent channel (None when Discord did not say) and whether it is a
    private thread (visible to its members only, whatever its parent)."""

    thread_id: str
    parent_id: str | None
    private: bool


class ChannelRepository(Table):
    def channel_is_public(self, guild_id: str, channel_id: str) -> bool:
        """Whether @everyone can view the channel; False when its visibility is unknown.
        A thread is public when it is not a private thread and its parent is public."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.channel_visibility_sk(channel_id)))
        if item is None or "parent_id" not in item:
            return _public(item)
        if item.get("private_thread") is True:
            return False
        parent = self._get(
            ItemRef(keys.guild_pk(guild_id), keys.channel_visibility_sk(str(item["parent_id"])))
        )
        return _public(parent)

    def channels_public(self, guild_id: str, channel_ids: Iterable[str]) -> set[str]:
        """The public ones of these channels (threads resolved to their parents, as
        `channel_is_public` does): one BatchGetItem for the channels, and one more for the
        parents of threads among them whose parent was not asked for."""
        pk = keys.guild_pk(guild_id)
        wanted = list(dict.fromkeys(channel_ids))
        found = self._visibility_items(pk, wanted)
        parents = {
            str(item["parent_id"])
            for item in found.values()
            if "parent_id" in item and item.get("private_thread") is not True
        }
        found.update(self._visibility_items(pk, [p for p in parents if p not in found]))
        public = set()
        for channel_id in wanted:
            item = found.get(channel_id)
            if item is not None and "parent_id" in item:
                if item.get("private_thread") is True:
                    continue
                item = found.get(str(item["parent_id"]))
            if _public(item):
                public.add(channel_id)
        return public

    def _visibility_items(self, pk: str, channel_ids: list[str]) -> dict[str, dict[str, Any]]:
        if not channel_ids:
            return {}
        wanted = [key(pk, keys.channel_visibility_sk(c)) for c in channel_ids]
        items = self._items_at(wanted)
        return {str(item["channel_id"]): item for item in map(from_item, items)}

    def public_channels(self, guild_id: str) -> frozenset[str]:
        """The guild's channels @everyone can view now (botmemory.memory.visibility), threads
        resolved to their parents as `channel_is_public` does: one Query of its visibility
        items, paged for a server with many channels and threads."""
        request = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.guild_pk(guild_id)},
                ":prefix": {"S": keys.CHANNEL_VISIBILITY_PREFIX},
            },
            "ProjectionExpression": "channel_id, #public, parent_id, private_thread",
            "ExpressionAttributeNames": {"#public": "public"},
        }
        items = [from_item(item) for item in self._query_all(request)]
        public = {str(i["channel_id"]) for i in items if "parent_id" not in i and _public(i)}
        threads = {
            str(i["channel_id"])
            for i in items
            if "parent_id" in i
            and i.get("private_thread") is not True
            and str(i["parent_id"]) in public
        }
        return frozenset(public | threads)

    def guild_staff(self, guild_id: str) -> GuildStaff:
        """The guild's staff as its GUILD_CREATE said and role and guild updates since
        (nobody when unseen)."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.EVERYONE_SK))
        return GuildStaff.model_validate(item) if item else GuildStaff()

    def everyone_permissions(self, guild_id: str) -> int | None:
        """The guild's @everyone permissions as last recorded; None when unseen."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.EVERYONE_SK))
        return int(item["permissions"]) if item and "permissions" in item else None

    def stored_channels(self, guild_id: str) -> list[StoredChannel]:
        """Every channel of the guild the table knows, threads left out (one Query)."""
        items = self._items_under(keys.guild_pk(guild_id), keys.CHANNEL_VISIBILITY_PREFIX)
        return [
            StoredChannel(
                channel_id=str(item["channel_id"]),
                public=item.get("public") is True,
                everyone_view=str(item.get("everyone_view", "")),
            )
            for item in items
            if "parent_id" not in item and "channel_id" in item
        ]

    def put_channel_visibility(
        self, guild_id: str, channel_id: str, public: bool, everyone_view: str = ""
    ) -> None:
        self._client.put_item(
            TableName=self.table_name,
            Item=to_item(self._channel_values(guild_id, channel_id, public, everyone_view)),
        )

    def put_channels(self, guild_id: str, channels: Iterable[StoredChannel]) -> None:
        """Rewrite these channels' items, batched."""
        self._batch_write(
            [
                {
                    "PutRequest": {
                        "Item": to_item(
                            self._channel_values(guild_id, c.channel_id, c.public, c.everyone_view)
                        )
                    }
                }
                for c in channels
            ]
        )

    def put_threads(self, guild_id: str, threads: Iterable[ThreadRef]) -> None:
        self._batch_write(
            [{"PutRequest": {"Item": to_item(self._thread_values(guild_id, t))}} for t in threads]
        )

    def delete_channel_visibility(self, guild_id: str, channel_id: str) -> None:
        """A channel's or a thread's item goes."""
        self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.guild_pk(guild_id), keys.channel_visibility_sk(channel_id)),
        )

    def put_guild_visibility(
        self,
        guild_id: str,
        everyone_permissions: int,
        channels: dict[str, bool] | Iterable[StoredChannel],
        staff: GuildStaff | None = None,
        threads: Iterable[ThreadRef] = (),
    ) -> None:
        """The guild's @everyone permissions and staff, every channel's visibility and its
        threads, batched."""
        if isinstance(channels, dict):
            channels = [StoredChannel(c, public, "") for c, public in channels.items()]
        everyone = to_item(
            {
                "pk": keys.guild_pk(guild_id),
                "sk": keys.EVERYONE_SK,
                "permissions": everyone_permissions,
                "owner_id": (staff or GuildStaff()).owner_id,
            }
        )
        if staff and staff.role_ids:
            # A string set, so that one role's change is one atomic ADD or DELETE.
            everyone["role_ids"] = {"SS": sorted(set(staff.role_ids))}
        items = [everyone]
        items += [
            to_item(self._channel_values(guild_id, c.channel_id, c.public, c.everyone_view))
            for c in channels
        ]
        items += [to_item(self._thread_values(guild_id, t)) for t in threads]
        self._batch_write([{"PutRequest": {"Item": item}} for item in items])

    def set_guild(self, guild_id: str, everyone_permissions: int, staff: GuildStaff) -> int | None:
        """A guild's @everyone permissions, owner and staff roles replaced (GUILD_UPDATE);
        its channels stay. The permissions it had before, None when it was unseen."""
        names = {"#p": "permissions", "#o": "owner_id", "#r": "role_ids"}
        values: dict[str, Any] = {":p": attribute(everyone_permissions)}
        sets = ["#p = :p"]
        removes = []
        if staff.owner_id:
            sets.append("#o = :o")
            values[":o"] = attribute(staff.owner_id)
        else:
            removes.append("#o")
        if staff.role_ids:
            sets.append("#r = :r")
            values[":r"] = {"SS": sorted(set(staff.role_ids))}
        else:
            removes.append("#r")
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        response = self._client.update_item(
            TableName=self.table_name,
            Key=key(keys.guild_pk(guild_id), keys.EVERYONE_SK),
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
            ReturnValues="UPDATED_OLD",
        )
        old = from_item(response.get("Attributes", {}))
        return int(old["permissions"]) if "permissions" in old else None

    def set_role(
        self,
        guild_id: str,
        role_id: str,
        *,
        staff: bool,
        everyone_permissions: int | None = None,
    ) -> int | None:
        """One role's change (GUILD_ROLE_*) in a guild already seen: it joins or leaves the
        staff roles, atomically, and @everyone's permissions (`everyone_permissions`, for
        the role whose id is the guild's) are replaced. The @everyone permissions the guild
        had before; GuildUnseen when its GUILD_CREATE was never recorded."""
        names = {"#p": "permissions", "#r": "role_ids"}
        values: dict[str, Any] = {":r": {"SS": [role_id]}}
        expression = ("ADD" if staff else "DELETE") + " #r :r"
        if everyone_permissions is not None:
            expression = f"SET #p = :p {expression}"
            values[":p"] = attribute(everyone_permissions)
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.guild_pk(guild_id), keys.EVERYONE_SK),
                UpdateExpression=expression,
                ConditionExpression="attribute_exists(#p)",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="UPDATED_OLD",
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                raise GuildUnseen(guild_id) from None
            if error_code(error) == "ValidationException":
                # role_ids written as a list, before it was a set: the event is skipped
                # with this reason, and the guild's next GUILD_CREATE rewrites the item.
                raise ValueError(
                    "the guild's item is in an older format; its next GUILD_CREATE rewrites it"
                ) from None
            raise
        old = from_item(response.get("Attributes", {}))
        return int(old["permissions"]) if "permissions" in old else None

    @staticmethod
    def _channel_values(
        guild_id: str, channel_id: str, public: bool, everyone_view: str
    ) -> dict[str, Any]:
        return {
            "pk": keys.guild_pk(guild_id),
            "sk": keys.channel_visibility_sk(channel_id),
            "guild_id": guild_id,
            "channel_id": channel_id,
            "public": public,
            "everyone_view": everyone_view or None,
        }

    @staticmethod
    def _thread_values(guild_id: str, thread: ThreadRef) -> dict[str, Any]:
        # No parent known: the parent id "0" names no channel, so the thread reads private.
        return {
            "pk": keys.guild_pk(guild_id),
            "sk": keys.channel_visibility_sk(thread.thread_id),
            "guild_id": guild_id,
            "channel_id": thread.thread_id,
            "parent_id": thread.parent_id or "0",
            "private_thread": thread.private,
        }


def _public(item: dict[str, Any] | None) -> bool:
    # A thread's parent must be a channel, not another thread.
    return bool(item and item.get("public") is True and "parent_id" not in item)
