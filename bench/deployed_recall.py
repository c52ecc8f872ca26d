"""Table 3g (issue 29): recall with a query on the deployed search path, the embedding call
included in the chain of round trips: S3 Vectors alone beside the deployed hybrid (S3
Vectors and the keyword leg on PostgreSQL, botmemory.search.deployed).

RecallFunction's recall runs as in 3c, but its search leg is what template.yaml deploys,
built as `make eval` builds it (eval/paths.py): the S3 Vectors adapter on
eval/vector_service.py's in-memory service, and the keyword leg (PostgresKeywordIndex) on a
temporary local PostgreSQL. Every request joins DynamoDB's timeline (DynamoMeter): the
embedding call, QueryVectors and each keyword statement (one Data API ExecuteStatement when
deployed) by wrappers (DynamoMeter.timed), each held for the simulated network latency, so
the longest chain counts what runs side by side once: the keyword statement beside the
embedding call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from embedder import CountingEmbedder
from meter import (
    DynamoMeter,
    Request,
    describe,
    longest_chain,
    operations,
    serialized_moto,
)
from reads import SIMULATED_LATENCY_S
from tables import print_table
from world import INDEX_BATCH, QUERY, Lab, World, seed_history, varied_lines

from botmemory.recall.contract import RecallRequest
from botmemory.recall.search_leg import SearchStatus
from botmemory.records import scope_of
from botmemory.runtime import build_services
from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.passages import message_passages
from botmemory.search.port import Passage, SearchHit, SearchIndex, SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.s3vectors_index import S3VectorsSearchIndex
from botmemory.settings.config import Settings
from eval.paths import DEPLOYED, VECTORS, search_paths
from localrun import gateway as gw
from localrun.postgres import create_database, temporary_cluster

HISTORY = 1_000  # observations indexed, as 3c's saturated history
ROUND_TRIP_TARGET = 3  # issue 29: at most 3 sequential round trips, the embedding included
EMBED = "Embed"
QUERY_VECTORS = "QueryVectors"
VECTOR_OPERATIONS = (EMBED, QUERY_VECTORS)
EXECUTE = "ExecuteStatement"  # one keyword statement (a Data API call when deployed)
KEYWORD_OPERATIONS = (EXECUTE,)
# The columns: S3 Vectors alone, then the deployed hybrid in a channel and server-wide.
ALONE = "S3 Vectors alone"
CHANNEL = "deployed, channel"
SERVER = "deployed, server"
COLUMNS = (ALONE, CHANNEL, SERVER)


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


def metered_statements(keywords: PostgresKeywordIndex, meter: DynamoMeter) -> None:
    """Each keyword statement one request in the timeline."""
    execute = keywords.transport.execute

    def timed(statement: Any) -> Any:
        with meter.timed(EXECUTE):
            return execute(statement)

    keywords.transport.execute = timed  # type: ignore[method-assign]


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

    @property
    def vector_leg(self) -> int:
        """Sequential round trips of the vector leg alone: Embed -> QueryVectors."""
        return len(longest_chain([r for r in self.requests if r.operation in VECTOR_OPERATIONS]))

    @property
    def keyword_leg(self) -> int:
        """Sequential round trips of the keyword leg alone (its statements)."""
        return len(longest_chain([r for r in self.requests if r.operation in KEYWORD_OPERATIONS]))

    @property
    def counted(self) -> int:
        """Round trips with the keyword leg counted beside the vector leg, as
        DeployedSearchIndex runs them: the chain without the keyword statements, plus whatever
        the keyword leg's own chain is longer than the vector leg's (none while it is not)."""
        rest = [r for r in self.requests if r.operation not in KEYWORD_OPERATIONS]
        return len(longest_chain(rest)) + max(0, self.keyword_leg - self.vector_leg)


def chain_text(chain: Sequence[Request]) -> str:
    return " -> ".join(describe(r) for r in chain)


def outside_dynamodb(requests: Sequence[Request]) -> int:
    return sum(
        r.operation in VECTOR_OPERATIONS or r.operation in KEYWORD_OPERATIONS for r in requests
    )


def verdict(trips: int) -> str:
    return f"{trips} ({'within' if trips <= ROUND_TRIP_TARGET else 'OVER'})"


def by_service(requests: Sequence[Request]) -> dict[str, int]:
    """Requests by service and kind, as the table prints them."""
    embeds = sum(r.operation == EMBED for r in requests)
    queries = sum(r.operation == QUERY_VECTORS for r in requests)
    return {
        "keyword statements (Data API ExecuteStatement)": sum(
            r.operation == EXECUTE for r in requests
        ),
        "S3 Vectors QueryVectors": queries,
        "embedding calls": embeds,
        "DynamoDB requests": len(requests) - outside_dynamodb(requests),
        "all requests": len(requests),
    }


def deployed_rows(figures: dict[str, DeployedRecall]) -> list[tuple[object, ...]]:
    """One row per figure, one column per way of searching (COLUMNS' order)."""
    runs = [figures[c] for c in COLUMNS if c in figures]
    counts = [by_service(f.requests) for f in runs]
    rows: list[tuple[object, ...]] = [
        (f"sequential round trips (target <= {ROUND_TRIP_TARGET})",)
        + tuple(verdict(f.counted) for f in runs),
        ("  the vector leg's (Embed -> QueryVectors)",) + tuple(f.vector_leg for f in runs),
        ("  the keyword leg's, beside the embedding call",) + tuple(f.keyword_leg for f in runs),
        ("  the measured timeline's longest chain",) + tuple(f.round_trips for f in runs),
    ]
    rows += [(label, *(c[label] for c in counts)) for label in counts[0]]
    rows += [
        ("texts embedded for the query",) + tuple(f.embedded_at_query for f in runs),
        ("search status (RecallResult.search)",) + tuple(f.search.value for f in runs),
        ("passages shown",) + tuple(f.passages for f in runs),
    ]
    return rows


def round_trip_check(figures: dict[str, DeployedRecall]) -> str:
    """The issue's check on the deployed path: every deployed column within the target."""
    deployed = {c: f.counted for c, f in figures.items() if c != ALONE}
    worst = max(deployed.values(), default=0)
    ok = "PASS" if worst <= ROUND_TRIP_TARGET else "FAIL"
    return (
        f"check: at most {ROUND_TRIP_TARGET} sequential round trips on the deployed path,"
        f" embedding included: {ok} (at most {worst})"
    )


class Swapped:
    """A SearchIndex answering from `index`, which the bench swaps between two recalls (a
    warm-up through one index, then the measured recall through another)."""

    def __init__(self, index: SearchIndex) -> None:
        self.index = index

    def add(self, passages: Sequence[Passage]) -> int:
        return self.index.add(passages)

    def search(self, query: SearchQuery) -> list[SearchHit]:
        return self.index.search(query)

    def remove(self, ids: Iterable[str], scope: str | None = None) -> int:
        return self.index.remove(ids, scope=scope)

    def passages(self) -> Iterator[Passage]:
        return self.index.passages()


def recall_once(
    lab: Lab,
    world: World,
    settings: Settings,
    index: SearchIndex,
    embedder: CountingEmbedder,
    then: SearchIndex | None = None,
) -> DeployedRecall:
    """One recall with QUERY, measured, after the same recall as a warm-up (it starts the
    recall thread pool and runs every code path once) through `index`; the measured one
    through `then` if given, else `index` too. `embedder` embeds the vectors."""
    swapped = Swapped(index)
    services = build_services(
        settings, dynamodb=lab.client, clock=world.clock, model=world.model, search_index=swapped
    )
    asked = RecallRequest(guild_id=gw.GUILD, channel_id=gw.CHANNEL, user_id=gw.ALICE, query=QUERY)
    services.recaller.recall(asked)
    swapped.index = then or index
    lab.meter.take()
    embedder.take()
    with serialized_moto(), lab.meter.simulated_latency(SIMULATED_LATENCY_S):
        result = services.recaller.recall(asked)
    requests = lab.meter.take()
    _, embedded = embedder.take()
    return DeployedRecall(
        requests=requests,
        chain=longest_chain(requests),
        search=result.search,
        passages=len(result.passages),
        embedded_at_query=embedded,
    )


def measure_deployed(lab: Lab) -> dict[str, DeployedRecall]:
    """The three columns on one history of HISTORY messages, indexed once (the deployed path
    writes the vectors S3 Vectors alone reads)."""
    world = lab.world()
    history = seed_history(world, HISTORY, 20, varied_lines(seed=HISTORY))
    embedder = MeteredEmbedder(lab.meter)
    with temporary_cluster() as cluster:
        paths = search_paths(embedder, create_database(cluster, "bench_deployed"), world.clock)
        try:
            metered_queries(paths.service, lab.meter)
            deployed = paths.indexes[DEPLOYED]
            if not isinstance(deployed, DeployedSearchIndex) or not isinstance(
                deployed.keywords, PostgresKeywordIndex
            ):
                raise TypeError(f"the {DEPLOYED} path is not the deployed hybrid: {deployed!r}")
            metered_statements(deployed.keywords, lab.meter)
            passages = message_passages(history, scope_of(gw.GUILD), gw.BOT)
            for start in range(0, len(passages), INDEX_BATCH):
                deployed.add(passages[start : start + INDEX_BATCH])
            settings = world.services.settings
            vectors = paths.indexes[VECTORS]
            if not isinstance(vectors, S3VectorsSearchIndex):
                raise TypeError(f"the {VECTORS} path is not the S3 Vectors adapter: {vectors!r}")
            server = settings.model_copy(update={"search_scope": "guild"})
            runs: dict[str, Callable[[], DeployedRecall]] = {
                ALONE: lambda: recall_once(lab, world, settings, vectors, embedder),
                CHANNEL: lambda: recall_once(lab, world, settings, deployed, embedder),
                SERVER: lambda: recall_once(lab, world, server, deployed, embedder),
            }
            return {column: run() for column, run in runs.items()}
        finally:
            paths.close()


def bench_deployed_recall(lab: Lab) -> None:
    figures = measure_deployed(lab)
    print_table(
        "3g. Recall with a query on the deployed path (embedding included): S3 Vectors alone"
        " and with the keyword leg on PostgreSQL",
        ["figure", *COLUMNS],
        deployed_rows(figures),
        [
            round_trip_check(figures),
            *(f"{c}: {operations(f.requests)}." for c, f in figures.items()),
            *(f"{c}, longest chain: {chain_text(f.chain)}." for c, f in figures.items()),
            "channel: the channel asked about; server: MEMORY_SEARCH_SCOPE=guild. Either way the",
            "keyword leg is one statement (every pass of botmemory.search.postgres_sql in one),",
            "run beside the embedding call (DeployedSearchIndex), so it adds no round trip while",
            "it is no longer than the vector leg (Embed -> QueryVectors).",
            f"{HISTORY:,} messages indexed (3c's history), the in-memory S3 Vectors service of",
            "make eval (eval/vector_service.py), a temporary local PostgreSQL and a counting",
            "embedder; every request, the embedding call, QueryVectors and the statement",
            f"included, held {SIMULATED_LATENCY_S * 1000:.0f} ms, as in 3c"
            " (reads.SIMULATED_LATENCY_S says why).",
        ],
    )
