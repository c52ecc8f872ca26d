"""Every sample event runs through the handler template.yaml names for its function, and
the whole flow (ingest, stream with the template's filter, consolidate, recall) works."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from botmemory.interactions import InteractionResponseType, MessageFlag
from localrun.samtemplate import passes_filters
from tests import gateway as gw
from tests.lambda_local import EVENTS, TABLE, LocalLambda, sample_env

FUNCTION_OF_FOLDER = {
    "interactions": "InteractionsFunction",
    "ingest": "IngestFunction",
    "consolidate": "ConsolidateFunction",
    "recall": "RecallFunction",
    "sweep": "SweepFunction",
    "search_index": "SearchIndexFunction",
}


def http_json(response: dict[str, Any]) -> Any:
    return json.loads(response["body"])


def check_ingest(r: Any) -> None:
    assert r == {"stored": 14, "duplicates": 0, "ignored": [], "rejected": []}


def check_stream(r: Any) -> None:
    assert r == {"batchItemFailures": []}


def check_recall(r: Any) -> None:
    assert r["enabled"] is True
    assert r["system_prompt"].startswith("You are Memorybot")
    assert r["search"] == "ok" and r["query_note"] is None


def check_recall_over_http(r: Any) -> None:
    assert r["statusCode"] == 200
    assert http_json(r)["enabled"] is True


def check_sweep(r: Any) -> None:
    assert set(r) == {"channels", "consumed", "statuses"}


def check_ping(r: Any) -> None:
    assert r["statusCode"] == 200
    assert http_json(r) == {"type": InteractionResponseType.PONG}


def check_show(r: Any) -> None:
    assert r["statusCode"] == 200
    data = http_json(r)["data"]
    assert data["flags"] == MessageFlag.EPHEMERAL and data["allowed_mentions"] == {"parse": []}


def check_remember(r: Any) -> None:
    assert r["statusCode"] == 200
    data = http_json(r)["data"]
    assert data["content"].startswith("Remembered as `")
    assert data["flags"] == MessageFlag.EPHEMERAL


def check_unknown(r: Any) -> None:
    assert r["statusCode"] == 200
    assert "don't know the command `/memory dance`" in http_json(r)["data"]["content"]


def check_unauthorized(r: Any) -> None:
    assert r["statusCode"] == 401


CHECKS: dict[str, Callable[[Any], None]] = {
    "ingest/gateway-batch.json": check_ingest,
    "consolidate/stream-batch.json": check_stream,
    "recall/request.json": check_recall,
    "recall/function-url-request.json": check_recall_over_http,
    "sweep/schedule.json": check_sweep,
    "search_index/stream-removals.json": check_stream,
    "interactions/ping.json": check_ping,
    "interactions/memory-show.json": check_show,
    "interactions/memory-remember.json": check_remember,
    "interactions/unknown-command.json": check_unknown,
    "interactions/bad-signature.json": check_unauthorized,
}


def sample_files() -> list[str]:
    return sorted(str(p.relative_to(EVENTS)) for p in EVENTS.rglob("*.json") if p.parent != EVENTS)


def test_every_sample_event_has_a_check_and_a_function() -> None:
    assert sample_files() == sorted(CHECKS)
    assert {name.split("/")[0] for name in CHECKS} == set(FUNCTION_OF_FOLDER)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_the_sample_event_runs_through_its_templates_handler(
    name: str, dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    # The consolidation and recall samples refer to what the ingest sample records.
    if not name.startswith("ingest/"):
        local.invoke(
            "IngestFunction", json.loads((EVENTS / "ingest/gateway-batch.json").read_text())
        )
    event = json.loads((EVENTS / name).read_text())

    result = local.invoke(FUNCTION_OF_FOLDER[name.split("/")[0]], event)

    CHECKS[name](result)


def test_a_replayed_interaction_does_its_work_once(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    event = json.loads((EVENTS / "interactions/memory-remember.json").read_text())
    calls: list[str] = []

    from botmemory.commands import Commands

    original = Commands._remember

    def counted(self: Commands, invocation: Any) -> dict[str, Any]:
        calls.append(invocation.interaction_id)
        return original(self, invocation)

    monkeypatch.setattr(Commands, "_remember", counted)

    first = local.invoke("InteractionsFunction", event)
    second = local.invoke("InteractionsFunction", event)

    assert first["statusCode"] == second["statusCode"] == 200
    assert http_json(first) == http_json(second)
    assert "Remembered as" in http_json(first)["data"]["content"]
    assert calls == ["1500000000000000005"]


def stream_records(client: Any, stream_arn: str, after: set[str]) -> list[dict[str, Any]]:
    """Every record on the table's stream, as Lambda's event source would read them."""
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=stream_arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=stream_arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            records += page["Records"]
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    fresh = [r for r in records if r["dynamodb"]["SequenceNumber"] not in after]
    for record in fresh:
        record["eventSourceARN"] = stream_arn
        record["dynamodb"]["ApproximateCreationDateTime"] = 1_767_225_600
    return fresh


def test_end_to_end_ingest_stream_consolidate_recall(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    source = local.template.stream_source("ConsolidateFunction")
    filters = local.template.stream_filters("ConsolidateFunction")
    stream_arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    statements = {
        gw.ALICE: "I love hiking in the Alps.",
        gw.BOB: "I use Neovim for everything.",
        gw.CAROL: "I'm a teacher at the village school.",
    }
    people = list(statements)
    messages = []
    for i in range(45):
        author = people[i % 3]
        text = statements[author] if i < 3 else f"small talk number {i}"
        messages.append(gw.message(author, text, 1_767_225_600_000 + i * 1000))

    for start in range(0, 45, 15):  # the relay sends batches
        stored = local.invoke("IngestFunction", {"events": messages[start : start + 15]})
        assert stored["stored"] == 15

    seen: set[str] = set()
    records = stream_records(dynamodb, stream_arn, seen)
    seen |= {r["dynamodb"]["SequenceNumber"] for r in records}
    delivered = [r for r in records if passes_filters(filters, r)]
    assert len(delivered) == 45  # only the observation INSERTs pass the template's filter
    for start in range(0, len(delivered), source["BatchSize"]):
        answer = local.invoke(
            "ConsolidateFunction", {"Records": delivered[start : start + source["BatchSize"]]}
        )
        assert answer == {"batchItemFailures": []}

    later = stream_records(dynamodb, stream_arn, seen)
    assert later and not [
        r for r in later if passes_filters(filters, r)
    ]  # facts, episode, consumption

    result = local.invoke(
        "RecallFunction",
        {
            "guild_id": gw.GUILD,
            "channel_id": gw.CHANNEL,
            "user_id": gw.ALICE,
            "template": "Bot.\n{memory}",
        },
    )
    assert set(result["facts"]) == set(people)
    assert [f["text"] for f in result["facts"][gw.ALICE]] == ["Alice loves hiking in the Alps"]
    assert [f["text"] for f in result["facts"][gw.BOB]] == ["Bob uses Neovim for everything"]
    assert [f["text"] for f in result["facts"][gw.CAROL]] == [
        "Carol is a teacher at the village school"
    ]
    assert len(result["episodes"]) == 1
    assert "Alice, Bob and Carol talked about" in result["episodes"][0]["summary"]
    assert result["system_prompt"].startswith("Bot.\n<memory>")


def test_a_bad_stream_record_is_reported_alone(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())
    good = json.loads((EVENTS / "consolidate/stream-batch.json").read_text())["Records"]
    bad = json.loads(json.dumps(good[0]))
    bad["dynamodb"]["Keys"] = {"pk": {"S": "SC#not-a-channel"}, "sk": {"S": "OBS#1"}}
    bad["dynamodb"]["SequenceNumber"] = "999"

    answer = local.invoke("ConsolidateFunction", {"Records": [good[0], bad, good[1]]})

    assert answer == {"batchItemFailures": [{"itemIdentifier": "999"}]}


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        ({"channel_id": gw.CHANNEL}, ["user_id"]),
        ({"user_id": "x", "channel_id": gw.CHANNEL}, ["user_id"]),
    ],
)
def test_recall_names_the_missing_fields_never_a_stack_trace(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, payload: dict[str, Any], fields: list[str]
) -> None:
    local = LocalLambda(monkeypatch, sample_env())

    result = local.invoke("RecallFunction", payload)

    assert result["fields"] == fields and "error" in result


def test_ingest_answers_a_malformed_request_without_raising(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalLambda(monkeypatch, sample_env())

    result = local.invoke("IngestFunction", {"messages": []})

    assert result["stored"] == 0 and "events" in result["error"]
