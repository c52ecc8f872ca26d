"""Builders for raw Discord gateway dispatch payloads, shaped as Discord sends them (for the
tests and the bench: runs without Discord)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any

from botmemory.snowflake import DISCORD_EPOCH_MS

GUILD = "100000000000000001"
OTHER_GUILD = "100000000000000002"
CHANNEL = "200000000000000001"
ALICE = "300000000000000001"
BOB = "300000000000000002"
CAROL = "300000000000000003"
BOT = "399999999999999999"
NAMES = {ALICE: "Alice", BOB: "Bob", CAROL: "Carol", BOT: "Memorybot"}

_sequence = count(1)


def snowflake(at_ms: int) -> str:
    """A unique snowflake whose timestamp part is `at_ms`."""
    return str(((at_ms - DISCORD_EPOCH_MS) << 22) | (next(_sequence) & 0x3FFFFF))


def iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).isoformat()


def user(user_id: str, *, bot: bool = False) -> dict[str, Any]:
    return {
        "id": user_id,
        "username": NAMES.get(user_id, "user").lower(),
        "global_name": NAMES.get(user_id),
        "bot": bot,
    }


def image(description: str | None, content_type: str = "image/png") -> dict[str, Any]:
    """An attachment as Discord sends it, with its alt text (`description`) if given."""
    found: dict[str, Any] = {
        "id": "1400000000000000001",
        "filename": "picture.png",
        "size": 2048,
        "url": "https://cdn.example.invalid/picture.png",
        "proxy_url": "https://media.example.invalid/picture.png",
        "content_type": content_type,
    }
    if description is not None:
        found["description"] = description
    return found


def message(
    author: str,
    content: str,
    at_ms: int,
    *,
    channel: str = CHANNEL,
    guild: str | None = GUILD,
    message_id: str | None = None,
    reply_to: str | None = None,
    attachments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "id": message_id or snowflake(at_ms),
        "channel_id": channel,
        "author": user(author, bot=author == BOT),
        "content": content,
        "timestamp": iso(at_ms),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "attachments": attachments or [],
        "embeds": [],
        "type": 0,
    }
    if guild:
        d["guild_id"] = guild
        d["member"] = {"nick": None, "roles": []}
    if reply_to:
        d["message_reference"] = {"message_id": reply_to, "channel_id": channel}
    return {"t": "MESSAGE_CREATE", "d": d}


def edit(original: dict[str, Any], content: str, at_ms: int) -> dict[str, Any]:
    d = dict(original["d"], content=content, edited_timestamp=iso(at_ms))
    return {"t": "MESSAGE_UPDATE", "d": d}


def delete(original: dict[str, Any]) -> dict[str, Any]:
    d = original["d"]
    return {
        "t": "MESSAGE_DELETE",
        "d": {"id": d["id"], "channel_id": d["channel_id"], "guild_id": d.get("guild_id")},
    }


def delete_bulk(originals: list[dict[str, Any]]) -> dict[str, Any]:
    d = originals[0]["d"]
    return {
        "t": "MESSAGE_DELETE_BULK",
        "d": {
            "ids": [o["d"]["id"] for o in originals],
            "channel_id": d["channel_id"],
            "guild_id": d.get("guild_id"),
        },
    }


def reaction(
    kind: str, original: dict[str, Any], user_id: str, emoji: str = "👍"
) -> dict[str, Any]:
    d = original["d"]
    payload: dict[str, Any] = {
        "channel_id": d["channel_id"],
        "message_id": d["id"],
        "guild_id": d.get("guild_id"),
    }
    if kind in ("MESSAGE_REACTION_ADD", "MESSAGE_REACTION_REMOVE"):
        payload.update(user_id=user_id, emoji={"id": None, "name": emoji})
        if kind == "MESSAGE_REACTION_ADD":
            payload["member"] = {"user": user(user_id), "nick": None, "roles": []}
            payload["message_author_id"] = d["author"]["id"]
    elif kind == "MESSAGE_REACTION_REMOVE_EMOJI":
        payload["emoji"] = {"id": None, "name": emoji}
    return {"t": kind, "d": payload}


def every_event_type(at_ms: int) -> list[dict[str, Any]]:
    """One conversation touching all eight recorded dispatch types, plus the bot's answer."""
    first = message(ALICE, "I love hiking in the Alps", at_ms)
    second = message(BOB, "nice", at_ms + 1000)
    third = message(BOB, "oops", at_ms + 2000)
    return [
        first,
        second,
        third,
        message(BOT, "Glad to hear it!", at_ms + 3000),
        edit(first, "I love hiking in the Dolomites", at_ms + 4000),
        delete(third),
        delete_bulk([second, third]),
        reaction("MESSAGE_REACTION_ADD", first, BOB),
        reaction("MESSAGE_REACTION_REMOVE", first, BOB),
        reaction("MESSAGE_REACTION_REMOVE_ALL", first, BOB),
        reaction("MESSAGE_REACTION_REMOVE_EMOJI", first, BOB),
    ]
