"""Guild, role, channel and thread dispatches shaped as Discord sends them (the fields
discord.py's own parser reads included), for the relay's tests and the end-to-end run."""

from __future__ import annotations

from typing import Any

from localrun import gateway as gw
from tests.relay.fake_discord import T0, complete

VIEW = 1 << 10
SEND = 1 << 11
ADMINISTRATOR = 1 << 3
MANAGE_GUILD = 1 << 5
MODS = "500000000000000001"
HELPERS = "500000000000000002"
GENERAL = "200000000000000101"
DEV = "200000000000000102"
STAFF_ROOM = "200000000000000103"
THREAD = "200000000000000201"
HIDDEN_THREAD = "200000000000000202"


def role(role_id: str, permissions: int, name: str = "role", position: int = 1) -> dict[str, Any]:
    return {
        "id": role_id,
        "name": name,
        "permissions": str(permissions),
        "position": position,
        "color": 0,
        "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
        "hoist": False,
        "managed": False,
        "mentionable": False,
        "icon": None,
        "unicode_emoji": None,
        "flags": 0,
    }


def overwrite(target: str, *, allow: int = 0, deny: int = 0) -> dict[str, Any]:
    return {"id": target, "type": 0, "allow": str(allow), "deny": str(deny)}


def channel(
    channel_id: str,
    *overwrites: dict[str, Any],
    topic: str = "a channel",
    guild: str | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": channel_id,
        "type": 0,
        "name": f"channel-{channel_id[-3:]}",
        "position": 0,
        "topic": topic,
        "nsfw": False,
        "parent_id": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "flags": 0,
        "permission_overwrites": list(overwrites),
    }
    if guild:
        payload["guild_id"] = guild
    return payload


def thread(thread_id: str, parent: str | None, *, kind: int = 11) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": thread_id,
        "type": kind,
        "guild_id": gw.GUILD,
        "parent_id": parent,
        "name": f"thread-{thread_id[-3:]}",
        "owner_id": gw.ALICE,
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": gw.iso(T0),
            "locked": False,
        },
    }
    return payload


def member(user_id: str, roles: list[str] | None = None) -> dict[str, Any]:
    return {
        "user": {**gw.user(user_id), "discriminator": "0", "avatar": None},
        "nick": None,
        "roles": roles or [],
        "joined_at": gw.iso(T0),
        "deaf": False,
        "mute": False,
        "flags": 0,
    }


