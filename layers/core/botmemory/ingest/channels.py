"""Which channels `@everyone` can view, and who a guild's staff are, from the guild, role,
channel and thread events the relay forwards.

One small item per channel (public or not, and the @everyone overwrite's View Channel that
decided it) and one per guild (the @everyone role's permissions, the owner, the staff
roles). A channel is public when @everyone may view it: its guild permissions include
VIEW_CHANNEL and no @everyone overwrite denies it, or an @everyone overwrite allows it (or
@everyone is Administrator). When @everyone's permissions change (GUILD_ROLE_UPDATE of the
role whose id is the guild's, GUILD_UPDATE), every channel of the guild is recomputed from
the overwrite kept on its item.

A thread takes its parent's visibility, resolved when read (`channel_is_public`): the
thread's item holds its parent's id, so a parent that changes later carries its threads
along, whatever order the events arrive in, and no event ever rewrites threads. A private
thread is private, and so is a thread whose parent is unknown. Anything crossing channels
uses only public ones; a channel whose visibility is unknown counts as private.

Staff: the owner, and members with a role that has Administrator or Manage Server.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import IntEnum, StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from botmemory.discord.interactions import Permissions
from botmemory.records import GuildStaff
from botmemory.snowflake import Snowflake
from botmemory.storage.channels import GuildUnseen, StoredChannel, ThreadRef
from botmemory.storage.repository import MemoryRepository

GUILD_CREATE = "GUILD_CREATE"
GUILD_UPDATE = "GUILD_UPDATE"
# The bot removed from a guild, or (`unavailable`) an outage: its purge scheduled or not
# (botmemory.people.server_removal; IngestFunction's recorder hands it there).
GUILD_DELETE = "GUILD_DELETE"
GUILD_ROLE_CREATE = "GUILD_ROLE_CREATE"
GUILD_ROLE_UPDATE = "GUILD_ROLE_UPDATE"
GUILD_ROLE_DELETE = "GUILD_ROLE_DELETE"
CHANNEL_CREATE = "CHANNEL_CREATE"
CHANNEL_UPDATE = "CHANNEL_UPDATE"
CHANNEL_DELETE = "CHANNEL_DELETE"
THREAD_CREATE = "THREAD_CREATE"
THREAD_UPDATE = "THREAD_UPDATE"
THREAD_DELETE = "THREAD_DELETE"
THREAD_LIST_SYNC = "THREAD_LIST_SYNC"
CHANNEL_EVENTS = frozenset({CHANNEL_CREATE, CHANNEL_UPDATE, CHANNEL_DELETE})
THREAD_EVENTS = frozenset({THREAD_CREATE, THREAD_UPDATE, THREAD_DELETE})
# Every event this module keeps something of (IngestFunction hands them here).
GUILD_EVENTS = frozenset(
    {
        GUILD_CREATE,
        GUILD_UPDATE,
        GUILD_DELETE,
        GUILD_ROLE_CREATE,
        GUILD_ROLE_UPDATE,
        GUILD_ROLE_DELETE,
    }
    | CHANNEL_EVENTS
    | THREAD_EVENTS
    | {THREAD_LIST_SYNC}
)

# Discord allows 500 channels and 250 roles per guild; far beyond is not a real payload.
MAX_CHANNELS = 1_000
MAX_OVERWRITES = 1_000
# Active threads are not capped by Discord; a guild part beyond this is not a real payload.
MAX_THREADS = 10_000

# A permission set: Discord writes it as a decimal string of a 64-bit integer.
PermissionBits = Annotated[int, Field(ge=0, lt=1 << 64)]
# What decides visibility: @everyone's View Channel, and Administrator (overwrites void).
_VISIBILITY_BITS = Permissions.VIEW_CHANNEL | Permissions.ADMINISTRATOR


class OverwriteType(IntEnum):
    """A permission overwrite's `type`: whom it applies to."""

    ROLE = 0
    MEMBER = 1


class ChannelType(IntEnum):
    """The thread types of a channel's `type`; the others are channels."""

    ANNOUNCEMENT_THREAD = 10
    PUBLIC_THREAD = 11
    PRIVATE_THREAD = 12


