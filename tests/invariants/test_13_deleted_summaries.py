"""Deleted means gone from the channel summaries and their search passages too.

A summary is a paraphrase no one can reliably take one message out of: the round that sees a
delete drops every summary whose stretch holds the deleted message (the current one in its
transaction, the archives just before it), the archives' passages leave the search index
through the stream (SearchIndexFunction, through the template's filter), and the next summary
is built from what is left. A message deleted twice changes nothing more."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from botmemory.clock import ManualClock
from botmemory.consolidation.model.contract import ModelInput
from botmemory.consolidation.outcome import Status
from botmemory.people.erasure import Eraser
from botmemory.records import ChannelSummary
from botmemory.runtime import build_services
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.commit import CommitRejected
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from scripts import make_events as events
from tests.botmemory.consolidation.test_summary import T0, build, chat, says
from tests.conftest import ScriptedModel, scan_all
from tests.stack.test_sam_local import stream_records
from tests.support.lambda_local import TABLE, LocalLambda, sample_env

SECRET = "I sail my catamaran at night"


def summaries(dynamodb: Any) -> list[dict[str, Any]]:
    """The channel's current and archived summaries, as stored."""
    return [
        i
        for i in scan_all(dynamodb)
        if i["sk"]["S"] == keys.SUMMARY_SK or i["sk"]["S"].startswith(keys.SUMMARY_ARCHIVE_PREFIX)
    ]


def summary_texts(dynamodb: Any) -> list[str]:
    return sorted(i["summary"]["S"] for i in summaries(dynamodb))


def stored(services: MemoryServices) -> ChannelSummary | None:
    return services.repository.channel_summary(gw.CHANNEL, consistent=True)


def consolidate(services: MemoryServices) -> Any:
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)
    return outcome


# Through the functions template.yaml declares --------------------------------------------


def deliver(local: LocalLambda, dynamodb: Any, function: str, seen: set[str]) -> None:
    """The table's new stream records to a stream-triggered function, through its template
    filter and in its batch size, as Lambda's event source mapping hands them on."""
    source = local.template.stream_source(function)
    filters = local.template.stream_filters(function)
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    records = stream_records(dynamodb, arn, seen)
    seen |= {r["dynamodb"]["SequenceNumber"] for r in records}
    delivered = [r for r in records if passes_filters(filters, r)]
    for start in range(0, len(delivered), source["BatchSize"]):
        answer = local.invoke(function, {"Records": delivered[start : start + source["BatchSize"]]})
        assert answer == {"batchItemFailures": []}


def functions(monkeypatch: pytest.MonkeyPatch, index_path: Path) -> LocalLambda:
    """The functions as template.yaml declares them, sharing one search index file (as they
    share the S3 Vectors index on AWS), a round every 4 observations."""
    env = sample_env()
    for variables in env.values():
        if "MEMORY_SEARCH_INDEX" in variables:
            variables["MEMORY_SEARCH_INDEX"] = f"sqlite:{index_path}"
    env["Parameters"]["MEMORY_CONSOLIDATE_EVERY"] = "4"
    return LocalLambda(monkeypatch, env)


def archived_passages(index_path: Path) -> list[str]:
    index = SqliteSearchIndex(str(index_path))
    try:
        return [p.text for p in index.passages() if p.id.startswith("S#")]
    finally:
        index.close()


