"""The deployed search on the production path: IngestFunction, the stream into
ConsolidateFunction and RecallFunction as template.yaml wires them, with
MEMORY_SEARCH_INDEX=s3vectors:... and MEMORY_KEYWORD_INDEX set (the keyword leg on a real
PostgreSQL, reached by the local transport, as no Data API runs here; the S3 Vectors service
played in process, as moto has no QueryVectors) and the project's `openai:` embedder against
an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from botmemory.consolidation.work import register_local_queue
from botmemory.search.keyword_retry import keyword_retry_of
from eval.vector_service import InMemoryS3Vectors
from localrun import gateway as gw
from tests.botmemory.search.test_search_on_the_handlers import (
    POTTERY,
    Deployment,
    metrics_emitted,
)
from tests.support.fake_embeddings import EmbeddingServer, closed_url
from tests.support.fake_providers import serving
from tests.support.lambda_local import WORK_QUEUE

# Nothing listens on port 9: a keyword leg whose database does not answer.
DOWN = "postgresql://postgres@127.0.0.1:9/none"


def search(dsn: str) -> dict[str, str]:
    return {
        "MEMORY_SEARCH_INDEX": "s3vectors:vectors-bucket/passages",
        "MEMORY_KEYWORD_INDEX": dsn,
        # Not the deployed 800 ms: a test machine's busy cores say nothing of Aurora's latency
        # (make bench 3f and 3g do), and a timeout here would only be a flaky test.
        "MEMORY_SEARCH_TIMEOUT_MS": "5000",
    }


@pytest.fixture
def vectors_service(monkeypatch: pytest.MonkeyPatch) -> InMemoryS3Vectors:
    service = InMemoryS3Vectors()
    monkeypatch.setattr(
        "botmemory.search.shards.s3vectors_client", lambda region_name=None: service
    )
    return service


@pytest.fixture
def embeddings() -> Iterator[EmbeddingServer]:
    with serving(EmbeddingServer()) as running:
        yield running


def test_consolidation_writes_the_keyword_rows_and_recall_finds_them(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    vectors_service: InMemoryS3Vectors,
    embeddings: EmbeddingServer,
    pg_dsn: str,
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, search(pg_dsn), embeddings.base_url)
    deployed.say(*POTTERY)

    block = deployed.recall("who signed up for the pottery class?")

    assert block["search"] == "ok", block["search"]
    assert any("pottery class" in p["text"] for p in block["passages"]), block["passages"]
    with psycopg.connect(pg_dsn) as connection:
        stored = connection.execute("SELECT passage FROM kw_passages").fetchall()
    assert any("pottery class" in body for (body,) in stored)


def test_a_keyword_database_that_is_down_leaves_the_vectors_answering(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    vectors_service: InMemoryS3Vectors,
    embeddings: EmbeddingServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, search(DOWN), embeddings.base_url)
    deployed.say(*POTTERY)

    block = deployed.recall("who signed up for the pottery class?")

    assert block["search"] == "vectors_only"
    assert any("pottery class" in p["text"] for p in block["passages"]), block["passages"]
    emitted = metrics_emitted(capsys.readouterr().out)
    assert emitted.get("SearchIndexVectorsOnly", 0) >= 1  # the round counted it, lost nothing
    assert emitted.get("RecallKeywordLegFailed") == 1
    assert "SearchIndexFailed" not in emitted and "RecallSearchFailed" not in emitted


def test_an_embedding_endpoint_that_is_down_leaves_the_deployed_keywords_working(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    vectors_service: InMemoryS3Vectors,
    pg_dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, search(pg_dsn), closed_url())
    deployed.say(*POTTERY)

    block = deployed.recall("who signed up for the pottery class?")

    # S3 Vectors alone would hold nothing here: no passage could be embedded.
    assert block["search"] == "keywords_only"
    assert any("pottery class" in p["text"] for p in block["passages"]), block["passages"]
    emitted = metrics_emitted(capsys.readouterr().out)
    assert emitted.get("SearchIndexKeywordsOnly", 0) >= 1
    assert emitted.get("RecallVectorLegFailed") == 1
    assert "SearchIndexFailed" not in emitted and "RecallSearchFailed" not in emitted


def test_passages_the_keyword_database_missed_are_written_by_the_work_queue_once_it_answers(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    vectors_service: InMemoryS3Vectors,
    embeddings: EmbeddingServer,
    pg_dsn: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, search(DOWN), embeddings.base_url)
    sent: list[tuple[str, str]] = []
    deliver = deployed.local._enqueue

    def recorded(body: str, group: str) -> None:
        sent.append((body, group))
        deliver(body, group)

    register_local_queue(WORK_QUEUE, recorded)
    deployed.say(*POTTERY, (gw.CAROL, "and the glaze workshop after"))

    retries = [(body, group) for body, group in sent if keyword_retry_of(body) is not None]
    assert retries and all(group == f"keywords-{gw.GUILD}" for _, group in retries)
    assert all("pottery" not in body for body, _ in retries)  # ids only, never the words
    emitted = metrics_emitted(capsys.readouterr().out)
    assert emitted.get("SearchIndexKeywordRetries", 0) >= 3
    assert "KeywordRetryWritten" not in emitted  # delivered while down: failed, to come back

    # Meanwhile Carol's message is deleted: its passage must not come back by the retry.
    carol = next(p for p in vectors_service.list_vectors()["vectors"] if "glaze" in str(p))
    vectors_service.delete_vectors(keys=[carol["key"]])  # as the stream's removal does
    for function in deployed.local._overrides:  # the database answers again
        if function != "Parameters":
            deployed.local._overrides[function]["MEMORY_KEYWORD_INDEX"] = pg_dsn
    for body, group in retries:  # the queue hands the failed messages out again
        deployed.local.queued.append((body, group, "ConsolidateFunction"))
    answers = deployed.local.drain_queue()

    assert answers and all(a == {"batchItemFailures": []} for a in answers)
    emitted = metrics_emitted(capsys.readouterr().out)
    assert emitted.get("KeywordRetryWritten", 0) >= 2 and emitted.get("KeywordRetryGone", 0) >= 1
    with psycopg.connect(pg_dsn) as connection:
        stored = " ".join(body for (body,) in connection.execute("SELECT passage FROM kw_passages"))
    assert "pottery class" in stored and "glaze" not in stored
    block = deployed.recall("who signed up for the pottery class?")
    assert block["search"] == "ok"
    assert any("pottery class" in p["text"] for p in block["passages"]), block["passages"]