class EveryoneView(StrEnum):
    """What a channel's @everyone overwrite says of View Channel."""

    ALLOW = "allow"
    DENY = "deny"
    NONE = "none"


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


class Thread(_Payload):
    id: Snowflake
    type: int = Field(default=ChannelType.PUBLIC_THREAD, ge=0)
    guild_id: Snowflake | None = None
    parent_id: Snowflake | None = None

    def ref(self) -> ThreadRef:
        return ThreadRef(self.id, self.parent_id, self.type == ChannelType.PRIVATE_THREAD)


class GuildCreate(_Payload):
    id: Snowflake
    owner_id: Snowflake | None = None
    unavailable: bool = False
    roles: list[Role] = Field(default=[], max_length=MAX_OVERWRITES)
    channels: list[Channel] = Field(default=[], max_length=MAX_CHANNELS)
    threads: list[Thread] = Field(default=[], max_length=MAX_THREADS)


class GuildUpdate(_Payload):
    id: Snowflake
    owner_id: Snowflake | None = None
    roles: list[Role] = Field(max_length=MAX_OVERWRITES)


class RoleChange(_Payload):
    guild_id: Snowflake
    role: Role


class RoleDelete(_Payload):
    guild_id: Snowflake
    role_id: Snowflake


class ThreadListSync(_Payload):
    guild_id: Snowflake
    threads: list[Thread] = Field(default=[], max_length=MAX_THREADS)


# Staff: the owner, and members with a role that has Administrator or Manage Server (the
# permission the staff commands require). Their words may teach a persona on their own.
STAFF_PERMISSIONS = Permissions.ADMINISTRATOR | Permissions.MANAGE_GUILD


@dataclass(frozen=True)
class ChannelChange:
    """What one event changed: how many items were written or deleted, or why nothing."""

    items: int = 0
    ignored: str = ""


def everyone_view(guild_id: str, overwrites: Iterable[Overwrite]) -> EveryoneView:
    """The channel's @everyone overwrite (the role overwrite whose id is the guild's)."""
    for overwrite in overwrites:
        if overwrite.id == guild_id and overwrite.type == OverwriteType.ROLE:
            if overwrite.allow & Permissions.VIEW_CHANNEL:
                return EveryoneView.ALLOW
            if overwrite.deny & Permissions.VIEW_CHANNEL:
                return EveryoneView.DENY
    return EveryoneView.NONE


def can_view(everyone_permissions: int, view: str) -> bool:
    """Whether @everyone can view a channel whose @everyone overwrite says `view`; an
    unknown `view` (an item older than the field) is private."""
    if everyone_permissions & Permissions.ADMINISTRATOR:  # overwrites do not apply
        return True
    if view == EveryoneView.ALLOW:
        return True
    if view == EveryoneView.NONE:
        return bool(everyone_permissions & Permissions.VIEW_CHANNEL)
    return False


def everyone_can_view(
    guild_id: str, everyone_permissions: int, overwrites: Iterable[Overwrite]
) -> bool:
    """Whether @everyone (the role whose id is the guild's) can view a channel."""
    return can_view(everyone_permissions, everyone_view(guild_id, overwrites))


def _stored(guild_id: str, everyone: int, channel: Channel) -> StoredChannel:
    view = everyone_view(guild_id, channel.permission_overwrites)
    return StoredChannel(channel.id, can_view(everyone, view), view)


def _staff(owner_id: str | None, roles: Iterable[Role]) -> GuildStaff:
    return GuildStaff(
        owner_id=owner_id,
        role_ids=sorted(r.id for r in roles if r.permissions & STAFF_PERMISSIONS),
    )


