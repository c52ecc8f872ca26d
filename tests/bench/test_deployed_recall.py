"""`make bench` table 3g: calls to other services join DynamoDB's timeline, so the longest
chain of round trips counts the embedding call and QueryVectors."""

from __future__ import annotations

import sys
from pathlib import Path

import boto3

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from deployed_recall import (  # noqa: E402
    EMBED,
    QUERY_VECTORS,
    DeployedRecall,
    MeteredEmbedder,
    chain_text,
    deployed_rows,
    metered_queries,
    outside_dynamodb,
)
from meter import DynamoMeter, Request, longest_chain  # noqa: E402

from botmemory.recall.search_leg import SearchStatus  # noqa: E402


class _Service:
    def query_vectors(self, **kwargs: object) -> dict[str, object]:
        return {"vectors": [], "asked": kwargs}


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


def test_the_rows_say_whether_the_chain_is_within_three_round_trips() -> None:
    def at(operation: str, start: float) -> Request:
        return Request(operation, {}, start, start + 1)

    chain = [at(EMBED, 0), at(QUERY_VECTORS, 1), at("BatchGetItem", 2)]
    figures = DeployedRecall([*chain, at("Query", 0)], chain, SearchStatus.OK, 5, 1)
    rows = dict(deployed_rows(figures))
    assert rows["sequential round trips"] == "3 (within the target of 3)"
    assert rows["requests (DynamoDB and search)"] == 4
    assert rows["  of which embedding and QueryVectors"] == 2
    assert chain_text(chain) == "Embed -> QueryVectors -> BatchGetItem"

    longer = DeployedRecall(
        chain + [at("BatchGetItem", 3)], [*chain, at("BatchGetItem", 3)], SearchStatus.OK, 5, 1
    )
    assert dict(deployed_rows(longer))["sequential round trips"] == "4 (OVER the target of 3)"
