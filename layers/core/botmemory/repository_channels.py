"""What the table keeps about channel visibility (botmemory.channels): a guild's @everyone
permissions and, per channel, whether @everyone can view it. Part of `MemoryRepository`
(see repository.py), which callers use.
"""

from __future__ import annotations

from typing import Any

from botmemory import keys
from botmemory.items import key, to_item
from botmemory.records import GuildStaff
from botmemory.table import ItemRef, Table


class ChannelRepository(Table):
    def channel_is_public(self, guild_id: str, channel_id: str) -> bool:
        """Whether @everyone can view the channel; False when its visibility is unknown."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.channel_visibility_sk(channel_id)))
        return bool(item and item.get("public") is True)

    def public_channels(self, guild_id: str) -> frozenset[str]:
        """The guild's channels @everyone can view now (botmemory.visibility): one Query of
        its visibility items, paged for a server with many channels."""
        request = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.guild_pk(guild_id)},
                ":prefix": {"S": keys.CHANNEL_VISIBILITY_PREFIX},
            },
            "ProjectionExpression": "channel_id, #public",
            "ExpressionAttributeNames": {"#public": "public"},
        }
        return frozenset(
            item["channel_id"]["S"]
            for item in self._query_all(request)
            if item.get("public", {}).get("BOOL") is True and "channel_id" in item
        )

    def guild_staff(self, guild_id: str) -> GuildStaff:
        """The guild's staff as its last GUILD_CREATE said (nobody when unseen)."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.EVERYONE_SK))
        return GuildStaff.model_validate(item) if item else GuildStaff()

    def everyone_permissions(self, guild_id: str) -> int | None:
        """The guild's @everyone permissions as its last GUILD_CREATE said; None when unseen."""
        item = self._get(ItemRef(keys.guild_pk(guild_id), keys.EVERYONE_SK))
        return int(item["permissions"]) if item else None

    def put_channel_visibility(self, guild_id: str, channel_id: str, public: bool) -> None:
        self._client.put_item(
            TableName=self.table_name,
            Item=to_item(self._channel_values(guild_id, channel_id, public)),
        )

    def delete_channel_visibility(self, guild_id: str, channel_id: str) -> None:
        self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.guild_pk(guild_id), keys.channel_visibility_sk(channel_id)),
        )

    def put_guild_visibility(
        self,
        guild_id: str,
        everyone_permissions: int,
        channels: dict[str, bool],
        staff: GuildStaff | None = None,
    ) -> None:
        """The guild's @everyone permissions and staff, and every channel's visibility,
        batched."""
        everyone = {
            "pk": keys.guild_pk(guild_id),
            "sk": keys.EVERYONE_SK,
            "permissions": everyone_permissions,
            **(staff or GuildStaff()).model_dump(),
        }
        items = [everyone] + [
            self._channel_values(guild_id, channel_id, public)
            for channel_id, public in channels.items()
        ]
        self._batch_write([{"PutRequest": {"Item": to_item(values)}} for values in items])

    @staticmethod
    def _channel_values(guild_id: str, channel_id: str, public: bool) -> dict[str, Any]:
        return {
            "pk": keys.guild_pk(guild_id),
            "sk": keys.channel_visibility_sk(channel_id),
            "guild_id": guild_id,
            "channel_id": channel_id,
            "public": public,
        }
