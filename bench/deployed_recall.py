"""Table 3g (issue 29): recall with a query on the deployed search path, the embedding call
included in the chain of round trips.

RecallFunction's recall runs as in 3c, but its search leg is the adapter template.yaml
deploys (botmemory.search.s3vectors_index, built as `make eval` builds it: eval/paths.py, on
eval/vector_service.py's in-memory S3 Vectors) with a counting embedder. The embedding call
and QueryVectors are metered as requests in DynamoDB's timeline (DynamoMeter.timed), each
held for the simulated network latency, so the longest chain counts them as round trips.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from embedder import CountingEmbedder
from meter import DynamoMeter, Request, describe, longest_chain, operations, serialized_moto
from reads import SIMULATED_LATENCY_S
from tables import print_table
from world import INDEX_BATCH, QUERY, Lab, seed_history, varied_lines

from botmemory.recall.contract import RecallRequest
from botmemory.recall.search_leg import SearchStatus
from botmemory.records import scope_of
from botmemory.runtime import build_services
from botmemory.search.passages import message_passages
from eval.paths import DEPLOYED, search_paths
from localrun import gateway as gw

HISTORY = 1_000  # observations indexed, as 3c's saturated history
ROUND_TRIP_TARGET = 3  # issue 29: at most 3 sequential round trips, the embedding included
EMBED = "Embed"
QUERY_VECTORS = "QueryVectors"


class MeteredEmbedder(CountingEmbedder):
    """The counting embedder, each call one request in the meter's timeline."""

    def __init__(self, meter: DynamoMeter) -> None:
        super().__init__()
        self._meter = meter

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        with self._meter.timed(EMBED):
            return super().embed(texts)


def metered_queries(service: Any, meter: DynamoMeter) -> None:
    """QueryVectors on the in-memory service, each call one request in the timeline."""
    query = service.query_vectors

    def timed(**kwargs: Any) -> Any:
        with meter.timed(QUERY_VECTORS):
            return query(**kwargs)

    service.query_vectors = timed


@dataclass
class DeployedRecall:
    requests: list[Request]
    chain: list[Request]
    search: SearchStatus
    passages: int
    embedded_at_query: int  # texts the query embedded (1: the query alone)

    @property
    def round_trips(self) -> int:
        return len(self.chain)


def chain_text(chain: Sequence[Request]) -> str:
    return " -> ".join(describe(r) for r in chain)


def outside_dynamodb(requests: Sequence[Request]) -> int:
    return sum(r.operation in (EMBED, QUERY_VECTORS) for r in requests)


def measure_deployed(lab: Lab) -> DeployedRecall:
    world = lab.world()
    history = seed_history(world, HISTORY, 20, varied_lines(seed=HISTORY))
    embedder = MeteredEmbedder(lab.meter)
    paths = search_paths(embedder)
    metered_queries(paths.service, lab.meter)
    deployed = paths.indexes[DEPLOYED]
    passages = message_passages(history, scope_of(gw.GUILD), gw.BOT)
    for start in range(0, len(passages), INDEX_BATCH):
        deployed.add(passages[start : start + INDEX_BATCH])
    services = build_services(
        world.services.settings,
        dynamodb=lab.client,
        clock=world.clock,
        model=world.model,
        search_index=deployed,
    )
    request = RecallRequest(guild_id=gw.GUILD, channel_id=gw.CHANNEL, user_id=gw.ALICE, query=QUERY)
    try:
        services.recaller.recall(request)  # warm-up: the recall thread pool starts
        lab.meter.take()
        embedder.take()
        with serialized_moto(), lab.meter.simulated_latency(SIMULATED_LATENCY_S):
            result = services.recaller.recall(request)
        requests = lab.meter.take()
        _, embedded = embedder.take()
    finally:
        paths.close()
    return DeployedRecall(
        requests=requests,
        chain=longest_chain(requests),
        search=result.search,
        passages=len(result.passages),
        embedded_at_query=embedded,
    )


def deployed_rows(figures: DeployedRecall) -> list[tuple[object, ...]]:
    trips = figures.round_trips
    verdict = "within" if trips <= ROUND_TRIP_TARGET else "OVER"
    return [
        ("sequential round trips", f"{trips} ({verdict} the target of {ROUND_TRIP_TARGET})"),
        ("requests (DynamoDB and search)", len(figures.requests)),
        ("  of which embedding and QueryVectors", outside_dynamodb(figures.requests)),
        ("texts embedded for the query", figures.embedded_at_query),
        ("search status (RecallResult.search)", figures.search.value),
        ("passages shown", figures.passages),
    ]


def bench_deployed_recall(lab: Lab) -> None:
    figures = measure_deployed(lab)
    print_table(
        "3g. Recall with a query on the deployed path (S3 Vectors adapter, embedding included)",
        ["figure", "value"],
        deployed_rows(figures),
        [
            f"requests: {operations(figures.requests)}.",
            f"longest chain: {chain_text(figures.chain)}.",
            f"{HISTORY:,} messages indexed (3c's history), the in-memory S3 Vectors service of",
            "make eval (eval/vector_service.py) and a counting embedder; every request, the",
            f"embedding call and QueryVectors included, held {SIMULATED_LATENCY_S * 1000:.0f} ms.",
        ],
    )
