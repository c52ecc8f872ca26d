"""`make bench` table 3g: calls to other services join DynamoDB's timeline, so the longest
chain of round trips counts the embedding call, QueryVectors and the keyword leg's
requests; the keyword leg is counted beside the vector leg, as DeployedSearchIndex runs it."""

from __future__ import annotations

import sys
from pathlib import Path

import boto3

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from deployed_recall import (  # noqa: E402
    ALONE,
    EMBED,
    EXECUTE,
    QUERY_VECTORS,
    SERVER,
    DeployedRecall,
    MeteredEmbedder,
    chain_text,
    deployed_rows,
    metered_queries,
    outside_dynamodb,
    round_trip_check,
)
from deployed_recall import CHANNEL as CHANNEL_COLUMN  # noqa: E402
from meter import DynamoMeter, Request, longest_chain  # noqa: E402

from botmemory.recall.search_leg import SearchStatus  # noqa: E402

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


KEYWORDS = "keyword statements (Data API ExecuteStatement)"


def test_the_keyword_statement_beside_the_embedding_call_adds_no_round_trip() -> None:
    vectors = [at(EMBED, 0), at(QUERY_VECTORS, 1), at("BatchGetItem", 2)]
    keywords = [at(EXECUTE, 0)]  # every keyword pass in one statement, while the embedding runs
    figures = recall_of([*vectors, *keywords, at("Query", 0)])

    assert (figures.vector_leg, figures.keyword_leg, figures.counted) == (2, 1, 3)
    rows = dict((row[0], row[1:]) for row in deployed_rows({CHANNEL_COLUMN: figures}))
    assert rows["sequential round trips (target <= 3)"] == ("3 (within)",)
    assert rows[KEYWORDS] == (1,)
    assert rows["DynamoDB requests"] == (2,)
    assert rows["all requests"] == (5,)
    assert chain_text(vectors) == "Embed -> QueryVectors -> BatchGetItem"


def test_a_keyword_leg_longer_than_the_vector_leg_adds_its_excess() -> None:
    vectors = [at(EMBED, 0), at(QUERY_VECTORS, 1), at("BatchGetItem", 4)]
    # Were the passes sequential statements, they would outlast the vectors.
    keywords = [at(EXECUTE, 0), at(EXECUTE, 1), at(EXECUTE, 2), at(EXECUTE, 3)]
    figures = recall_of([*vectors, *keywords])

    assert (figures.vector_leg, figures.keyword_leg) == (2, 4)
    assert figures.counted == 3 + 2
    check = round_trip_check({ALONE: recall_of(vectors), SERVER: figures})
    assert check.endswith("FAIL (at most 5)")
    # S3 Vectors alone is not the deployed path: the check judges the deployed columns.
    longer_alone = recall_of([*vectors, at("Query", 5)])
    assert round_trip_check({ALONE: longer_alone, CHANNEL_COLUMN: recall_of(vectors)}).endswith(
        "PASS (at most 3)"
    )


def test_the_columns_print_in_order_with_one_value_each() -> None:
    figures = {
        CHANNEL_COLUMN: recall_of([at(EMBED, 0), at(EXECUTE, 0)]),
        ALONE: recall_of([at(EMBED, 0)]),
    }
    rows = deployed_rows(figures)
    assert all(len(row) == 3 for row in rows)
    by_label = {row[0]: row[1:] for row in rows}
    assert by_label[KEYWORDS] == (0, 1)  # ALONE first, whatever the dict's order
