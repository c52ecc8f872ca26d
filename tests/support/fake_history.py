"""Channels' past for the fake Discord REST server (tests/support/fake_discord.py):
`GET /channels/{id}/messages?after=&limit=` answered as Discord does, the 100 (at most)
oldest messages after `after`, newest first, each a message object without `guild_id`.

A test writes history as it stands now: `say` a message (at a time), `edit` it (its current
text and `edited_timestamp`), `delete` it (gone: never answered again), `lose_access` to a
channel (403, Missing Access) or `forget_channel` (404, Unknown Channel).
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any
from urllib.parse import parse_qs

_DISCORD_EPOCH_MS = 1_420_070_400_000


def snowflake(at_ms: int, sequence: int) -> str:
    return str(((at_ms - _DISCORD_EPOCH_MS) << 22) | (sequence & 0xFFF))


def _iso(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).isoformat()


class ChannelHistory:
    """Messages per channel as Discord holds them now."""

    def __init__(self) -> None:
        self.channels: dict[str, dict[str, dict[str, Any]]] = {}
        self.no_access: set[str] = set()
        self.unknown: set[str] = set()
        self._sequence = count(1)

    def say(
        self, channel_id: str, at_ms: int, author_id: str, content: str, *, name: str = ""
    ) -> str:
        message_id = snowflake(at_ms, next(self._sequence))
        self.channels.setdefault(channel_id, {})[message_id] = {
            "id": message_id,
            "channel_id": channel_id,
            "type": 0,
            "author": {"id": author_id, "username": name or f"user{author_id[-4:]}", "bot": False},
            "content": content,
            "timestamp": _iso(at_ms),
            "edited_timestamp": None,
            "attachments": [],
            "embeds": [],
            "mentions": [],
            "pinned": False,
        }
        return message_id

    def edit(self, channel_id: str, message_id: str, content: str, at_ms: int) -> None:
        message = self.channels[channel_id][message_id]
        message["content"] = content
        message["edited_timestamp"] = _iso(at_ms)

    def delete(self, channel_id: str, message_id: str) -> None:
        del self.channels[channel_id][message_id]

    def lose_access(self, channel_id: str) -> None:
        self.no_access.add(channel_id)

    def forget_channel(self, channel_id: str) -> None:
        self.unknown.add(channel_id)

    def answer(self, channel_id: str, query: str) -> tuple[int, Any]:
        if channel_id in self.no_access:
            return 403, {"message": "Missing Access", "code": 50001}
        if channel_id in self.unknown:
            return 404, {"message": "Unknown Channel", "code": 10003}
        params = parse_qs(query)
        try:
            after = int(params.get("after", ["0"])[0])
            limit = int(params.get("limit", ["50"])[0])
        except ValueError:
            return 400, {"message": "Invalid Form Body", "code": 50035}
        if not 1 <= limit <= 100:
            return 400, {"message": "Invalid Form Body", "code": 50035}
        held = self.channels.get(channel_id, {})
        newer = sorted(int(m) for m in held if int(m) > after)[:limit]
        return 200, [held[str(m)] for m in reversed(newer)]
