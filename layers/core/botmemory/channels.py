"""Which channels `@everyone` can view, from the guild and channel events the relay forwards.

One small item per channel (public or not) and one per guild (the @everyone role's
permissions, which a later CHANNEL_CREATE or CHANNEL_UPDATE needs: those carry only the
channel's own overwrites). A channel is public when @everyone may view it: its guild
permissions include VIEW_CHANNEL and no @everyone overwrite denies it, or an @everyone
overwrite allows it. Anything crossing channels uses only public ones; a channel whose
visibility is unknown counts as private (`MemoryRepository.channel_is_public`).

Not followed (not forwarded): role permission changes (GUILD_ROLE_UPDATE) and threads.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from botmemory.interactions import Permissions
from botmemory.records import GuildStaff
from botmemory.repository import MemoryRepository
from botmemory.snowflake import Snowflake

GUILD_CREATE = "GUILD_CREATE"
CHANNEL_CREATE = "CHANNEL_CREATE"
CHANNEL_UPDATE = "CHANNEL_UPDATE"
CHANNEL_DELETE = "CHANNEL_DELETE"
CHANNEL_EVENTS = frozenset({GUILD_CREATE, CHANNEL_CREATE, CHANNEL_UPDATE, CHANNEL_DELETE})

# Discord allows 500 channels and 250 roles per guild; far beyond is not a real payload.
MAX_CHANNELS = 1_000
MAX_OVERWRITES = 1_000

# A permission set: Discord writes it as a decimal string of a 64-bit integer.
PermissionBits = Annotated[int, Field(ge=0, lt=1 << 64)]


class OverwriteType(IntEnum):
    """A permission overwrite's `type`: whom it applies to."""

    ROLE = 0
    MEMBER = 1


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Overwrite(_Payload):
    id: Snowflake
    type: int
    allow: PermissionBits = 0
    deny: PermissionBits = 0


class Role(_Payload):
    id: Snowflake
    permissions: PermissionBits


class Channel(_Payload):
    id: Snowflake
    type: int = Field(ge=0)
    # Absent inside GUILD_CREATE (the guild is the envelope's), present in CHANNEL_* events.
    guild_id: Snowflake | None = None
    permission_overwrites: list[Overwrite] = Field(default=[], max_length=MAX_OVERWRITES)


class GuildCreate(_Payload):
    id: Snowflake
    owner_id: Snowflake | None = None
    unavailable: bool = False
    roles: list[Role] = Field(default=[], max_length=MAX_OVERWRITES)
    channels: list[Channel] = Field(default=[], max_length=MAX_CHANNELS)


# Staff: the owner, and members with a role that has Administrator or Manage Server (the
# permission the staff commands require). Their words may teach a persona on their own.
STAFF_PERMISSIONS = Permissions.ADMINISTRATOR | Permissions.MANAGE_GUILD


@dataclass(frozen=True)
class ChannelChange:
    """What one event changed: how many items were written or deleted, or why nothing."""

    items: int = 0
    ignored: str = ""


def everyone_can_view(
    guild_id: str, everyone_permissions: int, overwrites: Iterable[Overwrite]
) -> bool:
    """Whether @everyone (the role whose id is the guild's) can view a channel."""
    if everyone_permissions & Permissions.ADMINISTRATOR:  # overwrites do not apply
        return True
    for overwrite in overwrites:
        if overwrite.id == guild_id and overwrite.type == OverwriteType.ROLE:
            if overwrite.allow & Permissions.VIEW_CHANNEL:
                return True
            if overwrite.deny & Permissions.VIEW_CHANNEL:
                return False
    return bool(everyone_permissions & Permissions.VIEW_CHANNEL)


class ChannelVisibility:
    """Keeps the channel visibility items up to date from the four events."""

    def __init__(self, repository: MemoryRepository) -> None:
        self._repository = repository

    def apply(self, name: str, payload: dict[str, Any]) -> ChannelChange:
        """Write what one event says; ValueError (pydantic's included) when it is malformed."""
        if name == GUILD_CREATE:
            return self._guild_create(GuildCreate.model_validate(payload))
        if name not in CHANNEL_EVENTS:
            raise ValueError(f"not a channel event: {name[:60]!r}")
        channel = Channel.model_validate(payload)
        if channel.guild_id is None:
            return ChannelChange(ignored="not a guild channel")
        if name == CHANNEL_DELETE:
            self._repository.delete_channel_visibility(channel.guild_id, channel.id)
            return ChannelChange(items=1)
        # Before the guild's GUILD_CREATE, its @everyone permissions are unknown: only an
        # explicit allow makes the channel public.
        everyone = self._repository.everyone_permissions(channel.guild_id) or 0
        public = everyone_can_view(channel.guild_id, everyone, channel.permission_overwrites)
        self._repository.put_channel_visibility(channel.guild_id, channel.id, public)
        return ChannelChange(items=1)

    def _guild_create(self, guild: GuildCreate) -> ChannelChange:
        if guild.unavailable:
            return ChannelChange(ignored="guild unavailable (outage)")
        everyone = next((role for role in guild.roles if role.id == guild.id), None)
        if everyone is None:
            raise ValueError("guild without its @everyone role (the role whose id is the guild's)")
        visibility = {
            channel.id: everyone_can_view(
                guild.id, everyone.permissions, channel.permission_overwrites
            )
            for channel in guild.channels
        }
        staff = GuildStaff(
            owner_id=guild.owner_id,
            role_ids=sorted(r.id for r in guild.roles if r.permissions & STAFF_PERMISSIONS),
        )
        self._repository.put_guild_visibility(guild.id, everyone.permissions, visibility, staff)
        return ChannelChange(items=1 + len(visibility))
