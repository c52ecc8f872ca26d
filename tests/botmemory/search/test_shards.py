"""ShardedS3VectorsIndex against a real s3vectors client under botocore's Stubber (moto lacks
S3 Vectors' index and query calls): one index per server, created on its first write and
reused, searches that never reach another server's index, purges that delete it and that a
racing write never undoes, the shared index past the bucket's limit, and one embedding
request (a list) for a round's passages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import ANY, Stubber

from botmemory.search import build_search_index
from botmemory.search.embeddings import OpenAIEmbedder
from botmemory.search.index_sync import IndexFollower
from botmemory.search.passages import message_passages, searchable
from botmemory.search.s3vectors_index import NON_FILTERABLE_KEYS, metadata_of
from botmemory.search.shards import ShardedS3VectorsIndex, shard_name
from botmemory.settings.config import ConfigError
from tests.botmemory.search.test_s3vectors_index import (
    DIMENSIONS,
    NOW_S,
    FakeEmbedder,
    passage,
    query,
    stored,
)
from tests.support.fake_providers import Scripted, ScriptServer, serving
from tests.support.sam_tools import TEMPLATE

BUCKET = "memory-bucket"
SHARED = "passages"
A = "100000000000000001"
B = "200000000000000002"
OWN_A = f"{SHARED}-g{A}"
OWN_B = f"{SHARED}-g{B}"


class Ledger:
    """The purge marker's store (MemoryRepository in production), in memory."""

    def __init__(self) -> None:
        self.marked: dict[str, int] = {}
        self.purged_after_checks: dict[str, int] = {}  # scope -> purged from this check on
        self.checks = 0

    def mark_index_purged(self, scope: str, now_ms: int, until_ms: int) -> None:
        self.marked[scope] = until_ms

    def index_purged(self, scope: str, now_ms: int) -> bool:
        self.checks += 1
        if scope in self.purged_after_checks and self.checks >= self.purged_after_checks[scope]:
            return True
        return scope in self.marked and self.marked[scope] > now_ms


class Clock:
    def now_ms(self) -> int:
        return NOW_S * 1000


