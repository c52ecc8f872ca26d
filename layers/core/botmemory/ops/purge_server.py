"""Purge one server's data: every item the table holds for it, then its search index.

    python -m botmemory.ops.purge_server <guild id>
        (TABLE_NAME, MEMORY_SEARCH_INDEX and EMBEDDING_MODEL from the environment)

For a server the bot has left (remove the bot first: while it is in the server, new messages
are remembered again). The table: its channels' partitions, its scope partition and its
personas' scopes, its members' items in those scopes (not what they said in other servers
or in direct messages), its channel visibility and answer rate counters
(botmemory.storage.server_purge). Finding them takes one paginated Scan of the whole table
(no index is keyed by server): about one read unit per 8 KB of the table, eventually
consistent, so a 10 GB table costs some 1.3 million read units and minutes. Then the
server's search index, as `python -m botmemory.ops.purge_index` removes it
(ShardedS3VectorsIndex.drop_scope: a marker in the table, kept for an hour so that no write
racing the purge creates the index again; DeleteIndex; its passages in the shared index);
another index (sqlite, local) has the server's passages removed, and the server leaves
those the deployment knows. Needs the table's Scan, Query, BatchWriteItem and DeleteItem and
purge_index's s3vectors rights: the operator's, not a function's. Running it twice changes nothing the second time (the marker's hour starts
again). Exit codes: 0 done, 1 a bad argument, a configuration or an AWS error (what was
deleted before the error stays deleted; run it again to finish).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import SystemClock
from botmemory.search import build_search_index
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.port import SearchIndex
from botmemory.search.shards import ShardedS3VectorsIndex
from botmemory.settings.config import ConfigError, get_settings
from botmemory.storage import keys
from botmemory.storage.keys import server_scope_of
from botmemory.storage.repository import open_repository
from botmemory.storage.server_purge import ServerPurge
from botmemory.storage.table import UnprocessedItemsError

_GUILD = re.compile(r"[0-9]{1,20}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.purge_server",
        description="Delete every item of one server from the table, then its search index.",
    )
    parser.add_argument("guild", help="the guild id")
    args = parser.parse_args(argv)
    if not _GUILD.fullmatch(args.guild):
        print("error: the server is a guild id (1 to 20 digits)", file=sys.stderr)
        return 1
    try:
        settings = get_settings()
        repository = open_repository(settings.table_name)
        index = build_search_index(settings, repository, SystemClock())
        purge = repository.purge_partitions(repository.server_partitions(args.guild))
        if repository.forget_known_server(args.guild):  # among the servers it knows
            purge.deleted[keys.kind_of(args.guild).value] += 1
        print(_table_line(args.guild, purge))
        print(f"server {args.guild}: {_drop_index(index, args.guild)}")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError, UnprocessedItemsError) as exc:
        print(f"error: AWS request failed: {exc}; run it again to finish", file=sys.stderr)
        return 1
    return 0


def _table_line(guild: str, purge: ServerPurge) -> str:
    if not purge.total:
        return f"server {guild}: nothing of it left in the table"
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(purge.deleted.items()))
    return (
        f"server {guild}: {purge.total} items deleted from {purge.partitions} partitions "
        f"({purge.channels} channels): {kinds}"
    )


def _drop_index(index: SearchIndex | None, guild: str) -> str:
    """The server's search passages removed; what was done, for the operator."""
    if index is None:
        return "search is off (MEMORY_SEARCH_INDEX): no index to purge"
    if isinstance(index, ShardedS3VectorsIndex | DeployedSearchIndex):
        shared = index.drop_scope(guild)
        return f"its index deleted, {shared} passages removed from the shared one"
    ids = [p.id for p in index.passages() if server_scope_of(p.scope) == guild]
    return f"{index.remove(ids, guild)} passages removed from the search index"


if __name__ == "__main__":
    sys.exit(main())
