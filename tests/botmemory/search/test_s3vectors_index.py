"""S3VectorsSearchIndex against a real s3vectors client: botocore's Stubber for every call
(QueryVectors above all, which moto lacks), moto for a put/list/delete round trip."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber
from moto import mock_aws

from botmemory.search import s3vectors_index
from botmemory.search.embeddings import EmbeddingError
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.s3vectors_index import (
    METADATA_BYTES,
    NEVER_EXPIRES,
    S3VectorsSearchIndex,
    metadata_of,
    query_filter,
)

BUCKET = "memory-test-bucket"
INDEX = "passages"
SCOPE = "G#100000000000000001"
DIMENSIONS = 4
NOW_S = 1_767_225_600


class FakeEmbedder:
    """Deterministic vectors (the text's length first), every call recorded; can fail."""

    name = "fake:embedder"
    dimensions = DIMENSIONS

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[list[str]] = []
        self.error = error

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.error is not None:
            raise self.error
        return [[float(len(t)), 0.5, 0.25, 0.125] for t in texts]


def passage(
    pid: str,
    text: str,
    *,
    kind: PassageKind = PassageKind.MESSAGE,
    channel_id: str = "c1",
    expires_at: int | None = NOW_S + 3600,
    scope: str = SCOPE,
) -> Passage:
    return Passage(
        id=pid,
        kind=kind,
        scope=scope,
        channel_id=channel_id,
        text=text,
        time_ms=1_767_225_600_123,
        authors=["111"],
        sources=[f"OBS#{pid}"],
        expires_at=expires_at,
    )


def stored(p: Passage, distance: float | None = None) -> dict[str, Any]:
    """A vector as QueryVectors or ListVectors returns it."""
    entry: dict[str, Any] = {"key": p.id, "metadata": metadata_of(p)}
    if distance is not None:
        entry["distance"] = distance
    return entry


def query(**kwargs: Any) -> SearchQuery:
    fields: dict[str, Any] = {"scope": SCOPE, "text": "kayak trip", "now_s": NOW_S}
    fields.update(kwargs)
    return SearchQuery(**fields)


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


class Calls:
    """Every request's parameters, by operation, as the client validated them."""

    def __init__(self, client: Any) -> None:
        self.made: list[tuple[str, dict[str, Any]]] = []
        client.meta.events.register("before-parameter-build.s3vectors.*", self._record)

    def _record(self, model: Any, params: Any, **_: Any) -> None:
        self.made.append((model.name, params))

    def of(self, operation: str) -> list[dict[str, Any]]:
        return [params for name, params in self.made if name == operation]


def make_index(client: Any, embedder: Any | None = None, **kwargs: Any) -> S3VectorsSearchIndex:
    return S3VectorsSearchIndex(BUCKET, INDEX, embedder or FakeEmbedder(), client=client, **kwargs)


# --- add -------------------------------------------------------------------------------


def test_add_embeds_once_and_puts_passages_with_their_metadata(client: Any, stub: Stubber) -> None:
    embedder = FakeEmbedder()
    a = passage("M#c1#1", "Ada paddled a kayak")
    fact = passage(
        "F#s#111#f1", "Ada owns a kayak", kind=PassageKind.FACT, channel_id="", expires_at=None
    )
    stub.add_response(
        "put_vectors",
        {},
        {
            "vectorBucketName": BUCKET,
            "indexName": INDEX,
            "vectors": [
                {
                    "key": "M#c1#1",
                    "data": {"float32": [19.0, 0.5, 0.25, 0.125]},
                    "metadata": {
                        "scope": SCOPE,
                        "channel_id": "c1",
                        "kind": "message",
                        "expires_at": NOW_S + 3600,
                        "authors": ["111"],
                        "sources": ["OBS#M#c1#1"],
                        "time_ms": 1_767_225_600_123,
                        "text": "Ada paddled a kayak",
                    },
                },
                {
                    "key": "F#s#111#f1",
                    "data": {"float32": [16.0, 0.5, 0.25, 0.125]},
                    "metadata": {
                        "scope": SCOPE,
                        "channel_id": "",
                        "kind": "fact",
                        "expires_at": NEVER_EXPIRES,  # no expiry: a number the filter passes
                        "authors": ["111"],
                        "sources": ["OBS#F#s#111#f1"],
                        "time_ms": 1_767_225_600_123,
                        "text": "Ada owns a kayak",
                    },
                },
            ],
        },
    )

    written = make_index(client, embedder).add([a, fact])

    assert written == 2
    assert embedder.calls == [["Ada paddled a kayak", "Ada owns a kayak"]]


def test_add_chunks_within_the_per_call_limit(client: Any, stub: Stubber) -> None:
    calls = Calls(client)
    embedder = FakeEmbedder()
    passages = [passage(f"M#c1#{n}", f"message {n}") for n in range(1001)]
    for _ in range(3):
        stub.add_response(
            "put_vectors", {}, {"vectorBucketName": BUCKET, "indexName": INDEX, "vectors": ANY}
        )

    assert make_index(client, embedder).add(passages) == 1001

    sizes = [len(params["vectors"]) for params in calls.of("PutVectors")]
    assert sizes == [500, 500, 1]
    keys = [v["key"] for params in calls.of("PutVectors") for v in params["vectors"]]
    assert keys == [p.id for p in passages]
    assert len(embedder.calls) == 1


def test_add_keeps_each_request_under_the_payload_budget(
    client: Any, stub: Stubber, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(client)
    monkeypatch.setattr(s3vectors_index, "PUT_PAYLOAD_BYTES", 5_500)  # each entry weighs ~1.7 kB
    passages = [passage(f"M#c1#{n}", "x" * 1_500) for n in range(7)]
    for _ in range(3):
        stub.add_response("put_vectors", {})

    make_index(client).add(passages)

    assert [len(params["vectors"]) for params in calls.of("PutVectors")] == [3, 3, 1]


def test_add_skips_blank_texts_and_calls_nothing_for_none(client: Any, stub: Stubber) -> None:
    embedder = FakeEmbedder()
    index = make_index(client, embedder)
    assert index.add([]) == 0
    assert index.add([passage("M#c1#1", "  \n ")]) == 0
    assert embedder.calls == []


def test_metadata_text_is_cut_to_fit_the_size_limit() -> None:
    long = passage("M#c1#1", "é" * 40_000)  # two bytes each in UTF-8

    metadata = metadata_of(long)

    assert long.text.startswith(metadata["text"])
    assert 0 < len(metadata["text"].encode()) <= METADATA_BYTES
    assert len(repr(metadata).encode()) < 40_000
    assert metadata_of(passage("M#c1#2", "short"))["text"] == "short"
    assert metadata_of(passage("M#c1#3", "bad \ud800 half"))["text"] == "bad ? half"


def test_an_embedder_failure_propagates_and_nothing_is_written(client: Any, stub: Stubber) -> None:
    index = make_index(client, FakeEmbedder(EmbeddingError("titan said no")))
    with pytest.raises(EmbeddingError, match="titan said no"):
        index.add([passage("M#c1#1", "hello")])
    with pytest.raises(EmbeddingError, match="titan said no"):
        index.search(query())


def test_a_service_error_propagates(client: Any, stub: Stubber) -> None:
    stub.add_client_error("put_vectors", service_error_code="ServiceUnavailableException")
    with pytest.raises(ClientError):
        make_index(client).add([passage("M#c1#1", "hello")])


# --- search ----------------------------------------------------------------------------


def expected_query(filter_: dict[str, Any], top_k: int = 50) -> dict[str, Any]:
    return {
        "vectorBucketName": BUCKET,
        "indexName": INDEX,
        "topK": top_k,
        "queryVector": {"float32": [10.0, 0.5, 0.25, 0.125]},  # FakeEmbedder("kayak trip")
        "filter": filter_,
        "returnMetadata": True,
        "returnDistance": True,
    }


def test_a_channel_search_filters_scope_channels_and_expiry(client: Any, stub: Stubber) -> None:
    filter_ = {
        "$and": [
            {"scope": {"$eq": SCOPE}},
            {"expires_at": {"$gte": NOW_S}},
            {"channel_id": {"$in": ["c1", "c2"]}},
        ]
    }
    stub.add_response(
        "query_vectors", {"vectors": [], "distanceMetric": "cosine"}, expected_query(filter_)
    )
    embedder = FakeEmbedder()

    assert make_index(client, embedder).search(query(channel_ids=["c1", "c2"])) == []
    assert embedder.calls == [["kayak trip"]]


def test_a_whole_scope_search_has_no_channel_condition(client: Any, stub: Stubber) -> None:
    filter_ = {"$and": [{"scope": {"$eq": SCOPE}}, {"expires_at": {"$gte": NOW_S}}]}
    stub.add_response(
        "query_vectors", {"vectors": [], "distanceMetric": "cosine"}, expected_query(filter_)
    )
    make_index(client).search(query(channel_ids=None))


def test_kinds_filter_and_top_k_follow_the_query(client: Any, stub: Stubber) -> None:
    filter_ = {
        "$and": [
            {"scope": {"$eq": SCOPE}},
            {"expires_at": {"$gte": NOW_S}},
            {"kind": {"$in": ["fact", "episode"]}},
        ]
    }
    stub.add_response(
        "query_vectors", {"vectors": [], "distanceMetric": "cosine"}, expected_query(filter_, 80)
    )
    stub.add_response(
        "query_vectors", {"vectors": [], "distanceMetric": "cosine"}, expected_query(filter_, 100)
    )
    kinds = [PassageKind.FACT, PassageKind.EPISODE]
    make_index(client, candidates=10).search(query(kinds=kinds, limit=80))
    # Never above the service's top-K maximum.
    make_index(client, candidates=500).search(query(kinds=kinds, limit=5))


def test_query_filter_shapes() -> None:
    assert query_filter(query(channel_ids=["c9"], kinds=[PassageKind.MESSAGE])) == {
        "$and": [
            {"scope": {"$eq": SCOPE}},
            {"expires_at": {"$gte": NOW_S}},
            {"channel_id": {"$in": ["c9"]}},
            {"kind": {"$in": ["message"]}},
        ]
    }


@pytest.mark.parametrize(
    "fields",
    [{"text": "   "}, {"text": "?!…"}, {"channel_ids": []}, {"kinds": []}],
    ids=["blank", "no-word", "no-channels", "no-kinds"],
)
def test_searches_that_cannot_match_call_nothing(
    client: Any, stub: Stubber, fields: dict[str, Any]
) -> None:
    embedder = FakeEmbedder()
    assert make_index(client, embedder).search(query(**fields)) == []
    assert embedder.calls == []


def test_a_strong_keyword_match_moves_up_the_vector_order(client: Any, stub: Stubber) -> None:
    a = passage("M#c1#a", "we talked about the weather and lunch")
    b = passage("M#c1#b", "the meeting moved to thursday")
    c = passage("M#c1#c", "someone brought cake")
    d = passage("M#c1#d", "Ada booked the kayak trip for Saturday")
    answer = {
        # Out of order on purpose: the index orders by distance itself.
        "vectors": [stored(b, 0.2), stored(d, 0.4), stored(a, 0.1), stored(c, 0.3)],
        "distanceMetric": "cosine",
    }
    stub.add_response("query_vectors", answer)

    hits = make_index(client).search(query(text="kayak trip", limit=3))

    assert [h.passage.id for h in hits] == ["M#c1#d", "M#c1#a", "M#c1#b"]
    top = hits[0]
    assert (top.vector_rank, top.keyword_rank) == (4, 1)
    assert top.passage == d
    assert (hits[1].vector_rank, hits[1].keyword_rank) == (1, None)
    assert hits[0].score > hits[1].score > hits[2].score


def test_without_keyword_matches_the_vector_order_stands(client: Any, stub: Stubber) -> None:
    a, b = passage("M#c1#a", "first thing"), passage("M#c1#b", "second thing")
    stub.add_response(
        "query_vectors", {"vectors": [stored(a, 0.1), stored(b, 0.2)], "distanceMetric": "cosine"}
    )
    hits = make_index(client).search(query(text="volcano"))
    assert [(h.passage.id, h.vector_rank, h.keyword_rank) for h in hits] == [
        ("M#c1#a", 1, None),
        ("M#c1#b", 2, None),
    ]


def test_hits_outside_the_scope_or_unreadable_are_dropped(client: Any, stub: Stubber) -> None:
    mine = passage("M#c1#a", "kayak")
    other = passage("M#c9#x", "kayak", scope="G#999")
    answer = {
        "vectors": [
            stored(other, 0.05),
            {"key": "junk", "metadata": {"kind": "poem"}, "distance": 0.06},
            {"key": "bare", "distance": 0.07},
            stored(mine, 0.1),
        ],
        "distanceMetric": "cosine",
    }
    stub.add_response("query_vectors", answer)
    hits = make_index(client).search(query(text="kayak"))
    assert [h.passage.id for h in hits] == ["M#c1#a"]


# --- remove and passages ---------------------------------------------------------------


def test_remove_deletes_in_chunks_and_counts_distinct_ids(client: Any, stub: Stubber) -> None:
    calls = Calls(client)
    ids = [f"M#c1#{n}" for n in range(1001)] + ["M#c1#0", "M#c1#1"]
    for _ in range(3):
        stub.add_response("delete_vectors", {})

    assert make_index(client).remove(iter(ids)) == 1001

    chunks = [params["keys"] for params in calls.of("DeleteVectors")]
    assert [len(c) for c in chunks] == [500, 500, 1]
    assert [k for c in chunks for k in c] == [f"M#c1#{n}" for n in range(1001)]
    assert all(
        p["vectorBucketName"] == BUCKET and p["indexName"] == INDEX
        for p in calls.of("DeleteVectors")
    )


def test_removing_nothing_calls_nothing() -> None:
    index = S3VectorsSearchIndex(BUCKET, INDEX, FakeEmbedder())
    assert index.remove([]) == 0
    assert index._client is None  # not even built


def test_passages_follow_list_pagination(client: Any, stub: Stubber) -> None:
    first = [passage(f"M#c1#{n}", f"text {n}") for n in range(3)]
    fact = passage("F#s#1#f", "a fact", kind=PassageKind.FACT, channel_id="", expires_at=None)
    page_two = [stored(fact)]
    page_two[0]["metadata"]["time_ms"] = float(fact.time_ms)  # numbers may come back as floats
    request = {
        "vectorBucketName": BUCKET,
        "indexName": INDEX,
        "maxResults": 1000,
        "returnData": False,
        "returnMetadata": True,
    }
    stub.add_response(
        "list_vectors", {"vectors": [stored(p) for p in first], "nextToken": "page-2"}, request
    )
    stub.add_response("list_vectors", {"vectors": page_two}, {**request, "nextToken": "page-2"})

    listed = list(make_index(client).passages())

    assert listed == [*first, fact]
    assert listed[-1].expires_at is None and listed[-1].time_ms == fact.time_ms


def test_passages_refuse_an_entry_they_cannot_read(client: Any, stub: Stubber) -> None:
    stub.add_response("list_vectors", {"vectors": [{"key": "odd", "metadata": {"text": "?"}}]})
    with pytest.raises(ValueError, match="odd"):
        list(make_index(client).passages())


# --- the client, and a round trip through moto ------------------------------------------


def test_the_client_is_built_lazily() -> None:
    index = S3VectorsSearchIndex(BUCKET, INDEX, FakeEmbedder(), region_name="eu-central-1")
    assert index._client is None
    client = index._s3vectors()
    assert client.meta.service_model.service_name == "s3vectors"
    assert client.meta.region_name == "eu-central-1"
    assert index._s3vectors() is client


def test_put_list_delete_round_trip_on_moto() -> None:
    with mock_aws():
        client = boto3.client("s3vectors", region_name="us-east-1")
        client.create_vector_bucket(vectorBucketName=BUCKET)
        client.create_index(
            vectorBucketName=BUCKET,
            indexName=INDEX,
            dataType="float32",
            dimension=DIMENSIONS,
            distanceMetric="cosine",
            metadataConfiguration={
                "nonFilterableMetadataKeys": ["text", "authors", "sources", "time_ms"]
            },
        )
        index = make_index(client)
        written = [
            passage("M#c1#1", "Ada paddled a kayak"),
            passage(
                "F#s#111#f1",
                "Ada owns a kayak",
                kind=PassageKind.FACT,
                channel_id="",
                expires_at=None,
            ),
            passage("E#c1#e1", "The channel planned a trip", kind=PassageKind.EPISODE),
        ]

        assert index.add(written) == 3
        assert sorted(index.passages(), key=lambda p: p.id) == sorted(written, key=lambda p: p.id)
        # Read back by key (the keyword leg's retry): an absent key is left out.
        got = index.get(["F#s#111#f1", "M#c1#absent", "M#c1#1"])
        assert sorted(got, key=lambda p: p.id) == sorted(written[:2], key=lambda p: p.id)

        assert index.remove(["M#c1#1", "E#c1#e1", "M#c1#absent"]) == 3
        assert [p.id for p in index.passages()] == ["F#s#111#f1"]