def test_a_message_deleted_in_discord_leaves_every_summary_and_their_passages(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    index_path = tmp_path / "search.sqlite3"
    local = functions(monkeypatch, index_path)
    seen: set[str] = set()
    start = int(time.time() * 1000) - 3_600_000
    people = [events.ALICE, events.BOB]

    def talk(texts: list[str], at_ms: int, extra: list[dict[str, Any]] | None = None) -> None:
        said = [
            gw.message(
                people[i % 2], text, at_ms + i * 1000, channel=events.CHANNEL, guild=events.GUILD
            )
            for i, text in enumerate(texts)
        ]
        local.invoke("IngestFunction", {"events": [*(extra or []), *said]})
        deliver(local, dynamodb, "ConsolidateFunction", seen)

    secret = gw.message(events.ALICE, SECRET, start, channel=events.CHANNEL, guild=events.GUILD)
    local.invoke("IngestFunction", {"events": [secret]})
    talk([f"My catamaran story number {i}" for i in range(3)], start + 1000)
    talk([f"Greenhouse tomatoes, week {i}" for i in range(4)], start + 600_000)
    # Both summaries took the catamaran in; the replaced one is archived and searchable.
    assert len(summaries(dynamodb)) == 2
    assert all("catamaran" in text for text in summary_texts(dynamodb))
    assert [text for text in archived_passages(index_path) if "catamaran" in text]

    talk(
        [f"Kites on the beach, take {i}" for i in range(4)], start + 1_200_000, [gw.delete(secret)]
    )
    deliver(local, dynamodb, "SearchIndexFunction", seen)

    assert not [t for t in summary_texts(dynamodb) if "catamaran" in t]
    (current,) = summaries(dynamodb)  # rebuilt from what is left; nothing archived
    assert current["sk"]["S"] == keys.SUMMARY_SK and "beach" in current["summary"]["S"]
    assert archived_passages(index_path) == []


@pytest.mark.parametrize("leaves", ["forgetme", "expiry"])
def test_an_archived_summary_erased_or_expired_leaves_the_index(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, leaves: str
) -> None:
    index_path = tmp_path / "search.sqlite3"
    local = functions(monkeypatch, index_path)
    seen: set[str] = set()
    start = int(time.time() * 1000) - 3_600_000
    for round_ in range(2):
        said = [
            gw.message(
                [events.ALICE, events.BOB][i % 2],
                f"Greenhouse tomatoes, week {round_}{i}",
                start + round_ * 600_000 + i * 1000,
                channel=events.CHANNEL,
                guild=events.GUILD,
            )
            for i in range(4)
        ]
        local.invoke("IngestFunction", {"events": said})
        deliver(local, dynamodb, "ConsolidateFunction", seen)
    assert len(archived_passages(index_path)) == 1

    if leaves == "forgetme":
        services = build_services(
            Settings(table_name=TABLE, memory_model="rules"), dynamodb=dynamodb
        )
        Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(events.ALICE)
    else:  # what DynamoDB's TTL does at expiry: a REMOVE with the old image
        (archive,) = [
            i for i in summaries(dynamodb) if i["sk"]["S"].startswith(keys.SUMMARY_ARCHIVE_PREFIX)
        ]
        dynamodb.delete_item(TableName=TABLE, Key={"pk": archive["pk"], "sk": archive["sk"]})
    deliver(local, dynamodb, "SearchIndexFunction", seen)

    assert archived_passages(index_path) == []


# The rules, in process --------------------------------------------------------------------


def three_rounds(services: MemoryServices, model: ScriptedModel, clock: ManualClock) -> Any:
    """Alice's secret in round one; two summaries (one archived) hold it; returns the secret."""
    secret = gw.message(gw.ALICE, SECRET, T0)
    clock.set(T0 + 60_000)
    services.recorder.record([secret, *chat(3, T0 + 1000)])
    consolidate(services)
    clock.set(T0 + 120_000)
    services.recorder.record(chat(4, T0 + 60_000))
    consolidate(services)
    assert sorted(summary_texts(services.repository.client)) == [
        "Alice sails a catamaran at night.",
        "Alice sails a catamaran at night. They gardened.",
    ]
    return secret


def test_the_round_that_sees_the_delete_drops_the_summaries_and_never_shows_them(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(
        says("Alice sails a catamaran at night."),
        says("Alice sails a catamaran at night. They gardened."),
        says("They flew kites."),
    )
    services = build(dynamodb, clock, model)
    secret = three_rounds(services, model, clock)
    clock.set(T0 + 180_000)
    services.recorder.record([gw.delete(secret), *chat(4, T0 + 120_000)])

    outcome = consolidate(services)

    assert outcome.status == Status.CONSOLIDATED and outcome.summaries_dropped == 2
    assert model.calls[-1].summary == ""  # the dropped summary was never handed on
    assert summary_texts(dynamodb) == ["They flew kites."]
    summary = stored(services)
    assert summary is not None and summary.start_ms > T0  # the new stretch starts after it


def test_a_batch_of_deletes_alone_drops_the_summary_without_a_model_call(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(
        says("Alice sails a catamaran at night."),
        says("Alice sails a catamaran at night. They gardened."),
    )
    services = build(dynamodb, clock, model)
    secret = three_rounds(services, model, clock)
    calls = len(model.calls)
    services.recorder.record([gw.delete(secret)])

    outcome = consolidate(services)

    assert outcome.status == Status.CONSOLIDATED and outcome.summaries_dropped == 2
    assert len(model.calls) == calls
    assert summaries(dynamodb) == []


def test_a_summary_that_never_covered_the_message_stays(dynamodb: Any, clock: ManualClock) -> None:
    """The message and its delete in one batch: the model never reads it, the summary never
    holds it, and the delete drops nothing."""
    model = ScriptedModel(says("They gardened."), says("They gardened. Then kites."))
    services = build(dynamodb, clock, model)
    services.recorder.record(chat(4, T0))
    consolidate(services)
    secret = gw.message(gw.ALICE, SECRET, T0 + 60_000)
    services.recorder.record([secret, gw.delete(secret), *chat(4, T0 + 61_000)])

    outcome = consolidate(services)

    assert outcome.summaries_dropped == 0
    assert "catamaran" not in "\n".join(o.text for o in model.calls[-1].observations)
    assert summary_texts(dynamodb) == ["They gardened.", "They gardened. Then kites."]


def test_a_message_deleted_twice_is_dropped_once_and_the_second_delete_is_harmless(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(
        says("Alice sails a catamaran at night."),
        says("Alice sails a catamaran at night. They gardened."),
        says("They flew kites."),
        says("They flew kites. And more kites."),
    )
    services = build(dynamodb, clock, model)
    secret = three_rounds(services, model, clock)
    clock.set(T0 + 180_000)
    # Deleted twice in one batch (a delete and a bulk delete naming it) ...
    services.recorder.record([gw.delete(secret), gw.delete_bulk([secret]), *chat(4, T0 + 120_000)])
    first = consolidate(services)
    # ... and once more, by another bulk delete, in a later round.
    clock.set(T0 + 240_000)
    again = gw.delete_bulk([secret, gw.message(gw.BOB, "gone too", T0 + 2)])
    services.recorder.record([again, *chat(4, T0 + 180_000)])
    second = consolidate(services)

    assert first.status == second.status == Status.CONSOLIDATED
    assert (first.summaries_dropped, second.summaries_dropped) == (2, 0)
    assert summary_texts(dynamodb) == ["They flew kites.", "They flew kites. And more kites."]


def test_a_refused_round_drops_nothing_and_its_retry_drops_the_summary(
    dynamodb: Any, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The current summary goes in the round's own transaction: refused, it stays whole with
    the delete still pending; the retry, from the new state, drops it."""
    model = ScriptedModel(
        says("Alice sails a catamaran at night."),
        says("Alice sails a catamaran at night. They gardened."),
        says("They flew kites."),
    )
    services = build(dynamodb, clock, model)
    secret = three_rounds(services, model, clock)
    clock.set(T0 + 180_000)
    services.recorder.record([gw.delete(secret), *chat(4, T0 + 120_000)])
    commit = services.repository.commit_consolidation

    def refused(_: Any) -> None:
        raise CommitRejected(["lock lost"])

    monkeypatch.setattr(services.repository, "commit_consolidation", refused)
    assert consolidate(services).status == Status.REJECTED
    assert summary_texts(dynamodb) == ["Alice sails a catamaran at night. They gardened."]
    assert services.repository.count_pending(gw.CHANNEL, 100) == 5

    monkeypatch.setattr(services.repository, "commit_consolidation", commit)
    retried = consolidate(services)

    assert retried.status == Status.CONSOLIDATED and retried.consumed == 5
    assert retried.summaries_dropped == 1  # the archive went with the refused round
    assert summary_texts(dynamodb) == ["They flew kites."]


def test_a_reset_while_a_dropping_round_thinks_refuses_it(
    dynamodb: Any, clock: ManualClock
) -> None:
    """The new summary replaces the dropped one only while that one is still stored: a
    staff reset meanwhile refuses the round, which is redone from the new state."""
    services: MemoryServices

    def reset_meanwhile(batch: ModelInput) -> Any:
        services.repository.clear_channel_summary(gw.CHANNEL)
        return says("They flew kites.")

    model = ScriptedModel(
        says("Alice sails a catamaran at night."),
        says("Alice sails a catamaran at night. They gardened."),
        reset_meanwhile,
        says("Kites, retried."),
    )
    services = build(dynamodb, clock, model)
    secret = three_rounds(services, model, clock)
    clock.set(T0 + 180_000)
    services.recorder.record([gw.delete(secret), *chat(4, T0 + 120_000)])

    raced = consolidate(services)
    retried = consolidate(services)

    assert raced.status == Status.REJECTED
    assert retried.status == Status.CONSOLIDATED and retried.consumed == 5
    assert summary_texts(dynamodb) == ["Kites, retried."]


def test_an_archive_without_a_readable_stretch_is_dropped(
    dynamodb: Any, clock: ManualClock
) -> None:
    """A stored archive whose stretch cannot be read may hold anything: a delete takes it."""
    model = ScriptedModel(says("They gardened."))
    services = build(dynamodb, clock, model)
    clock.set(T0 + 60_000)
    services.recorder.record(chat(4, T0))
    consolidate(services)
    broken = {
        "pk": {"S": keys.channel_pk(gw.CHANNEL)},
        "sk": {"S": keys.summary_archive_sk(T0 + 30_000, "odd")},
        "channel_id": {"S": gw.CHANNEL},
        "episode_id": {"S": "odd"},
        "summary": {"S": "Who knows."},
        "start_ms": {"S": "not a number"},
    }
    dynamodb.put_item(TableName=TABLE, Item=broken)
    services.recorder.record([gw.delete(gw.message(gw.ALICE, "x", T0 + 1))])

    outcome = consolidate(services)

    assert outcome.summaries_dropped == 2
    assert summaries(dynamodb) == []
