"""The gateway dispatch types the relay forwards, and what of them it forwards."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MESSAGE_EVENTS: frozenset[str] = frozenset(
    {
        "MESSAGE_CREATE",
        "MESSAGE_UPDATE",
        "MESSAGE_DELETE",
        "MESSAGE_DELETE_BULK",
        "MESSAGE_REACTION_ADD",
        "MESSAGE_REACTION_REMOVE",
        "MESSAGE_REACTION_REMOVE_ALL",
        "MESSAGE_REACTION_REMOVE_EMOJI",
    }
)
# The events IngestFunction keeps channel visibility and staff from: per channel, whether
# @everyone can view it (a thread: its parent's); per guild, its owner and staff roles.
# They are trimmed to what that needs (`parts`).
GUILD_EVENTS: frozenset[str] = frozenset(
    {
        "GUILD_CREATE",
        "GUILD_UPDATE",
        # The bot removed from a guild (or, with `unavailable`, an outage): ingest schedules
        # the server's purge, cancelled if the bot comes back.
        "GUILD_DELETE",
        "GUILD_ROLE_CREATE",
        "GUILD_ROLE_UPDATE",
        "GUILD_ROLE_DELETE",
        "CHANNEL_CREATE",
        "CHANNEL_UPDATE",
        "CHANNEL_DELETE",
        "THREAD_CREATE",
        "THREAD_UPDATE",
        "THREAD_DELETE",
        "THREAD_LIST_SYNC",
    }
)
# A shard's READY, trimmed to its guilds' ids and its shard: ingest compares it with the
# servers the deployment knows, so a removal missed while the relay was down is purged too.
# Never split (`split`): a part would miss guilds.
# GUILD_MEMBER_REMOVE (only sent with the GUILD_MEMBERS intent: RELAY_GUILD_MEMBERS_INTENT),
# trimmed to its guild and the user's id: the member who left may be erased from it.
LIFECYCLE_EVENTS: frozenset[str] = frozenset({"READY", "GUILD_MEMBER_REMOVE"})
# The dispatch types IngestFunction records; every other dispatch is counted and dropped.
FORWARDED_EVENTS: frozenset[str] = MESSAGE_EVENTS | GUILD_EVENTS | LIFECYCLE_EVENTS

_CHANNEL_FIELDS = ("id", "type", "guild_id", "permission_overwrites")
_THREAD_FIELDS = ("id", "type", "guild_id", "parent_id")
_OVERWRITE_FIELDS = ("id", "type", "allow", "deny")
_ROLE_FIELDS = ("id", "permissions")
# Discord's permission bits for staff: Administrator and Manage Server (the permission the
# bot's staff commands require). Only these roles and @everyone go with a guild's payload.
_STAFF_PERMISSIONS = (1 << 3) | (1 << 5)
# The lists a big guild's payload is split along, when one event would not fit a batch.
_SPLIT_LISTS = ("channels", "threads")


def _staff_role(role: dict[str, Any]) -> bool:
    try:
        return bool(int(role.get("permissions", "0")) & _STAFF_PERMISSIONS)
    except (TypeError, ValueError):
        return False


def _only(value: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(value, dict):
        return value  # left for ingest to reject
    return {k: value[k] for k in fields if k in value}


def _channel(channel: Any) -> Any:
    slim = _only(channel, _CHANNEL_FIELDS)
    if isinstance(slim, dict) and isinstance(slim.get("permission_overwrites"), list):
        slim["permission_overwrites"] = [
            _only(o, _OVERWRITE_FIELDS) for o in slim["permission_overwrites"]
        ]
    return slim


def _guild(payload: dict[str, Any]) -> dict[str, Any]:
    """A guild's id, owner and availability, and only @everyone (the role whose id is the
    guild's) and the staff roles: what visibility and staff need of GUILD_CREATE/UPDATE."""
    guild_id = payload.get("id")
    slim: dict[str, Any] = _only(payload, ("id", "owner_id", "unavailable"))
    roles = payload.get("roles")
    if isinstance(roles, list):
        slim["roles"] = [
            _only(role, _ROLE_FIELDS)
            for role in roles
            if isinstance(role, dict) and (role.get("id") == guild_id or _staff_role(role))
        ]
    return slim


def _listed(payload: dict[str, Any], field: str, trim: Any) -> list[Any] | None:
    values = payload.get(field)
    return [trim(value) for value in values] if isinstance(values, list) else None


def _thread(thread: Any) -> Any:
    return _only(thread, _THREAD_FIELDS)