def guild(
    everyone: int = VIEW | SEND,
    *,
    owner: str = gw.CAROL,
    channels: list[dict[str, Any]] | None = None,
    threads: list[dict[str, Any]] | None = None,
    members: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A GUILD_CREATE: #general and #dev public, #staff-room closed to @everyone; the
    moderators' role is staff (Manage Server), the helpers' is not."""
    if channels is None:
        channels = [
            channel(GENERAL),
            channel(DEV),
            channel(STAFF_ROOM, overwrite(gw.GUILD, deny=VIEW), overwrite(MODS, allow=VIEW)),
        ]
    return {
        "t": "GUILD_CREATE",
        "d": {
            "id": gw.GUILD,
            "name": "a guild",
            "icon": None,
            "owner_id": owner,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [
                role(gw.GUILD, everyone, "@everyone", 0),
                role(MODS, VIEW | MANAGE_GUILD, "mods", 2),
                role(HELPERS, VIEW | SEND, "helpers", 1),
            ],
            "channels": channels,
            "threads": threads if threads is not None else [thread(THREAD, GENERAL)],
            "members": members if members is not None else [member(gw.ALICE)],
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "member_count": len(members) if members is not None else 1,
            "large": False,
            "joined_at": gw.iso(T0),
            "unavailable": False,
        },
    }


def guild_update(everyone: int = VIEW | SEND, owner: str = gw.CAROL) -> dict[str, Any]:
    d = {k: v for k, v in guild(everyone, owner=owner)["d"].items()}
    for field in (
        "channels",
        "threads",
        "members",
        "presences",
        "voice_states",
        "joined_at",
        "unavailable",
    ):
        d.pop(field)
    return {"t": "GUILD_UPDATE", "d": d}


def role_event(name: str, role_id: str, permissions: int) -> dict[str, Any]:
    if name == "GUILD_ROLE_DELETE":
        return {"t": name, "d": {"guild_id": gw.GUILD, "role_id": role_id}}
    return {"t": name, "d": {"guild_id": gw.GUILD, "role": role(role_id, permissions)}}


def channel_event(name: str, channel_id: str, *overwrites: dict[str, Any]) -> dict[str, Any]:
    return {"t": name, "d": channel(channel_id, *overwrites, guild=gw.GUILD)}


def thread_event(name: str, thread_id: str, parent: str | None, kind: int = 11) -> dict[str, Any]:
    d = thread(thread_id, parent, kind=kind)
    if name == "THREAD_DELETE":
        d = {k: d[k] for k in ("id", "guild_id", "parent_id", "type")}
    elif name == "THREAD_CREATE":
        d["newly_created"] = True
    return {"t": name, "d": d}


def thread_list_sync(*threads: dict[str, Any]) -> dict[str, Any]:
    return {
        "t": "THREAD_LIST_SYNC",
        "d": {
            "guild_id": gw.GUILD,
            "channel_ids": sorted({t["parent_id"] for t in threads if t["parent_id"]}),
            "threads": list(threads),
            "members": [
                {"id": t["id"], "user_id": gw.ALICE, "join_timestamp": gw.iso(T0), "flags": 0}
                for t in threads
            ],
        },
    }


def every_documented_event() -> list[dict[str, Any]]:
    """One dispatch of every type the relay forwards, in an order a server could send them:
    the guild, a role and channel lifecycle, threads, and the eight message types."""
    first = gw.message(gw.ALICE, "I love hiking in the Alps", T0, channel=GENERAL)
    second = gw.message(gw.BOB, "nice", T0 + 1000, channel=GENERAL)
    new_channel = "200000000000000104"
    new_role = "500000000000000003"
    events = [
        guild(),
        guild_update(owner=gw.ALICE),
        role_event("GUILD_ROLE_CREATE", new_role, VIEW),
        role_event("GUILD_ROLE_UPDATE", new_role, VIEW | ADMINISTRATOR),
        role_event("GUILD_ROLE_DELETE", new_role, 0),
        channel_event("CHANNEL_CREATE", new_channel),
        channel_event("CHANNEL_UPDATE", new_channel, overwrite(gw.GUILD, deny=VIEW)),
        channel_event("CHANNEL_DELETE", new_channel),
        thread_event("THREAD_CREATE", HIDDEN_THREAD, STAFF_ROOM),
        thread_event("THREAD_UPDATE", HIDDEN_THREAD, STAFF_ROOM),
        thread_event("THREAD_DELETE", HIDDEN_THREAD, STAFF_ROOM),
        thread_list_sync(thread(THREAD, GENERAL)),
        # The bot removed from another server: its purge is scheduled.
        {"t": "GUILD_DELETE", "d": {"id": "100000000000000077"}},
        # A member left (sent only with the GUILD_MEMBERS intent): the user's id and the guild.
        {
            "t": "GUILD_MEMBER_REMOVE",
            "d": {"guild_id": gw.GUILD, "user": member(gw.CAROL)["user"]},
        },
        first,
        second,
        gw.edit(first, "I love hiking in the Dolomites", T0 + 2000),
        gw.reaction("MESSAGE_REACTION_ADD", first, gw.BOB),
        gw.reaction("MESSAGE_REACTION_REMOVE", first, gw.BOB),
        gw.reaction("MESSAGE_REACTION_REMOVE_EMOJI", first, gw.BOB),
        gw.reaction("MESSAGE_REACTION_REMOVE_ALL", first, gw.BOB),
        gw.delete(second),
        gw.delete_bulk([first]),
    ]
    return [complete(event) if event["t"].startswith("MESSAGE_") else event for event in events]
