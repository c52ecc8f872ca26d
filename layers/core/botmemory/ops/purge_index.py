"""Purge one server's search index (botmemory.search.shards).

    python -m botmemory.ops.purge_index <guild id | dm>
        (TABLE_NAME, MEMORY_SEARCH_INDEX and EMBEDDING_MODEL from the environment)

For when a server's data is purged: a marker in the table first, so that no write racing the
purge creates the index again (for an hour), then DeleteIndex of the server's own index, then
its passages in the shared index (those indexed before sharding, or past the bucket's index
limit) are listed and removed. Needs s3vectors:DeleteIndex, ListIndexes, ListVectors,
GetVectors and DeleteVectors on the bucket's indexes: the operator's rights, not a
function's. Running it twice changes nothing the second time. Exit codes: 0 done, 1 AWS or
configuration error, 2 not a sharded S3 Vectors index.
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
from botmemory.search.shards import ShardedS3VectorsIndex
from botmemory.settings.config import ConfigError, get_settings
from botmemory.storage.repository import open_repository

_SERVER = re.compile(r"[0-9]{1,20}|dm")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.purge_index",
        description="Delete one server's search index and its passages in the shared index.",
    )
    parser.add_argument("server", help="the guild id, or dm for direct messages")
    args = parser.parse_args(argv)
    if not _SERVER.fullmatch(args.server):
        print("error: the server is a guild id (digits) or dm", file=sys.stderr)
        return 1
    try:
        settings = get_settings()
        repository = open_repository(settings.table_name)
        index = build_search_index(settings, repository, SystemClock())
        if not isinstance(index, ShardedS3VectorsIndex | DeployedSearchIndex):
            print("error: MEMORY_SEARCH_INDEX is not s3vectors:<bucket>/<index>", file=sys.stderr)
            return 2
        removed = index.drop_scope(args.server)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError) as exc:
        print(f"error: AWS request failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"server {args.server}: its index deleted, {removed} passages removed from the shared one"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
