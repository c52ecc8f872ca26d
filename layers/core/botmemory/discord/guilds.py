"""The guilds the bot is in, as Discord's REST API lists them: `GET /users/@me/guilds`,
paged by guild id (`after`, up to 200 a page, ascending), with the bot token.

The one authoritative list, whatever the gateway said or missed: the census of servers
(botmemory.ops.census) compares it with the servers the table holds data of.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from botmemory.discord.rest import DiscordApi

PAGE_LIMIT = 200  # Discord's most guilds a page (1 to 200)
_SNOWFLAKE = re.compile(r"^[0-9]{1,20}$")


class GuildsApi(DiscordApi):
    """The REST client, with the listing of the bot's guilds."""

    def guild_ids_page(self, after: str, limit: int = PAGE_LIMIT) -> list[str]:
        """Ids of the bot's guilds above `after` (the first page: "0"), lowest first; what
        is not a guild object is left out."""
        if not _SNOWFLAKE.match(after):
            raise ValueError("after is not a snowflake")
        limit = min(max(limit, 1), PAGE_LIMIT)
        answer = self._request(
            "GET", f"/users/@me/guilds?after={after}&limit={limit}", bot_auth=True
        )
        if not isinstance(answer, list):
            return []
        found = {
            g["id"]
            for g in answer
            if isinstance(g, dict) and isinstance(g.get("id"), str) and _SNOWFLAKE.match(g["id"])
        }
        return sorted(found, key=int)

    def all_guild_ids(self) -> Iterator[str]:
        """Every guild the bot is in, page after page until a short one."""
        after = "0"
        while True:
            page = self.guild_ids_page(after)
            yield from page
            if len(page) < PAGE_LIMIT or int(page[-1]) <= int(after):
                return
            after = page[-1]