def _guild_create(payload: dict[str, Any]) -> dict[str, Any]:
    slim = _guild(payload)
    # When the bot joined the guild (only GUILD_CREATE has it): ingest tells a join from a
    # reconnect's replay by it (botmemory.catchup.on_join).
    slim.update(_only(payload, ("joined_at",)))
    for field, trim in (("channels", _channel), ("threads", _thread)):
        values = _listed(payload, field, trim)
        if values is not None:
            slim[field] = values
    return slim


def _role_change(payload: dict[str, Any]) -> dict[str, Any]:
    slim: dict[str, Any] = _only(payload, ("guild_id",))
    if "role" in payload:
        slim["role"] = _only(payload["role"], _ROLE_FIELDS)
    return slim


def _thread_list_sync(payload: dict[str, Any]) -> dict[str, Any]:
    slim: dict[str, Any] = _only(payload, ("guild_id", "channel_ids"))
    threads = _listed(payload, "threads", _thread)
    if threads is not None:
        slim["threads"] = threads  # without `members`: who is in a thread is not kept
    return slim


_TRIMMERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "GUILD_CREATE": _guild_create,
    "GUILD_UPDATE": _guild,
    "GUILD_DELETE": lambda payload: _only(payload, ("id", "unavailable")),
    "GUILD_ROLE_CREATE": _role_change,
    "GUILD_ROLE_UPDATE": _role_change,
    "GUILD_ROLE_DELETE": lambda payload: _only(payload, ("guild_id", "role_id")),
    "CHANNEL_CREATE": _channel,
    "CHANNEL_UPDATE": _channel,
    "CHANNEL_DELETE": _channel,
    "THREAD_CREATE": _thread,
    "THREAD_UPDATE": _thread,
    "THREAD_DELETE": _thread,
    "THREAD_LIST_SYNC": _thread_list_sync,
}


def _ready(payload: dict[str, Any]) -> dict[str, Any]:
    """The ids of the guilds a READY lists (unavailable ones are the bot's too), its shard."""
    guilds = payload.get("guilds")
    slim: dict[str, Any] = _only(payload, ("shard",))
    slim["guilds"] = (
        [g["id"] for g in guilds if isinstance(g, dict) and isinstance(g.get("id"), str)]
        if isinstance(guilds, list)
        else []
    )
    return slim


def _member_remove(payload: dict[str, Any]) -> dict[str, Any]:
    slim: dict[str, Any] = _only(payload, ("guild_id",))
    slim["user"] = _only(payload.get("user"), ("id",))
    return slim


_LIFECYCLE_TRIMMERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "READY": _ready,
    "GUILD_MEMBER_REMOVE": _member_remove,
}
assert set(_LIFECYCLE_TRIMMERS) == LIFECYCLE_EVENTS  # nosec B101 # an import-time self-check of this module's own tables, never input
assert set(_TRIMMERS) == GUILD_EVENTS  # nosec B101 # an import-time self-check of this module's own tables, never input; one trimmer for every guild event


def trimmed(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """What of an event is forwarded: a message event whole; a guild event only what
    ingest keeps (no members, presences, emojis, names or topics): a channel its id, type,
    guild and overwrites; a thread its id, type, guild and parent; a role its id and
    permissions; a guild its id, owner, @everyone and staff roles, and its channels and
    threads so trimmed."""
    trim = _TRIMMERS.get(name) or _LIFECYCLE_TRIMMERS.get(name)
    slim: dict[str, Any] = payload if trim is None else trim(payload)
    return slim


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


def split(slim: dict[str, Any], max_bytes: int) -> list[dict[str, Any]]:
    """A trimmed guild payload whose JSON exceeds `max_bytes`, as several payloads that each
    fit: every part keeps the rest of the payload (id, owner, roles) and takes a share of
    its channels and threads. Ingest reads each part as a whole event of its own (a part's
    channels are written, none is removed). One that fits, or has no list to split, is
    returned as it is."""
    if _size(slim) <= max_bytes or "guilds" in slim:  # a READY goes whole
        return [slim]
    items = [
        (field, value)
        for field in _SPLIT_LISTS
        if isinstance(slim.get(field), list)
        for value in slim[field]
    ]
    if not items:
        return [slim]
    head = {k: v for k, v in slim.items() if k not in _SPLIT_LISTS}
    # Each part is at most the head, the empty lists' brackets and its share of items.
    budget = max_bytes - _size({**head, **{field: [] for field in _SPLIT_LISTS}})
    parts: list[dict[str, Any]] = []
    current: dict[str, list[Any]] = {}
    used = 0
    for field, value in items:
        size = _size(value) + 1  # its comma
        if current and used + size > budget:
            parts.append({**head, **current})
            current, used = {}, 0
        current.setdefault(field, []).append(value)
        used += size
    parts.append({**head, **current})
    return parts
