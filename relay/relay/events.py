"""The gateway dispatch types the relay forwards, and what of them it forwards."""

from __future__ import annotations

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
# The events that carry permission overwrites: IngestFunction keeps, per channel, whether
# @everyone can view it. They are trimmed to what that needs (`trimmed`).
CHANNEL_EVENTS: frozenset[str] = frozenset(
    {"GUILD_CREATE", "CHANNEL_CREATE", "CHANNEL_UPDATE", "CHANNEL_DELETE"}
)
# The dispatch types IngestFunction records; every other dispatch is counted and dropped.
FORWARDED_EVENTS: frozenset[str] = MESSAGE_EVENTS | CHANNEL_EVENTS

_CHANNEL_FIELDS = ("id", "type", "guild_id", "permission_overwrites")
# Discord's permission bits for staff: Administrator and Manage Server (the permission the
# bot's staff commands require). A role holding either is forwarded with GUILD_CREATE, so
# IngestFunction knows whose words are a staff member's.
_STAFF_PERMISSIONS = (1 << 3) | (1 << 5)


def _staff_role(role: dict[str, Any]) -> bool:
    try:
        return bool(int(role.get("permissions", "0")) & _STAFF_PERMISSIONS)
    except (TypeError, ValueError):
        return False


_OVERWRITE_FIELDS = ("id", "type", "allow", "deny")


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


def trimmed(name: str, payload: dict[str, Any]) -> dict[str, Any]:
    """What of an event is forwarded: a message event whole; a channel event only its id,
    type, guild and overwrites; GUILD_CREATE only the guild's id, owner and availability,
    the @everyone role (the role whose id is the guild's) and the staff roles (Administrator
    or Manage Server), and its channels so trimmed, so that a big guild (members,
    presences, emojis, threads) stays far below the batch bound."""
    if name == "GUILD_CREATE":
        guild_id = payload.get("id")
        slim: dict[str, Any] = _only(payload, ("id", "owner_id", "unavailable"))
        roles = payload.get("roles")
        if isinstance(roles, list):
            slim["roles"] = [
                _only(role, ("id", "permissions"))
                for role in roles
                if isinstance(role, dict) and (role.get("id") == guild_id or _staff_role(role))
            ]
        channels = payload.get("channels")
        if isinstance(channels, list):
            slim["channels"] = [_channel(channel) for channel in channels]
        return slim
    if name in CHANNEL_EVENTS:
        trimmed_channel: dict[str, Any] = _channel(payload)
        return trimmed_channel
    return payload
