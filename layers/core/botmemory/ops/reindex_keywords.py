"""Index the keyword leg again, and delete an old deployment's keyword shards.

    python -m botmemory.ops.reindex_keywords [--old-shards <bucket>[/<prefix>]]
        (TABLE_NAME, MEMORY_SEARCH_INDEX, MEMORY_KEYWORD_INDEX, MEMORY_KEYWORD_DB_SECRET and
        EMBEDDING_MODEL from the environment, as the functions have them)

For a deployment upgraded from the keyword shards (SQLite files in S3) to the keyword
database, after a keyword database that was down for a while (rounds counted
SearchIndexVectorsOnly), or to rebuild it. Migrates the schema, then writes every passage
the vector index holds into the keyword database, a page per statement. The vector index
follows the table (docs/architecture.md, invariant 14: erasure, expiry and deletes reach it
through the stream), so what is written is what the table still holds. Idempotent: a passage
written twice is replaced.

`--old-shards`: then deletes every object under the old shards' bucket and prefix
(`keywords` by default), every version and delete marker too, so no erased word survives in
the old bucket; the bucket itself goes with the old stack or by hand. Needs
s3:ListBucket, s3:ListBucketVersions, s3:DeleteObject and s3:DeleteObjectVersion on it: the
operator's rights, not a function's. Exit codes: 0 done, 1 AWS or configuration error, 2 no
keyword database configured.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import SystemClock
from botmemory.search import build_search_index
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.port import Passage
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.postgres_transport import KeywordIndexUnavailable
from botmemory.settings.config import ConfigError, get_settings

PAGE = 200  # passages a statement
_DELETE_PAGE = 1000  # S3's DeleteObjects at most


def _pages(passages: Iterable[Passage], size: int) -> Iterator[list[Passage]]:
    page: list[Passage] = []
    for passage in passages:
        page.append(passage)
        if len(page) == size:
            yield page
            page = []
    if page:
        yield page


def reindex(keywords: PostgresKeywordIndex, passages: Iterable[Passage]) -> int:
    """The schema migrated, then every passage written; returns how many."""
    keywords.migrate()
    written = 0
    for page in _pages(passages, PAGE):
        keywords.write(page)
        written += len(page)
    return written


def delete_old_shards(s3: Any, bucket: str, prefix: str) -> int:
    """Every object version and delete marker under the prefix deleted; returns how many."""
    deleted = 0
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": f"{prefix.strip('/')}/"}
    while True:
        page = s3.list_object_versions(**request)
        doomed = [
            {"Key": entry["Key"], "VersionId": entry["VersionId"]}
            for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        ]
        for start in range(0, len(doomed), _DELETE_PAGE):
            chunk = doomed[start : start + _DELETE_PAGE]
            s3.delete_objects(Bucket=bucket, Delete={"Objects": chunk, "Quiet": True})
            deleted += len(chunk)
        if not page.get("IsTruncated"):
            return deleted
        request["KeyMarker"] = page.get("NextKeyMarker")
        request["VersionIdMarker"] = page.get("NextVersionIdMarker")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m botmemory.ops.reindex_keywords",
        description="Index the keyword database again from the vector index; delete old shards.",
    )
    parser.add_argument(
        "--old-shards", metavar="BUCKET[/PREFIX]", help="the old keyword shards to delete"
    )
    args = parser.parse_args(argv)
    try:
        settings = get_settings()
        index = build_search_index(settings, None, SystemClock())
        if not isinstance(index, DeployedSearchIndex) or not isinstance(
            index.keywords, PostgresKeywordIndex
        ):
            print("error: MEMORY_KEYWORD_INDEX names no keyword database", file=sys.stderr)
            return 2
        written = reindex(index.keywords, index.vectors.passages())
        print(f"{written} passages written to the keyword database")
        if args.old_shards:
            import boto3

            bucket, _, prefix = args.old_shards.partition("/")
            gone = delete_old_shards(boto3.client("s3"), bucket, prefix or "keywords")
            print(f"{gone} old shard objects (versions included) deleted from {bucket}")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ClientError, BotoCoreError, KeywordIndexUnavailable) as exc:
        print(f"error: AWS request failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
