"""`python -m botmemory.ops.reindex_keywords`: the keyword database written again from the
vector index (which follows the table), and every object of the old keyword shards deleted,
old versions and delete markers too (moto's S3, a real PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.ops.reindex_keywords import delete_old_shards, main, reindex
from botmemory.search.port import SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from tests.support.passages import message_passage

BUCKET = "old-keyword-shards"


def test_every_passage_the_vectors_hold_is_indexed_again(pg_index: PostgresKeywordIndex) -> None:
    held = [
        message_passage(str(n), f"Thaddeus crossed on ferry {n}", "200", "100") for n in range(450)
    ]

    assert reindex(pg_index, iter(held)) == 450
    assert reindex(pg_index, iter(held)) == 450  # again: replaced, not doubled

    assert sum(1 for _ in pg_index.passages()) == 450
    ask = SearchQuery(scope="100", text="ferry 449", now_s=0)
    assert pg_index.search(ask)[0].passage.id == "M#200#449"


def test_every_old_shard_object_and_version_is_deleted(s3: Any) -> None:
    s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
    for key in ("keywords/g1/c2/m2026-01.sqlite", "keywords/g1/facts.sqlite", "other/keep.txt"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"SQLite format 3 ... Thaddeus")
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"SQLite format 3 ... rewritten")
    s3.delete_object(Bucket=BUCKET, Key="keywords/g1/facts.sqlite")  # a delete marker

    assert delete_old_shards(s3, BUCKET, "keywords") == 5

    left = s3.list_object_versions(Bucket=BUCKET)
    keys = {v["Key"] for v in [*left.get("Versions", []), *left.get("DeleteMarkers", [])]}
    assert keys == {"other/keep.txt"}


def test_without_a_keyword_database_it_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TABLE_NAME", "MemoryTable")
    monkeypatch.delenv("MEMORY_KEYWORD_INDEX", raising=False)
    assert main([]) == 2
    assert "no keyword database" in capsys.readouterr().err
