"""The samples of what Discord sends: a batch of gateway events as the relay forwards them,
and signed interactions (slash commands) as the Function URL delivers them."""

from __future__ import annotations

import json
from typing import Any

from nacl.signing import SigningKey

from botmemory.discord.interactions import ApplicationCommandType, InteractionType, OptionType
from scripts.aws_samples import function_url_event
from scripts.sample_world import (
    ALICE,
    BASE_MS,
    BOB,
    BOT,
    CHANNEL,
    GUILD,
    TEST_SEED,
    TIMESTAMP,
    snowflake,
    user,
)


def message(n: int, author: tuple[str, str], content: str, bot: bool = False) -> dict[str, Any]:
    at_ms = BASE_MS + n * 30_000
    ts = f"2026-01-01T00:{n // 2:02d}:{(n % 2) * 30:02d}.000000+00:00"
    return {
        "t": "MESSAGE_CREATE",
        "d": {
            "id": snowflake(at_ms, n),
            "channel_id": CHANNEL,
            "guild_id": GUILD,
            "author": user(*author, bot=bot),
            "member": {"nick": None, "roles": []},
            "content": content,
            "timestamp": ts,
            "edited_timestamp": None,
            "mentions": [],
            "attachments": [],
            "embeds": [],
            "type": 0,
        },
    }


def gateway_batch() -> dict[str, Any]:
    alice, bob = (ALICE, "Alice"), (BOB, "Bob")
    lines = [
        (alice, "Hi! I'm a nurse and I love hiking in the Alps."),
        (bob, "Nice. I use Neovim for everything, by the way."),
        (alice, "I live in Lyon these days."),
        (bob, "Alice likes sushi, I think."),
        (alice, "I'm allergic to peanuts, so no satay for me."),
        (bob, "I'm working on a tiny synthesizer project."),
    ]
    events = [message(i, who, text) for i, (who, text) in enumerate(lines)]
    events.append(message(len(lines), (BOT, "Memorybot"), "Noted, both of you!", bot=True))
    first, second = events[0]["d"], events[1]["d"]
    edited = dict(
        events[2]["d"],
        content="I live in Lyon, near the river.",
        edited_timestamp="2026-01-01T00:10:00.000000+00:00",
    )
    events += [
        {"t": "MESSAGE_UPDATE", "d": edited},
        {
            "t": "MESSAGE_REACTION_ADD",
            "d": {
                "user_id": BOB,
                "channel_id": CHANNEL,
                "message_id": first["id"],
                "guild_id": GUILD,
                "emoji": {"id": None, "name": "👍"},
                "member": {"user": user(BOB, "Bob"), "nick": None, "roles": []},
                "message_author_id": ALICE,
            },
        },
        {
            "t": "MESSAGE_REACTION_REMOVE",
            "d": {
                "user_id": BOB,
                "channel_id": CHANNEL,
                "message_id": first["id"],
                "guild_id": GUILD,
                "emoji": {"id": None, "name": "👍"},
            },
        },
        {
            "t": "MESSAGE_REACTION_REMOVE_EMOJI",
            "d": {
                "channel_id": CHANNEL,
                "message_id": second["id"],
                "guild_id": GUILD,
                "emoji": {"id": None, "name": "🎹"},
            },
        },
        {
            "t": "MESSAGE_REACTION_REMOVE_ALL",
            "d": {"channel_id": CHANNEL, "message_id": second["id"], "guild_id": GUILD},
        },
        {
            "t": "MESSAGE_DELETE",
            "d": {"id": events[3]["d"]["id"], "channel_id": CHANNEL, "guild_id": GUILD},
        },
        {
            "t": "MESSAGE_DELETE_BULK",
            "d": {
                "ids": [snowflake(BASE_MS - 60_000, 90), snowflake(BASE_MS - 30_000, 91)],
                "channel_id": CHANNEL,
                "guild_id": GUILD,
            },
        },
    ]
    return {"events": events}


def signed(interaction: dict[str, Any], request_id: str) -> dict[str, Any]:
    body = json.dumps(interaction, separators=(",", ":"))
    signature = SigningKey(TEST_SEED).sign((TIMESTAMP + body).encode()).signature.hex()
    return function_url_event(
        body, {"x-signature-ed25519": signature, "x-signature-timestamp": TIMESTAMP}, request_id
    )


def command(
    interaction_id: str,
    name: str,
    sub: str,
    options: dict[str, Any] | None = None,
    permissions: str = "0",
    user_id: str = ALICE,
) -> dict[str, Any]:
    given = [
        {
            "name": key,
            "type": OptionType.USER if key == "member" else OptionType.STRING,
            "value": value,
        }
        for key, value in (options or {}).items()
    ]
    return {
        "id": interaction_id,
        "application_id": BOT,
        "type": InteractionType.APPLICATION_COMMAND,
        "token": "sample-interaction-token",
        "version": 1,
        "guild_id": GUILD,
        "channel_id": CHANNEL,
        "member": {
            "user": user(user_id, "Alice" if user_id == ALICE else "Bob"),
            "roles": [],
            "permissions": permissions,
            "nick": None,
        },
        "data": {
            "id": "1400000000000000001",
            "name": name,
            "type": ApplicationCommandType.CHAT_INPUT,
            "options": [{"name": sub, "type": OptionType.SUB_COMMAND, "options": given}]
            if sub
            else given,
        },
    }
