"""Where the deployed keyword leg keeps each passage (botmemory.search.keyword_shards): the
one owner of the shards' object keys.

    <prefix>/<server>/facts.sqlite                       a server's facts
    <prefix>/<server>/c<channel id>/episodes.sqlite      a channel's episodes and summaries
    <prefix>/<server>/c<channel id>/m<YYYY-MM>.sqlite    a channel's messages of one month

`<server>` is `g<guild id>` or `dm`. A message's month is its id's (the snowflake's time,
UTC), never the time of its latest words, so an edit lands where the message is. Months keep
every object small and all but the newest unchanging: a round rewrites this month's shard,
and a reader's copies of the others stay valid. Every key is derived from a passage's id,
so adding and removing by id reach the same object.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from botmemory.snowflake import snowflake_ms
from botmemory.storage.keys import server_scope_of

FACTS_SHARD = "facts"
EPISODES_SHARD = "episodes"
SHARD_SUFFIX = ".sqlite"
_SNOWFLAKE = re.compile(r"[0-9]{1,20}")


def server_part(scope: str) -> str:
    """The folder of a scope's server: `g<guild id>` or `dm` (a persona's is its server's)."""
    server = server_scope_of(scope)
    if server == "dm":
        return "dm"
    if _SNOWFLAKE.fullmatch(server):
        return f"g{server}"
    raise ValueError(f"scope {scope!r} names no server")


def server_prefix(prefix: str, scope: str) -> str:
    return f"{prefix}/{server_part(scope)}/"


def facts_key(prefix: str, scope: str) -> str:
    return f"{server_prefix(prefix, scope)}{FACTS_SHARD}{SHARD_SUFFIX}"


def channel_prefix(prefix: str, scope: str, channel_id: str) -> str:
    """The folder of a channel's shards; ValueError for a channel id that is not a snowflake
    (it would name another key)."""
    if not _SNOWFLAKE.fullmatch(channel_id):
        raise ValueError(f"channel id {channel_id!r} is not a snowflake")
    return f"{server_prefix(prefix, scope)}c{channel_id}/"


def month_of(snowflake: str) -> str:
    return datetime.fromtimestamp(snowflake_ms(snowflake) / 1000, tz=UTC).strftime("%Y-%m")


def key_of(prefix: str, scope: str, passage_id: str) -> str:
    """The shard a passage lives in, from its id (botmemory.storage.keys): "M#<channel>#<message
    id>" a message, "E#<channel>#..." and "S#<channel>#..." an episode or archived summary,
    "F#<scope>#..." a fact. ValueError for an id of no known form."""
    kind, _, rest = passage_id.partition("#")
    if kind == "F":
        return facts_key(prefix, scope)
    channel, _, item = rest.partition("#")
    if kind == "M" and _SNOWFLAKE.fullmatch(item):
        return f"{channel_prefix(prefix, scope, channel)}m{month_of(item)}{SHARD_SUFFIX}"
    if kind in ("E", "S") and item:
        return f"{channel_prefix(prefix, scope, channel)}{EPISODES_SHARD}{SHARD_SUFFIX}"
    raise ValueError(f"passage id {passage_id[:80]!r} is of no known form")


def scope_of_key(prefix: str, key: str) -> str:
    """The server scope a shard's key names (a guild id, or `dm`): the inverse of
    `server_part`."""
    server = key.removeprefix(f"{prefix}/").partition("/")[0]
    return server.removeprefix("g") if server != "dm" else "dm"


def fact_scope(passage_id: str) -> str:
    """The scope a fact's passage id holds ("F#<scope>#<user>#<fact>")."""
    return passage_id.split("#")[1]
