"""Reading a channel's past through Discord's REST API: `GET /channels/{id}/messages`.

Needs View Channel and Read Message History in the channel; without them Discord answers
403 (Missing Access, 50001) and an unknown or deleted channel 404 (Unknown Channel, 10003),
both raised as `DiscordApiError`. Rate limits are the client's (botmemory.discord.limits):
this route's bucket is per channel, and the wait its headers announce is told to the caller
(`wait_before`), so a queue can delay the next page rather than a function sleeping.
"""

from __future__ import annotations

import re
from typing import Any

from botmemory.discord.limits import route_key
from botmemory.discord.rest import DiscordApi

PAGE_LIMIT = 100  # Discord's most messages per page (1 to 100)
_SNOWFLAKE = re.compile(r"^[0-9]{1,20}$")


class HistoryApi(DiscordApi):
    """The REST client, with the one read of a channel's history catching up needs."""

    def channel_messages(
        self, channel_id: str, after: str, limit: int = PAGE_LIMIT
    ) -> list[dict[str, Any]]:
        """Up to `limit` messages of the channel with ids after `after` (the oldest such),
        oldest first whatever order Discord answers in; what is not a message object is
        left out."""
        for value, what in ((channel_id, "channel id"), (after, "after")):
            if not _SNOWFLAKE.match(value):
                raise ValueError(f"{what} is not a snowflake")
        limit = min(max(limit, 1), PAGE_LIMIT)
        answer = self._request(
            "GET", f"{_path(channel_id)}?after={after}&limit={limit}", bot_auth=True
        )
        if not isinstance(answer, list):
            return []
        messages = [m for m in answer if isinstance(m, dict) and _is_id(m.get("id"))]
        return sorted(messages, key=lambda m: int(m["id"]))

    def wait_before(self, channel_id: str) -> float:
        """Seconds before the channel's next page may be asked for (0: now)."""
        return self._limits.bucket_wait(route_key("GET", _path(channel_id)))


def _path(channel_id: str) -> str:
    return f"/channels/{channel_id}/messages"


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and bool(_SNOWFLAKE.match(value))
