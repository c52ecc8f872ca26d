"""Discord gateway protocol numbers the relay's own client speaks (Discord's "Opcodes and
Status Codes" and "Gateway" pages, API v10). One owner: everything else imports them."""

from __future__ import annotations

import enum

GATEWAY_VERSION = 10
# Discord allows one IDENTIFY per this many seconds in each max_concurrency bucket.
IDENTIFY_WINDOW_SECONDS = 5.0
# Session starts a bot may make in Discord's daily window; past it Discord resets the token.
DAILY_SESSION_STARTS = 1_000
# After INVALID_SESSION Discord asks for a random wait of 1 to 5 seconds before the next try.
INVALID_SESSION_WAIT = (1.0, 5.0)


class Op(enum.IntEnum):
    DISPATCH = 0
    HEARTBEAT = 1
    IDENTIFY = 2
    RESUME = 6
    RECONNECT = 7
    INVALID_SESSION = 9
    HELLO = 10
    HEARTBEAT_ACK = 11


class CloseCode(enum.IntEnum):
    """Gateway close codes the relay acts on; others mean "reconnect and RESUME"."""

    UNKNOWN_ERROR = 4000
    INVALID_SEQ = 4007
    SESSION_TIMED_OUT = 4009
    AUTHENTICATION_FAILED = 4004
    INVALID_SHARD = 4010
    SHARDING_REQUIRED = 4011
    INVALID_API_VERSION = 4012
    INVALID_INTENTS = 4013
    DISALLOWED_INTENTS = 4014


# Reconnecting cannot help after these: the relay stops and says what to fix.
FATAL_CLOSE_CODES = frozenset(
    {
        CloseCode.AUTHENTICATION_FAILED,
        CloseCode.INVALID_SHARD,
        CloseCode.SHARDING_REQUIRED,
        CloseCode.INVALID_API_VERSION,
        CloseCode.INVALID_INTENTS,
        CloseCode.DISALLOWED_INTENTS,
    }
)
LOGIN_REFUSED = "the bot token is wrong or was reset; put the current one in the secret"
# Discord requires sharding from this many guilds per session (close code 4011).
GUILDS_PER_SHARD_LIMIT = 2_500
# The one line the relay logs for each: what it means and what the operator does.
FATAL_ADVICE = {
    CloseCode.AUTHENTICATION_FAILED: f"authentication failed: {LOGIN_REFUSED}",
    CloseCode.INVALID_SHARD: (
        'invalid shard: the shard count does not fit this bot (relay/README.md, "Sharding")'
    ),
    CloseCode.SHARDING_REQUIRED: (
        "sharding required: the bot is in too many guilds for one gateway session (Discord "
        f"requires sharding from {GUILDS_PER_SHARD_LIMIT:,} guilds); run more shards "
        '(relay/README.md, "Sharding")'
    ),
    CloseCode.INVALID_API_VERSION: (
        "invalid API version: Discord no longer accepts the relay's gateway version"
    ),
    CloseCode.INVALID_INTENTS: "invalid intents: the relay asks for an unknown intent",
    CloseCode.DISALLOWED_INTENTS: (
        "disallowed intents: enable Message Content Intent for the bot in the Developer Portal"
    ),
}
# The session is gone after these: reconnect with a new IDENTIFY.
NEW_SESSION_CLOSE_CODES = frozenset({CloseCode.INVALID_SEQ, CloseCode.SESSION_TIMED_OUT})
# The code the relay closes its own sockets with (handover, zombie connection, RECONNECT).
# Closing with 1000 or 1001 ends the session for Discord; any other code keeps it resumable.
RESUMABLE_CLOSE = CloseCode.UNKNOWN_ERROR
SESSION_ENDING_CLOSES = frozenset({1000, 1001})
assert RESUMABLE_CLOSE not in SESSION_ENDING_CLOSES  # nosec B101 # import-time self-check of this module's constants

# The intents the relay asks for: guilds, guild messages and reactions, direct messages
# and reactions, message content (privileged: enable it in the Developer Portal).
INTENTS = (1 << 0) | (1 << 9) | (1 << 10) | (1 << 12) | (1 << 13) | (1 << 15)
# GUILD_MEMBERS (privileged, RELAY_GUILD_MEMBERS_INTENT): members leaving (GUILD_MEMBER_REMOVE).
GUILD_MEMBERS_INTENT = 1 << 1


def identify_payload(
    token: str, shard_id: int, shard_count: int, *, members: bool = False
) -> dict[str, object]:
    return {
        "op": int(Op.IDENTIFY),
        "d": {
            "token": token,
            "intents": INTENTS | (GUILD_MEMBERS_INTENT if members else 0),
            "shard": [shard_id, shard_count],
            "properties": {"os": "linux", "browser": "discord-memory-relay", "device": "relay"},
        },
    }


def resume_payload(token: str, session_id: str, seq: int | None) -> dict[str, object]:
    return {"op": int(Op.RESUME), "d": {"token": token, "session_id": session_id, "seq": seq}}


def heartbeat_payload(seq: int | None) -> dict[str, object]:
    return {"op": int(Op.HEARTBEAT), "d": seq}


def gateway_address(base: str) -> str:
    """A gateway URL (Discord's, or a READY's resume_gateway_url) with the version and
    encoding the relay speaks: plain JSON text frames, no compression."""
    base = base.rstrip("/")
    return f"{base}/?v={GATEWAY_VERSION}&encoding=json"
