"""A fact the chat model corrects (botmemory.answering.corrections): one a member wrote with
`/memory remember` stays protected from the hot tier's demotion and eviction, and a
corrected fact is found by search by its new words and not by its old ones.

Through the functions template.yaml declares (tests/invariants/test_15's server):
InteractionsFunction signed as Discord signs, IngestFunction, the table's stream into
ConsolidateFunction and SearchIndexFunction through their template filters, AnswerFunction
with a chat model on 127.0.0.1 that calls `update_memory`; the embedded search index. Then
the same correction on the S3 Vectors adapter, its calls played by botocore's Stubber.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from botmemory.answering.corrections import Correction, apply_update_memory
from botmemory.clock import ManualClock
from botmemory.memory.visibility import learned_where
from botmemory.recall.contract import parse_request
from botmemory.records import Fact, FactSource, FactStatus, scope_of
from botmemory.runtime import build_services
from botmemory.search.index_sync import passages_to_remove
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.s3vectors_index import S3VectorsSearchIndex
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.settings.config import Settings
from botmemory.storage import keys
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from scripts.make_events import command, signed
from tests.botmemory.search.test_s3vectors_index import FakeEmbedder
from tests.conftest import START_MS, TABLE
from tests.invariants.test_15_private_stays_private import (  # noqa: F401
    DAVE,
    GENERAL,
    Server,
    chat_reply,
    server,
)
from tests.stack.test_sam_local import stream_records
from tests.support.facts import a_fact
from tests.support.fake_discord import fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import fact_writer  # noqa: F401

REMEMBERED = "I keep bees on the roof of my flat"
# Longer than MEMORY_HOT_FACT_CHARS below: the hot tier is over its target with it alone, so
# every fact it may demote goes.
BEES = (
    "Carol keeps three hives of bees in the community orchard by the river, and sells the "
    "honey at the Saturday market"
)
TOMATOES = "Carol grows tomatoes on her balcony"


class Deployment:
    """test_15's server, with SearchIndexFunction following the stream as well."""

    def __init__(self, stack: Server, index_path: Path) -> None:
        self.server = stack
        self.index_path = index_path
        self.followed: set[str] = set()

    def follow_index(self) -> None:
        stack = self.server
        stream_arn = stack.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        records = stream_records(stack.dynamodb, stream_arn, self.followed)
        self.followed |= {r["dynamodb"]["SequenceNumber"] for r in records}
        filters = stack.local.template.stream_filters("SearchIndexFunction")
        delivered = [r for r in records if passes_filters(filters, r)]
        if delivered:
            answer = stack.local.invoke("SearchIndexFunction", {"Records": delivered})
            assert answer == {"batchItemFailures": []}

    def say(self, *events: dict[str, Any]) -> None:
        self.server.say(*events)
        self.follow_index()

    def remember(self, user: str, text: str) -> str:
        interaction = command("77001", "memory", "remember", {"text": text}, "0", user)
        interaction.update(guild_id=gw.GUILD, channel_id=GENERAL, token="t-remember")
        interaction["member"]["user"] = gw.user(user)
        response = self.server.local.invoke("InteractionsFunction", signed(interaction, "r"))
        return str(json.loads(response["body"])["data"]["content"])

    def fact_passages(self) -> list[Passage]:
        index = SqliteSearchIndex(str(self.index_path))
        try:
            return [p for p in index.passages() if p.kind == PassageKind.FACT]
        finally:
            index.close()

    def found(self, words: str) -> list[str]:
        """The fact passages a search for `words` returns in the server."""
        index = SqliteSearchIndex(str(self.index_path))
        try:
            query = SearchQuery(
                scope=scope_of(gw.GUILD), text=words, kinds=[PassageKind.FACT], now_s=0
            )
            return [hit.passage.text for hit in index.search(query)]
        finally:
            index.close()


