"""`python -m botmemory.ops.purge_server <guild id>`: every item of one server leaves the table,
then its search index (S3 Vectors under botocore's Stubber: moto lacks S3 Vectors); another
server, and what the same member said there, stay as they were. Two servers are seeded through
the functions template.yaml declares (IngestFunction, the stream, the worker, a memory model
on 127.0.0.1)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from botmemory.memory import fact_history
from botmemory.ops import purge_server
from botmemory.records import HistoryActor, MemoryScope
from botmemory.search import shards
from botmemory.settings.config import get_settings
from botmemory.storage import keys
from localrun import gateway as gw
from tests.botmemory.search.test_s3vectors_index import passage, stored
from tests.conftest import TABLE, scan_all
from tests.support.deployment import Deployment, goldfish_deployment, guild_create
from tests.support.facts import a_fact
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, fact_writer  # noqa: F401
from tests.support.fake_providers import ScriptServer

A = gw.GUILD  # purged
B = "100000000000000077"  # stays
A_PUBLIC, A_PRIVATE = gw.CHANNEL, "200000000000000700"
B_CHANNEL = "200000000000000900"
BUCKET, SHARED = "memory-bucket", "passages"


def guild_b() -> dict[str, Any]:
    event = guild_create([B_CHANNEL], [])
    event["d"].update(id=B, roles=[{"id": B, "permissions": str(1 << 10)}])
    return event


@pytest.fixture
def deployed(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Deployment:
    deployment = goldfish_deployment(
        monkeypatch,
        fake_discord,
        dynamodb,
        chat_server,
        fact_writer,
        tmp_path,
        MEMORY_CONSOLIDATE_EVERY="2",
    )
    deployment.say(guild_create([A_PUBLIC], [A_PRIVATE]), guild_b())
    # Alice speaks in both servers; Bob only in A.
    for channel in (A_PUBLIC, A_PRIVATE):
        deployment.say(
            deployment.message(gw.ALICE, "I keep goldfish", channel),
            deployment.message(gw.BOB, "nice, I keep goldfish too", channel),
        )
    in_b = [
        gw.message(gw.ALICE, line, deployment.at + i * 1000, channel=B_CHANNEL, guild=B)
        for i, line in enumerate(["I keep goldfish", "in a pond"], start=1)
    ]
    deployment.say(*in_b)
    # What a persona of A knows of Alice, in the persona's scope.
    services = deployment.services()
    known = a_fact(gw.ALICE, "Alice likes tea", scope=keys.persona_scope(A, "lin1"))
    known = known.model_copy(update={"memory_scope": MemoryScope.PERSONA_USER})
    entry = fact_history.written(None, known, actor=HistoryActor.STAFF, at_ms=0, retention_days=1)
    services.repository.put_fact(known, entry)
    return deployment


class S3Vectors:
    """The S3 Vectors client the command builds, under a Stubber."""

    def __init__(self) -> None:
        self.client = boto3.client(
            "s3vectors",
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        self.stub = Stubber(self.client)

    def purge(self, shared: list[str], removed: list[str], *, index_exists: bool) -> None:
        """What drop_scope does: DeleteIndex of A's own, then A's passages in the shared."""
        if index_exists:
            self.stub.add_response(
                "delete_index", {}, {"vectorBucketName": BUCKET, "indexName": f"{SHARED}-g{A}"}
            )
        else:
            self.stub.add_client_error("delete_index", "NotFoundException", http_status_code=404)
        entries = [stored(passage(pid, "words", scope=pid.split("|")[1])) for pid in shared]
        self.stub.add_response("list_vectors", {"vectors": entries})
        if removed:
            self.stub.add_response(
                "delete_vectors",
                {},
                {"vectorBucketName": BUCKET, "indexName": SHARED, "keys": removed},
            )


@pytest.fixture
def s3vectors(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Vectors]:
    fake = S3Vectors()
    monkeypatch.setattr(shards, "s3vectors_client", lambda region_name=None: fake.client)
    monkeypatch.setenv("TABLE_NAME", TABLE)
    monkeypatch.setenv("MEMORY_SEARCH_INDEX", f"s3vectors:{BUCKET}/{SHARED}")
    monkeypatch.setenv("EMBEDDING_MODEL", "openai:fake-embed")
    monkeypatch.setenv("EMBEDDING_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
    get_settings.cache_clear()
    with fake.stub:
        yield fake
        fake.stub.assert_no_pending_responses()
    get_settings.cache_clear()


def of_a(item: dict[str, Any]) -> bool:
    """Whether an item holds anything of server A: its id, or one of its channels'."""
    text = json.dumps(item)
    return any(mark in text for mark in (A, A_PUBLIC, A_PRIVATE))


