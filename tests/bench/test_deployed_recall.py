"""`make bench` table 3g: calls to other services join DynamoDB's timeline, so the longest
chain of round trips counts the embedding call, QueryVectors and the keyword shards' S3
requests; the keyword leg is counted beside the vector leg, as DeployedSearchIndex runs it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import boto3

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from deployed_recall import (  # noqa: E402
    ALONE,
    EMBED,
    QUERY_VECTORS,
    SERVER,
    WARM,
    DeployedRecall,
    MeteredEmbedder,
    by_service,
    chain_text,
    deployed_rows,
    metered_queries,
    outside_dynamodb,
    round_trip_check,
)
from meter import S3_GET, S3_LIST, DynamoMeter, Request, S3Counts, longest_chain  # noqa: E402

from botmemory.recall.search_leg import SearchStatus  # noqa: E402
from botmemory.search.keyword_shards import S3KeywordIndex  # noqa: E402
from botmemory.search.port import Passage, PassageKind, SearchQuery  # noqa: E402

BUCKET = "bench-keywords"

SCOPE = "100000000000000001"  # a guild's scope is its id
CHANNEL = "200000000000000001"


class _Service:
    def query_vectors(self, **kwargs: object) -> dict[str, object]:
        return {"vectors": [], "asked": kwargs}


def at(operation: str, start: float, status: int = 200) -> Request:
    return Request(
        operation, {}, start, start + 1, response={"ResponseMetadata": {"HTTPStatusCode": status}}
    )


def recall_of(requests: list[Request]) -> DeployedRecall:
    return DeployedRecall(requests, longest_chain(requests), SearchStatus.OK, 5, 1)


def test_the_embedding_call_and_query_vectors_are_requests_in_the_timeline() -> None:
    meter = DynamoMeter(boto3.client("dynamodb", region_name="us-east-1"))
    embedder = MeteredEmbedder(meter)
    service = _Service()
    metered_queries(service, meter)

    (vector,) = embedder.embed(["sourdough in Lisbon"])
    answer = service.query_vectors(topK=3, queryVector={"float32": vector})

    assert answer["asked"] == {"topK": 3, "queryVector": {"float32": vector}}
    requests = meter.take()
    assert [r.operation for r in requests] == [EMBED, QUERY_VECTORS]
    assert all(r.started <= r.ended for r in requests)
    assert len(longest_chain(requests)) == 2  # the query waits for its embedding
    assert outside_dynamodb(requests) == 2


def test_shard_gets_beside_the_embedding_call_add_no_round_trip() -> None:
    vectors = [at(EMBED, 0), at(QUERY_VECTORS, 1), at("BatchGetItem", 2)]
    # The two shards read side by side, while the embedding call runs.
    keywords = [at(S3_GET, 0, 304), at(S3_GET, 0, 404)]
    figures = recall_of([*vectors, *keywords, at("Query", 0)])

    assert (figures.vector_leg, figures.keyword_leg, figures.counted) == (2, 1, 3)
    rows = dict((row[0], row[1:]) for row in deployed_rows({WARM: figures}))
    assert rows["sequential round trips (target <= 3)"] == ("3 (within)",)
    assert rows["S3 GetObject"] == (2,)
    assert rows["  of which 304 Not Modified"] == (1,)
    assert rows["  of which 404 (no such shard)"] == (1,)
    assert rows["DynamoDB requests"] == (2,)
    assert rows["all requests"] == (6,)
    assert chain_text(vectors) == "Embed -> QueryVectors -> BatchGetItem"


def test_a_keyword_leg_longer_than_the_vector_leg_adds_its_excess() -> None:
    vectors = [at(EMBED, 0), at(QUERY_VECTORS, 1), at("BatchGetItem", 4)]
    # A server-wide search whose listing, then reads, then more reads outlast the vectors.
    keywords = [at(S3_LIST, 0), at(S3_GET, 1), at(S3_GET, 2), at(S3_GET, 3)]
    figures = recall_of([*vectors, *keywords])

    assert (figures.vector_leg, figures.keyword_leg) == (2, 4)
    assert figures.counted == 3 + 2
    assert by_service(figures.requests)["S3 ListObjectsV2"] == 1
    check = round_trip_check({ALONE: recall_of(vectors), SERVER: figures})
    assert check.endswith("FAIL (at most 5)")
    # S3 Vectors alone is not the deployed path: the check judges the deployed columns.
    longer_alone = recall_of([*vectors, at("Query", 5)])
    assert round_trip_check({ALONE: longer_alone, WARM: recall_of(vectors)}).endswith(
        "PASS (at most 3)"
    )


def test_the_columns_print_in_order_with_one_value_each() -> None:
    figures = {
        WARM: recall_of([at(EMBED, 0), at(S3_GET, 0, 304)]),
        ALONE: recall_of([at(EMBED, 0)]),
    }
    rows = deployed_rows(figures)
    assert all(len(row) == 3 for row in rows)
    by_label = {row[0]: row[1:] for row in rows}
    assert by_label["S3 GetObject"] == (0, 1)  # ALONE first, whatever the dict's order


def _passage(n: int) -> Passage:
    return Passage(
        id=f"M#{CHANNEL}#{300000000000000000 + n}",
        kind=PassageKind.MESSAGE,
        scope=SCOPE,
        channel_id=CHANNEL,
        text=f"Alice: sourdough bread in Lisbon, loaf {n}",
        time_ms=1_767_225_600_000 + n,
    )


def test_the_meter_counts_the_keyword_shards_requests_by_what_s3_answered(
    s3: Any, tmp_path: Path
) -> None:
    meter = DynamoMeter(boto3.client("dynamodb", region_name="us-east-1"))
    meter.watch(s3, "s3")
    writer = S3KeywordIndex(BUCKET, "kw", client=s3, cache_dir=str(tmp_path / "w"))
    query = SearchQuery(scope=SCOPE, channel_ids=[CHANNEL, ""], text="sourdough", now_s=0)

    writer.add([_passage(n) for n in range(5)])
    written = S3Counts.of(meter.take())
    (key,) = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    size = s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"]
    meter.take()  # not the index's requests
    assert (written.gets, written.absent, written.puts) == (1, 1, 1)
    assert written.uploaded == size > 0

    assert len(writer.search(query)) == 5  # warm: the copy it wrote
    warm = S3Counts.of(meter.take())
    # The channel's folder listed (its shard's ETag is the copy's), the facts' asked for.
    assert (warm.lists, warm.gets, warm.absent, warm.downloaded) == (1, 1, 1, 0)

    reader = S3KeywordIndex(BUCKET, "kw", client=s3, cache_dir=str(tmp_path / "r"))
    assert len(reader.search(query)) == 5  # cold: a new container's empty /tmp
    cold = S3Counts.of(meter.take())
    assert (cold.lists, cold.gets, cold.absent, cold.downloaded) == (1, 2, 1, size)