@pytest.fixture
def deployment(
    server: Server,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Deployment:
    # A tiny hot tier: one active fact of at most 100 characters, one stored fact.
    monkeypatch.setenv("MEMORY_HOT_FACTS_PER_PERSON", "1")
    monkeypatch.setenv("MEMORY_HOT_FACT_CHARS", "100")
    monkeypatch.setenv("MEMORY_FACTS_MAX_PER_PERSON", "1")
    deployed = Deployment(server, tmp_path / "index.db")
    deployed.follow_index()
    return deployed


def corrected_by_the_model(deployment: Deployment) -> tuple[Fact, Fact]:
    """Carol's weekend learned by consolidation (indexed), a fact she wrote herself, then
    both corrected by the chat model in one answer, the stream followed."""
    stack = deployment.server
    deployment.say(
        stack.message(gw.CAROL, "My weekend is all gardening", GENERAL),
        stack.message(DAVE, "nice", GENERAL),
    )
    assert deployment.remember(gw.CAROL, REMEMBERED).startswith("Remembered as")
    facts = stack.facts(gw.CAROL)
    gardening, bees = facts["Carol loves gardening"], facts[REMEMBERED]
    assert bees.source == FactSource.MANUAL
    assert deployment.found("gardening") == ["Carol: Carol loves gardening"]
    stack.chat.script.append(
        chat_reply(
            "Noted.",
            [
                ("update_memory", {"id": bees.fact_id, "text": BEES}),
                ("update_memory", {"id": gardening.fact_id, "text": TOMATOES}),
            ],
        )
    )
    deployment.say(stack.mention(gw.CAROL, "I moved the bees, and it's tomatoes now", GENERAL))
    assert any("three hives" in text for text in stack.posted(GENERAL))
    facts = stack.facts(gw.CAROL)
    return facts[BEES], facts[TOMATOES]


def test_a_corrected_manual_fact_is_not_evicted_when_the_hot_tier_is_full(
    deployment: Deployment,
) -> None:
    bees, tomatoes = corrected_by_the_model(deployment)
    assert bees.source == FactSource.MODEL and bees.manually_written
    assert tomatoes.source == FactSource.MODEL and not tomatoes.manually_written
    stack = deployment.server

    # Carol keeps talking: each round tends her hot tier, over its targets with her bees alone.
    for n in range(3):
        deployment.say(
            stack.message(gw.CAROL, f"a quiet day number {n}", GENERAL),
            stack.message(DAVE, "ok", GENERAL),
        )

    facts = stack.facts(gw.CAROL)
    assert facts[BEES].status == FactStatus.ACTIVE  # kept: Carol wrote it
    assert TOMATOES not in facts  # demoted, then evicted beyond the one stored fact


def test_a_corrected_fact_is_found_by_its_new_words_and_not_its_old(
    deployment: Deployment,
) -> None:
    _, tomatoes = corrected_by_the_model(deployment)

    assert deployment.found("tomatoes balcony") == [f"Carol: {TOMATOES}"]
    assert deployment.found("gardening") == []
    assert deployment.found("honey market hives") == [f"Carol: {BEES}"]
    texts = {p.id: p.text for p in deployment.fact_passages()}
    passage_id = keys.fact_passage_id(tomatoes.scope, gw.CAROL, tomatoes.fact_id)
    assert texts[passage_id] == f"Carol: {TOMATOES}"  # one passage per fact, its id kept
    assert not any("gardening" in text for text in texts.values())
    # Recall for Carol, searching by the new words, shows them and never the old.
    block = deployment.server.recall(GENERAL, gw.CAROL, participants=[], query="tomatoes")
    assert TOMATOES in block["memory"] and "loves gardening" not in block["memory"]
    # Deleted by the model next: the stream removes its passage.
    deployment.server.chat.script.append(
        chat_reply("Forgotten.", [("update_memory", {"id": tomatoes.fact_id, "text": ""})])
    )
    deployment.say(deployment.server.mention(gw.CAROL, "forget the tomatoes", GENERAL))
    assert deployment.found("tomatoes balcony") == []


def test_on_s3_vectors_the_corrected_words_replace_the_old_under_the_same_key(
    dynamodb: Any, clock: ManualClock
) -> None:
    client = boto3.client(
        "s3vectors",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    index = S3VectorsSearchIndex("memory-bucket", "passages", FakeEmbedder(), client=client)
    settings = Settings(table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT)
    services = build_services(settings, dynamodb=dynamodb, clock=clock, search_index=index)
    fact = a_fact(gw.CAROL, "Carol loves gardening", scope=scope_of(gw.GUILD), at_ms=START_MS)
    services.repository.put_fact(fact)
    passage_id = keys.fact_passage_id(fact.scope, fact.user_id, fact.fact_id)
    where = {"vectorBucketName": "memory-bucket", "indexName": "passages"}

    sent: list[dict[str, Any]] = []
    client.meta.events.register(
        "provide-client-params.s3vectors.PutVectors", lambda params, **_: sent.append(params)
    )

    with Stubber(client) as stub:
        # One PutVectors under the fact's passage key; no DeleteVectors (the Stubber refuses
        # any call it was not given).
        vector = {"key": passage_id, "data": ANY, "metadata": ANY}
        stub.add_response("put_vectors", {}, {**where, "vectors": [vector]})
        outcome = apply_update_memory(
            services,
            {"id": fact.fact_id, "text": TOMATOES},
            shown={fact.fact_id: fact},
            scope=fact.scope,
            bot_user_id=gw.BOT,
            actor_id=gw.CAROL,
            learned=learned_where(GENERAL, True),
        )
        stub.assert_no_pending_responses()
        # Searched by its new words, the vector the index now holds is what recall shows.
        (stored,) = sent[0]["vectors"]
        stub.add_response(
            "query_vectors",
            {
                "vectors": [{"key": passage_id, "metadata": stored["metadata"], "distance": 0.1}],
                "distanceMetric": "cosine",
            },
        )
        block = services.recaller.recall(
            parse_request(
                {
                    "guild_id": gw.GUILD,
                    "channel_id": GENERAL,
                    "user_id": gw.CAROL,
                    "participants": [],
                    "query": "who grows tomatoes?",
                }
            )
        )

    assert TOMATOES in stored["metadata"]["text"] and "gardening" not in stored["metadata"]["text"]
    assert block.search == "ok" and block.facts[gw.CAROL][0].text == TOMATOES
    assert "gardening" not in block.memory
    assert isinstance(outcome, Correction) and outcome.indexed is True
    # The correction's stream record names nothing to remove: the key now holds the new words.
    old = services.repository.fact(fact.scope, fact.user_id, fact.fact_id)
    assert old is not None and old.text == TOMATOES
    modify = {
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"sk": {"S": keys.fact_sk(fact.fact_id)}},
            "OldImage": {
                "scope": {"S": fact.scope},
                "user_id": {"S": fact.user_id},
                "fact_id": {"S": fact.fact_id},
                "text": {"S": fact.text},
                "status": {"S": "active"},
            },
            "NewImage": {
                "scope": {"S": fact.scope},
                "user_id": {"S": fact.user_id},
                "fact_id": {"S": fact.fact_id},
                "text": {"S": TOMATOES},
                "status": {"S": "active"},
            },
        },
    }
    assert passages_to_remove(modify) == []