@pytest.fixture
def client() -> Any:
    return boto3.client(
        "s3vectors",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def stub(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def make(client: Any, ledger: Ledger | None = None, embedder: Any = None) -> ShardedS3VectorsIndex:
    return ShardedS3VectorsIndex(
        BUCKET,
        SHARED,
        embedder or FakeEmbedder(),
        purges=ledger if ledger is not None else Ledger(),
        clock=Clock(),
        client=client,
    )


def put(stub: Stubber, index: str, keys: list[str]) -> None:
    stub.add_response(
        "put_vectors",
        {},
        {
            "vectorBucketName": BUCKET,
            "indexName": index,
            "vectors": [{"key": k, "data": ANY, "metadata": ANY} for k in keys],
        },
    )


def not_found(stub: Stubber, operation: str, index: str) -> None:
    stub.add_client_error(
        operation,
        service_error_code="NotFoundException",
        service_message=f"index {index} not found",
        http_status_code=404,
    )


def create(stub: Stubber, index: str) -> None:
    stub.add_response(
        "create_index",
        {"indexArn": f"arn:aws:s3vectors:us-east-1:123456789012:bucket/{BUCKET}/index/{index}"},
        {
            "vectorBucketName": BUCKET,
            "indexName": index,
            "dataType": "float32",
            "dimension": DIMENSIONS,
            "distanceMetric": "cosine",
            "metadataConfiguration": {"nonFilterableMetadataKeys": list(NON_FILTERABLE_KEYS)},
        },
    )


def a_passage(pid: str, text: str, server: str = A) -> Any:
    return passage(pid, text, scope=server)


# --- names ---------------------------------------------------------------------------------


def test_each_server_has_its_own_valid_index_name_and_dms_theirs() -> None:
    assert shard_name(SHARED, A) == OWN_A
    assert shard_name(SHARED, f"{A}~lineage1") == OWN_A  # a persona's scope: its server's
    assert shard_name(SHARED, "dm") == "passages-dm"
    assert shard_name(SHARED, "not a guild").startswith("passages-h")
    assert len(shard_name("x" * 40, "9" * 20)) <= 63  # the longest name fits the service's 63


def test_a_shared_name_too_long_or_invalid_for_sharding_is_a_config_error() -> None:
    from botmemory.settings.config import Settings

    base = Settings(embedding_model="openai:e", embedding_base_url="http://127.0.0.1:9/v1/")
    for spec in (f"s3vectors:b/{'x' * 41}", "s3vectors:b/Passages"):
        with pytest.raises(ConfigError, match="sharding"):
            build_search_index(base.model_copy(update={"search_index": spec}))


def test_created_indexes_are_configured_as_the_templates_shared_index() -> None:
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    template = yaml.load(TEMPLATE.read_text(encoding="utf-8"), Loader=Loader)
    shared = template["Resources"]["SearchVectorIndex"]["Properties"]
    assert shared["DataType"] == "float32" and shared["DistanceMetric"] == "cosine"
    assert shared["IndexName"] == SHARED
    assert tuple(shared["MetadataConfiguration"]["NonFilterableMetadataKeys"]) == (
        NON_FILTERABLE_KEYS
    )


# --- writing -------------------------------------------------------------------------------


def test_a_servers_first_write_creates_its_index_and_later_writes_reuse_it(
    client: Any, stub: Stubber
) -> None:
    not_found(stub, "put_vectors", OWN_A)
    create(stub, OWN_A)
    put(stub, OWN_A, ["M#1"])
    put(stub, OWN_A, ["M#2"])  # the second round: no create
    embedder = FakeEmbedder()
    index = make(client, embedder=embedder)

    assert index.add([a_passage("M#1", "Alice adopted a cat named Luna")]) == 1
    assert index.add([a_passage("M#2", "Bob runs marathons")]) == 1
    assert len(embedder.calls) == 2  # each round embedded once, not again for the retry


def test_an_index_another_writer_just_created_is_written_all_the_same(
    client: Any, stub: Stubber
) -> None:
    not_found(stub, "put_vectors", OWN_A)
    stub.add_client_error(
        "create_index", service_error_code="ConflictException", http_status_code=409
    )
    put(stub, OWN_A, ["M#1"])

    assert make(client).add([a_passage("M#1", "Alice adopted a cat named Luna")]) == 1


def test_each_servers_passages_go_to_its_own_index(client: Any, stub: Stubber) -> None:
    put(stub, OWN_A, ["M#1", "M#3"])
    put(stub, OWN_B, ["M#2"])
    index = make(client)

    written = index.add(
        [
            a_passage("M#1", "Alice adopted a cat"),
            a_passage("M#2", "Bob runs marathons", server=B),
            a_passage("M#3", "Alice moved to Lyon"),
        ]
    )

    assert written == 3


def test_past_the_buckets_index_limit_a_server_writes_to_the_shared_index(
    client: Any, stub: Stubber
) -> None:
    not_found(stub, "put_vectors", OWN_A)
    stub.add_client_error(
        "create_index", service_error_code="ServiceQuotaExceededException", http_status_code=402
    )
    put(stub, SHARED, ["M#1"])
    put(stub, SHARED, ["M#2"])  # remembered for the container's life: no second create
    index = make(client)

    assert index.add([a_passage("M#1", "Alice adopted a cat")]) == 1
    assert index.add([a_passage("M#2", "Alice moved to Lyon")]) == 1


# --- purges --------------------------------------------------------------------------------


def test_a_purge_marks_the_server_deletes_its_index_and_its_shared_passages(
    client: Any, stub: Stubber
) -> None:
    ledger = Ledger()
    stub.add_response("delete_index", {}, {"vectorBucketName": BUCKET, "indexName": OWN_A})
    legacy_a, legacy_b = a_passage("M#old-a", "Alice before"), a_passage("M#old-b", "Bob", B)
    stub.add_response(
        "list_vectors",
        {"vectors": [stored(legacy_a), stored(legacy_b)]},
        {
            "vectorBucketName": BUCKET,
            "indexName": SHARED,
            "maxResults": 1000,
            "returnData": False,
            "returnMetadata": True,
        },
    )
    stub.add_response(
        "delete_vectors", {}, {"vectorBucketName": BUCKET, "indexName": SHARED, "keys": ["M#old-a"]}
    )

    assert make(client, ledger).drop_scope(A) == 1
    assert ledger.marked[A] > NOW_S * 1000  # for a while after the purge


def test_a_write_after_the_purge_is_skipped_and_counted_not_recreated(
    client: Any, stub: Stubber
) -> None:
    ledger = Ledger()
    ledger.mark_index_purged(A, NOW_S * 1000, NOW_S * 1000 + 60_000)
    not_found(stub, "put_vectors", OWN_A)  # no create_index follows
    index = make(client, ledger)

    assert index.add([a_passage("M#1", "Alice adopted a cat")]) == 0
    assert index.purged_skips == 1


def test_a_purge_that_begins_while_the_index_is_created_deletes_it_again(
    client: Any, stub: Stubber
) -> None:
    ledger = Ledger()
    ledger.purged_after_checks[A] = 2  # not purged when checked before the create; then it is
    not_found(stub, "put_vectors", OWN_A)
    create(stub, OWN_A)
    put(stub, OWN_A, ["M#1"])
    stub.add_response("delete_index", {}, {"vectorBucketName": BUCKET, "indexName": OWN_A})
    index = make(client, ledger)

    assert index.add([a_passage("M#1", "Alice adopted a cat")]) == 0
    assert index.purged_skips == 1


def test_an_index_missing_after_its_create_without_a_purge_is_a_fault(
    client: Any, stub: Stubber
) -> None:
    not_found(stub, "put_vectors", OWN_A)
    create(stub, OWN_A)
    not_found(stub, "put_vectors", OWN_A)
    with pytest.raises(Exception, match="not found"):
        make(client).add([a_passage("M#1", "Alice adopted a cat")])


# --- reading and removing ------------------------------------------------------------------


def expected_query(index: str) -> dict[str, Any]:
    return {
        "vectorBucketName": BUCKET,
        "indexName": index,
        "topK": 50,
        "queryVector": ANY,
        "filter": ANY,
        "returnMetadata": True,
        "returnDistance": True,
    }


def test_a_search_reads_the_shared_index_and_its_own_servers_never_anothers(
    client: Any, stub: Stubber
) -> None:
    old = a_passage("M#old", "Alice has a cat named Luna")
    new = a_passage("M#new", "Alice's cat Luna is three")
    stub.add_response(
        "query_vectors",
        {"vectors": [stored(old, 0.4)], "distanceMetric": "cosine"},
        expected_query(SHARED),
    )
    stub.add_response(
        "query_vectors",
        {"vectors": [stored(new, 0.1)], "distanceMetric": "cosine"},
        expected_query(OWN_A),
    )
    embedder = FakeEmbedder()

    hits = make(client, embedder=embedder).search(query(text="Luna the cat", scope=A))

    assert hits[0].passage.id == "M#new"  # nearest across both
    assert {h.passage.id for h in hits} == {"M#new", "M#old"}
    assert len(embedder.calls) == 1  # one embedding for both queries


def test_a_server_without_an_index_yet_searches_the_shared_index_alone(
    client: Any, stub: Stubber
) -> None:
    old = a_passage("M#old", "Alice has a cat named Luna")
    stub.add_response(
        "query_vectors",
        {"vectors": [stored(old, 0.4)], "distanceMetric": "cosine"},
        expected_query(SHARED),
    )
    not_found(stub, "query_vectors", OWN_A)

    hits = make(client).search(query(text="Luna", scope=A))

    assert [h.passage.id for h in hits] == ["M#old"]


def test_removes_reach_the_servers_index_and_the_shared_one(client: Any, stub: Stubber) -> None:
    stub.add_response(
        "delete_vectors", {}, {"vectorBucketName": BUCKET, "indexName": OWN_A, "keys": ["M#1"]}
    )
    stub.add_response(
        "delete_vectors", {}, {"vectorBucketName": BUCKET, "indexName": SHARED, "keys": ["M#1"]}
    )
    not_found(stub, "delete_vectors", OWN_B)  # B has no index: nothing there to remove
    stub.add_response(
        "delete_vectors", {}, {"vectorBucketName": BUCKET, "indexName": SHARED, "keys": ["M#2"]}
    )
    index = make(client)

    assert index.remove(["M#1"], scope=A) == 1
    assert index.remove(["M#2"], scope=B) == 1


def test_the_stream_removes_a_passage_from_the_index_of_the_scope_its_item_had(
    client: Any, stub: Stubber
) -> None:
    stub.add_response(
        "delete_vectors", {}, {"vectorBucketName": BUCKET, "indexName": OWN_B, "keys": ["E#c9#ep1"]}
    )
    stub.add_response(
        "delete_vectors",
        {},
        {"vectorBucketName": BUCKET, "indexName": SHARED, "keys": ["E#c9#ep1"]},
    )
    record = {
        "eventID": "1",
        "eventName": "REMOVE",
        "dynamodb": {
            "Keys": {"pk": {"S": "CH#c9"}, "sk": {"S": "EP#0001#ep1"}},
            "OldImage": {
                "pk": {"S": "CH#c9"},
                "sk": {"S": "EP#0001#ep1"},
                "channel_id": {"S": "c9"},
                "episode_id": {"S": "ep1"},
                "summary": {"S": "Bob ran a marathon"},
                "scope": {"S": B},
            },
        },
    }

    report = IndexFollower(make(client)).follow([record])

    assert report.removed == 1 and report.skipped == 0


# --- embeddings ----------------------------------------------------------------------------


def test_messages_with_nothing_searchable_get_no_passage_and_no_embedding() -> None:
    from botmemory.records import Observation, ObservationKind

    def said(n: int, text: str) -> Observation:
        return Observation(
            channel_id="c1",
            scope=A,
            sk=f"OBS#{n:04d}",
            kind=ObservationKind.MESSAGE,
            at_ms=n,
            author_id="111",
            author_name="Alice",
            message_id=f"m{n}",
            content=text,
        )

    for nothing in ("ok", "OK!!", "lol 😂", "👍", "<:pepe:123456>", "thanks <@42>", "yes", "..."):
        assert not searchable(nothing), nothing
    for something in ("ok, 7pm at the station", "Luna", "東京", "42"):
        assert searchable(something), something
    kept = message_passages(
        [said(1, "ok"), said(2, "👍"), said(3, "ok, 7pm at the station")], A, None
    )
    assert [p.id for p in kept] == ["M#c1#m3"]


def test_a_rounds_passages_are_embedded_in_one_request_with_a_list(
    client: Any, stub: Stubber
) -> None:
    server = ScriptServer()
    vectors = [{"index": i, "embedding": [0.1 * (i + 1), 0.2, 0.3, 0.4]} for i in range(3)]
    server.script.append(Scripted(body={"data": vectors}))
    put(stub, OWN_A, ["M#1", "M#3"])
    put(stub, OWN_B, ["M#2"])
    with serving(server):
        embedder = OpenAIEmbedder(
            "fake-embed",
            base_url=server.base_url,
            api_key=None,
            dimensions=DIMENSIONS,
            timeout_seconds=2.0,
            max_attempts=1,
            sleep=lambda _: None,
        )
        make(client, embedder=embedder).add(
            [
                a_passage("M#1", "Alice adopted a cat"),
                a_passage("M#2", "Bob runs marathons", server=B),
                a_passage("M#3", "Alice moved to Lyon"),
            ]
        )
    assert len(server.requests) == 1
    assert server.requests[0].body["input"] == [
        "Alice adopted a cat",
        "Bob runs marathons",
        "Alice moved to Lyon",
    ]


def test_metadata_of_the_shared_index_is_what_the_servers_indexes_carry() -> None:
    assert set(NON_FILTERABLE_KEYS) <= set(metadata_of(a_passage("M#1", "x")))