class ChannelVisibility:
    """Keeps the channel visibility and staff items up to date from the guild events."""

    def __init__(self, repository: MemoryRepository) -> None:
        self._repository = repository

    def apply(self, name: str, payload: dict[str, Any]) -> ChannelChange:
        """Write what one event says; ValueError (pydantic's included) when it is malformed."""
        if name == GUILD_CREATE:
            return self._guild_create(GuildCreate.model_validate(payload))
        if name == GUILD_UPDATE:
            return self._guild_update(GuildUpdate.model_validate(payload))
        if name in (GUILD_ROLE_CREATE, GUILD_ROLE_UPDATE):
            change = RoleChange.model_validate(payload)
            return self._role(change.guild_id, change.role)
        if name == GUILD_ROLE_DELETE:
            deleted = RoleDelete.model_validate(payload)
            return self._role(deleted.guild_id, Role(id=deleted.role_id, permissions=0))
        if name in THREAD_EVENTS:
            return self._thread(name, Thread.model_validate(payload))
        if name == THREAD_LIST_SYNC:
            sync = ThreadListSync.model_validate(payload)
            self._repository.put_threads(sync.guild_id, [t.ref() for t in sync.threads])
            return ChannelChange(items=len(sync.threads))
        if name not in CHANNEL_EVENTS:
            raise ValueError(f"not a guild event: {name[:60]!r}")
        return self._channel(name, Channel.model_validate(payload))

    def _channel(self, name: str, channel: Channel) -> ChannelChange:
        if channel.guild_id is None:
            return ChannelChange(ignored="not a guild channel")
        if name == CHANNEL_DELETE:
            self._repository.delete_channel_visibility(channel.guild_id, channel.id)
            return ChannelChange(items=1)
        # Before the guild's GUILD_CREATE, its @everyone permissions are unknown: only an
        # explicit allow makes the channel public.
        everyone = self._repository.everyone_permissions(channel.guild_id) or 0
        stored = _stored(channel.guild_id, everyone, channel)
        self._repository.put_channels(channel.guild_id, [stored])
        return ChannelChange(items=1)

    def _thread(self, name: str, thread: Thread) -> ChannelChange:
        if thread.guild_id is None:
            return ChannelChange(ignored="not a guild thread")
        if name == THREAD_DELETE:
            self._repository.delete_channel_visibility(thread.guild_id, thread.id)
        else:
            self._repository.put_threads(thread.guild_id, [thread.ref()])
        return ChannelChange(items=1)

    def _guild_create(self, guild: GuildCreate) -> ChannelChange:
        if guild.unavailable:
            return ChannelChange(ignored="guild unavailable (outage)")
        everyone = _everyone(guild.id, guild.roles)
        channels = [_stored(guild.id, everyone.permissions, c) for c in guild.channels]
        threads = [t.ref() for t in guild.threads]
        self._repository.put_guild_visibility(
            guild.id,
            everyone.permissions,
            channels,
            _staff(guild.owner_id, guild.roles),
            threads,
        )
        return ChannelChange(items=1 + len(channels) + len(threads))

    def _guild_update(self, guild: GuildUpdate) -> ChannelChange:
        everyone = _everyone(guild.id, guild.roles)
        before = self._repository.set_guild(
            guild.id, everyone.permissions, _staff(guild.owner_id, guild.roles)
        )
        return ChannelChange(items=1 + self._recompute(guild.id, before, everyone.permissions))

    def _role(self, guild_id: str, role: Role) -> ChannelChange:
        is_everyone = role.id == guild_id
        try:
            before = self._repository.set_role(
                guild_id,
                role.id,
                staff=bool(role.permissions & STAFF_PERMISSIONS),
                everyone_permissions=role.permissions if is_everyone else None,
            )
        except GuildUnseen:
            return ChannelChange(ignored="guild not seen yet (no GUILD_CREATE recorded)")
        changed = self._recompute(guild_id, before, role.permissions) if is_everyone else 0
        return ChannelChange(items=1 + changed)

    def _recompute(self, guild_id: str, before: int | None, everyone: int) -> int:
        """After @everyone's permissions changed: every stored channel whose visibility
        that changes is rewritten. How many were."""
        if before is not None and not (before ^ everyone) & _VISIBILITY_BITS:
            return 0  # neither View Channel nor Administrator changed: nothing can
        changed = [
            replace(stored, public=public)
            for stored in self._repository.stored_channels(guild_id)
            if (public := can_view(everyone, stored.everyone_view)) != stored.public
        ]
        self._repository.put_channels(guild_id, changed)
        return len(changed)


def _everyone(guild_id: str, roles: list[Role]) -> Role:
    everyone = next((role for role in roles if role.id == guild_id), None)
    if everyone is None:
        raise ValueError("guild without its @everyone role (the role whose id is the guild's)")
    return everyone