def is_marker(item: dict[str, Any]) -> bool:
    return item["pk"]["S"] == keys.scope_pk(A) and item["sk"]["S"] == keys.INDEX_PURGED_SK


def test_a_purged_server_leaves_nothing_in_the_table_and_the_other_stays(
    deployed: Deployment, s3vectors: S3Vectors, capsys: pytest.CaptureFixture[str]
) -> None:
    before = scan_all(deployed.dynamodb)
    ours = [i for i in before if of_a(i)]
    theirs = [i for i in before if not of_a(i)]
    kinds = {keys.kind_of(i["sk"]["S"]) for i in ours}
    # The seeding reached every kind of partition the server has.
    pks = {i["pk"]["S"] for i in ours}
    assert {keys.channel_pk(A_PUBLIC), keys.channel_pk(A_PRIVATE), keys.guild_pk(A)} <= pks
    assert keys.user_pk(A, gw.ALICE) in pks and keys.user_pk(A, gw.BOB) in pks
    assert keys.user_pk(keys.persona_scope(A, "lin1"), gw.ALICE) in pks
    assert {keys.ItemKind.OBSERVATION, keys.ItemKind.EPISODE, keys.ItemKind.FACT} <= kinds
    assert {keys.ItemKind.NAME, keys.ItemKind.SPOKE, keys.ItemKind.STATE} <= kinds
    assert any(keys.kind_of(i["sk"]["S"]) == keys.ItemKind.FACT for i in theirs)  # Alice's in B
    s3vectors.purge(
        [f"M#1|{A}", f"M#2|{B}", f"F#3|{A}~lin1"], [f"M#1|{A}", f"F#3|{A}~lin1"], index_exists=True
    )

    assert purge_server.main([A]) == 0

    after = scan_all(deployed.dynamodb)
    assert [i for i in after if of_a(i) and not is_marker(i)] == []
    assert sorted(map(json.dumps, [i for i in after if not is_marker(i)])) == sorted(
        map(json.dumps, theirs)
    )  # B's items, and Alice's there, exactly as they were
    printed = capsys.readouterr().out
    assert f"server {A}: {len(ours)} items deleted from " in printed
    assert "its index deleted, 2 passages removed from the shared one" in printed

    # Again: nothing left to delete, the index already gone.
    s3vectors.purge([f"M#2|{B}"], [], index_exists=False)
    assert purge_server.main([A]) == 0
    assert "nothing of it left in the table" in capsys.readouterr().out
    assert sorted(map(json.dumps, scan_all(deployed.dynamodb))) == sorted(map(json.dumps, after))


@pytest.mark.parametrize("argument", ["abc", "dm", "1" * 21, f"{A} "])
def test_a_bad_argument_is_refused_and_changes_nothing(
    deployed: Deployment, argument: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = scan_all(deployed.dynamodb)
    assert purge_server.main([argument]) == 1
    assert "error: the server is a guild id" in capsys.readouterr().err
    assert scan_all(deployed.dynamodb) == before


def test_an_aws_error_exits_non_zero_with_what_failed(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TABLE_NAME", "no-such-table")
    monkeypatch.setenv("MEMORY_SEARCH_INDEX", "off")
    get_settings.cache_clear()
    try:
        assert purge_server.main([A]) == 1
    finally:
        get_settings.cache_clear()
    assert "error: AWS request failed" in capsys.readouterr().err
