"""The deployed search on the production path: IngestFunction, the stream into
ConsolidateFunction and RecallFunction as template.yaml wires them, with
MEMORY_SEARCH_INDEX=s3vectors:... and MEMORY_KEYWORD_INDEX=s3:... (the keyword shards on
moto's S3; the S3 Vectors service played in process, as moto has no QueryVectors) and the
project's `openai:` embedder against an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from eval.vector_service import InMemoryS3Vectors
from localrun import gateway as gw
from tests.botmemory.search.test_search_on_the_handlers import (
    POTTERY,
    Deployment,
    metrics_emitted,
)
from tests.support.fake_embeddings import EmbeddingServer, closed_url
from tests.support.fake_providers import serving

KEYWORD_BUCKET = "deployed-keyword-shards"
SEARCH = {
    "MEMORY_SEARCH_INDEX": "s3vectors:vectors-bucket/passages",
    "MEMORY_KEYWORD_INDEX": f"s3:{KEYWORD_BUCKET}/keywords",
}


@pytest.fixture
def deployment_s3(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    import boto3

    service = InMemoryS3Vectors()
    monkeypatch.setattr(
        "botmemory.search.shards.s3vectors_client", lambda region_name=None: service
    )
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket=KEYWORD_BUCKET)
    yield s3


@pytest.fixture
def embeddings() -> Iterator[EmbeddingServer]:
    with serving(EmbeddingServer()) as running:
        yield running


def test_consolidation_writes_the_channels_shard_and_recall_finds_it(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    deployment_s3: Any,
    embeddings: EmbeddingServer,
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, SEARCH, embeddings.base_url)
    deployed.say(*POTTERY)

    block = deployed.recall("who signed up for the pottery class?")

    assert block["search"] == "ok", block["search"]
    assert any("pottery class" in p["text"] for p in block["passages"]), block["passages"]
    keys = [o["Key"] for o in deployment_s3.list_objects_v2(Bucket=KEYWORD_BUCKET)["Contents"]]
    assert any(k.startswith(f"keywords/g{gw.GUILD}/c{gw.CHANNEL}/m") for k in keys), keys


def test_an_embedding_endpoint_that_is_down_leaves_the_deployed_keywords_working(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    deployment_s3: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, SEARCH, closed_url())
    deployed.say(*POTTERY)

    block = deployed.recall("who signed up for the pottery class?")

    # S3 Vectors alone would hold nothing here: no passage could be embedded.
    assert block["search"] == "keywords_only"
    assert any("pottery class" in p["text"] for p in block["passages"]), block["passages"]
    emitted = metrics_emitted(capsys.readouterr().out)
    assert emitted.get("SearchIndexKeywordsOnly", 0) >= 1
    assert emitted.get("RecallVectorLegFailed") == 1
    assert "SearchIndexFailed" not in emitted and "RecallSearchFailed" not in emitted
