"""Issue 29 on the production path: IngestFunction, the table's stream into
ConsolidateFunction (through its template filter) and RecallFunction, as template.yaml
declares them, with the embedded index and the project's `openai:` embedder against an
OpenAI-compatible server on 127.0.0.1.

- One leg failing never takes the other down: with the embedding endpoint down, or
  answering vectors that are not EMBEDDING_DIMENSIONS long, consolidation still indexes the
  passages for keywords and recall still finds them, each counted as a metric
  (SearchIndexKeywordsOnly, RecallVectorLegFailed, and EmbeddingDimensionsWrong, which
  template.yaml alarms on).
- Names do not flood: a question naming Alice finds Bob's answer about the subject, not
  Alice's greetings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from tests.conftest import TABLE
from tests.stack.test_sam_local import stream_records
from tests.support.fake_embeddings import EmbeddingServer, closed_url
from tests.support.fake_providers import serving
from tests.support.lambda_local import LocalLambda, sample_env

START_MS = 1_767_225_600_000


class Deployment:
    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        dynamodb: Any,
        index: Path | dict[str, str],
        embeddings: str | None,
    ) -> None:
        """`index`: the embedded index's file, or the search settings of another index."""
        search = index if isinstance(index, dict) else {"MEMORY_SEARCH_INDEX": f"sqlite:{index}"}
        env = sample_env()
        for function, variables in env.items():
            if function == "Parameters":
                continue
            variables.update(search)
            if embeddings is not None:
                variables.update(
                    EMBEDDING_MODEL="openai:fake-embed",
                    EMBEDDING_MODEL_BASE_URL=embeddings,
                    EMBEDDING_MODEL_API_KEY="sk-test-embed",
                    EMBEDDING_MODEL_API_KEY_SECRET="",
                    EMBEDDING_DIMENSIONS="64",
                    MEMORY_MODEL_MAX_ATTEMPTS="1",
                )
        env["ConsolidateFunction"]["MEMORY_CONSOLIDATE_EVERY"] = "2"
        self.local = LocalLambda(monkeypatch, env)
        self.dynamodb = dynamodb
        self.seen: set[str] = set()
        self.at = START_MS

    def say(self, *lines: tuple[str, str]) -> None:
        events = []
        for author, text in lines:
            self.at += 1000
            events.append(gw.message(author, text, self.at))
        self.local.invoke("IngestFunction", {"events": events})
        arn = self.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        records = stream_records(self.dynamodb, arn, self.seen)
        self.seen |= {r["dynamodb"]["SequenceNumber"] for r in records}
        filters = self.local.template.stream_filters("ConsolidateFunction")
        delivered = [r for r in records if passes_filters(filters, r)]
        if delivered:
            answer = self.local.invoke("ConsolidateFunction", {"Records": delivered})
            assert answer == {"batchItemFailures": []}

    def recall(self, query: str) -> dict[str, Any]:
        request = {
            "guild_id": gw.GUILD,
            "channel_id": gw.CHANNEL,
            "user_id": gw.CAROL,
            "participants": [],
            "query": query,
        }
        answer: dict[str, Any] = self.local.invoke("RecallFunction", request)
        return answer


def metrics_emitted(out: str) -> dict[str, float]:
    """The EMF metrics the handlers printed: name -> summed value."""
    totals: dict[str, float] = {}
    for line in out.splitlines():
        if not line.startswith("{") or "_aws" not in line:
            continue
        record = json.loads(line)
        for directive in record["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                name = metric["Name"]
                value = record[name]
                totals[name] = totals.get(name, 0.0) + sum(
                    value if isinstance(value, list) else [value]
                )
    return totals


@pytest.fixture
def embeddings() -> Iterator[EmbeddingServer]:
    with serving(EmbeddingServer()) as running:
        yield running


POTTERY = [
    (gw.ALICE, "I finally signed up for the pottery class at the community centre"),
    (gw.BOB, "Nice, the kiln there is huge, you will love it"),
]


def test_an_embedding_endpoint_that_is_down_leaves_keyword_search_working(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, tmp_path / "index.db", closed_url())
    deployed.say(*POTTERY)

    block = deployed.recall("who signed up for the pottery class?")

    assert block["search"] == "keywords_only"
    assert any("pottery class" in p["text"] for p in block["passages"]), block["passages"]
    emitted = metrics_emitted(capsys.readouterr().out)
    assert emitted.get("SearchIndexKeywordsOnly", 0) >= 1
    assert emitted.get("RecallVectorLegFailed") == 1
    assert "SearchIndexFailed" not in emitted and "RecallSearchFailed" not in emitted
    assert "EmbeddingDimensionsWrong" not in emitted


def test_wrong_embedding_dimensions_are_counted_and_keywords_still_answer(
    monkeypatch: pytest.MonkeyPatch,
    dynamodb: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    embeddings: EmbeddingServer,
) -> None:
    embeddings.returned_dimensions = 384  # EMBEDDING_DIMENSIONS says 64
    deployed = Deployment(monkeypatch, dynamodb, tmp_path / "index.db", embeddings.base_url)
    deployed.say(*POTTERY)

    block = deployed.recall("who signed up for the pottery class?")

    assert block["search"] == "wrong_dimensions"
    assert any("pottery class" in p["text"] for p in block["passages"])
    emitted = metrics_emitted(capsys.readouterr().out)
    assert emitted.get("EmbeddingDimensionsWrong", 0) >= 2  # consolidation and recall
    assert emitted.get("SearchIndexKeywordsOnly", 0) >= 1
    # The log says why, naming both numbers and the setting.
    errors = [str(getattr(record, "error", "")) for record in caplog.records]
    assert any("384 dimensions" in e and "EMBEDDING_DIMENSIONS=64" in e for e in errors), errors


def test_a_question_naming_alice_finds_bob_s_answer_not_her_greetings(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, tmp_path: Path
) -> None:
    deployed = Deployment(monkeypatch, dynamodb, tmp_path / "index.db", None)
    greetings = [
        "hello everyone, happy monday",
        "good morning all",
        "hey hey, back again",
        "hi folks, how is everyone doing today",
        "morning! coffee time",
        "hello again, nice to see you all",
    ]
    for greeting in greetings:
        deployed.say((gw.ALICE, greeting), (gw.CAROL, "morning"))
    deployed.say(
        (gw.BOB, "The volcano hike is moved to Saturday because of the storm warning"),
        (gw.CAROL, "ok"),
    )

    block = deployed.recall("Alice, when is the volcano hike?")

    texts = [p["text"] for p in block["passages"]]
    assert any("volcano hike is moved to Saturday" in t for t in texts), texts
    for greeting in greetings:
        assert not any(greeting in t for t in texts), texts