def test_an_index_failure_keeps_the_correction_and_leaves_no_old_words(
    dynamodb: Any, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    client = boto3.client(
        "s3vectors",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    failing = FakeEmbedder(error=RuntimeError("embedding service down"))
    index = S3VectorsSearchIndex("memory-bucket", "passages", failing, client=client)
    settings = Settings(table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT)
    services = build_services(settings, dynamodb=dynamodb, clock=clock, search_index=index)
    fact = a_fact(gw.CAROL, "Carol loves gardening", scope=scope_of(gw.GUILD), at_ms=START_MS)
    services.repository.put_fact(fact)
    passage_id = keys.fact_passage_id(fact.scope, fact.user_id, fact.fact_id)
    where = {"vectorBucketName": "memory-bucket", "indexName": "passages"}

    with Stubber(client) as stub:
        # The new words cannot be embedded: the old ones are removed from the index.
        stub.add_response("delete_vectors", {}, {**where, "keys": [passage_id]})
        outcome = apply_update_memory(
            services,
            {"id": fact.fact_id, "text": TOMATOES},
            shown={fact.fact_id: fact},
            scope=fact.scope,
            bot_user_id=gw.BOT,
            actor_id=gw.CAROL,
        )
        stub.assert_no_pending_responses()

    assert isinstance(outcome, Correction) and outcome.indexed is False
    stored = services.repository.fact(fact.scope, fact.user_id, fact.fact_id)
    assert stored is not None and stored.text == TOMATOES
    assert "corrected fact not indexed" in caplog.text
