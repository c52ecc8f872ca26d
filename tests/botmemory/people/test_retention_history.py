"""A server's retention holds for every history entry, not only consolidation's commit:
the hot tier's demotions, evictions and restores, the facts retired with the messages they
came from, and a quarantined batch (it names recorded messages) all expire by the server's
retention (botmemory.people.retention.RetentionReader.days_of), as a fact written by hand
does (tests/botmemory/people/test_server_retention.py).

Through the consolidator the work queue's worker runs, and the staff command's router."""

from __future__ import annotations

from typing import Any

from botmemory.clock import DAY_MS, ManualClock
from botmemory.consolidation.model.contract import MemoryModelError
from botmemory.records import FactChange, FactStatus
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from localrun import gateway as gw
from tests.botmemory.memory.test_hot_tier import (
    STAFF,
    round_with,
    run,
    seed,
    services_with,
    status_of,
)
from tests.conftest import TABLE, ScriptedModel

SERVER_DAYS = 5


def shortened(services: MemoryServices, **days: int) -> None:
    """Staff keep this server's facts (or messages) shorter than the deployment does."""
    services.repository.set_server_retention(
        gw.GUILD, days, staff_id=gw.ALICE, now_ms=services.clock.now_ms()
    )


def history_expiries(services: MemoryServices, change: FactChange) -> list[tuple[int, int]]:
    """(when, expires_at) of this server's history entries of one kind of change."""
    items = services.repository._client.query(  # the partition as stored
        TableName=TABLE,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": keys.scope_pk(gw.GUILD)}},
    )["Items"]
    return [
        (int(i["at_ms"]["N"]), int(i["expires_at"]["N"]))
        for i in items
        if keys.kind_of(i["sk"]["S"]) == keys.ItemKind.HISTORY
        and i.get("change", {}).get("S") == change.value
    ]


def within_server_days(found: list[tuple[int, int]]) -> bool:
    return bool(found) and all(
        expires <= (at + SERVER_DAYS * DAY_MS) // 1000 for at, expires in found
    )


def test_the_hot_tiers_demotions_evictions_and_restores_keep_the_servers_retention(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(
        dynamodb, clock, consolidate_every=2, hot_facts_per_person=1, facts_max_per_person=3
    )
    assert services.settings.fact_retention_days > SERVER_DAYS
    shortened(services, facts=SERVER_DAYS)
    kept = seed(services, gw.ALICE, "Alice recalled often", hits=9, last_hit_days_ago=1)
    never = seed(services, gw.ALICE, "Alice never recalled", updated_days_ago=2)
    old = seed(services, gw.ALICE, "Alice demoted long ago", status=FactStatus.DEMOTED)
    older = seed(
        services,
        gw.ALICE,
        "Alice demoted longer ago",
        status=FactStatus.DEMOTED,
        updated_days_ago=3,
    )

    outcome = round_with(services, gw.ALICE)

    assert (outcome.demoted, outcome.evicted) == (1, 1)
    assert status_of(services, kept) == FactStatus.ACTIVE
    assert status_of(services, never) == FactStatus.DEMOTED
    assert within_server_days(history_expiries(services, FactChange.DEMOTED))
    assert within_server_days(history_expiries(services, FactChange.DELETED))
    restorable = next(f for f in (old, older) if status_of(services, f) == FactStatus.DEMOTED)

    clock.advance(seconds=10)
    restored = run(
        services,
        "memory-staff",
        "restore-fact",
        {"member": gw.ALICE, "id": restorable.fact_id},
        permissions=STAFF,
    )

    assert "Restored" in restored, restored
    assert within_server_days(history_expiries(services, FactChange.RESTORED))


def test_a_fact_retired_with_its_deleted_message_keeps_the_servers_retention(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock, consolidate_every=2)
    shortened(services, facts=SERVER_DAYS)
    at = clock.now_ms()
    said = gw.message(gw.ALICE, "I am a beekeeper", at)
    services.recorder.record([said, gw.message(gw.BOB, "nice", at + 1_000)])
    services.consolidator.consolidate(gw.CHANNEL, force=True)
    assert services.repository.active_facts(gw.GUILD, gw.ALICE, 9), "no fact was learned"

    clock.advance(seconds=300)
    services.recorder.record([gw.delete(said)])
    services.recorder.record([gw.message(gw.BOB, "anyway", clock.now_ms() + 1_000)])
    services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert not services.repository.active_facts(gw.GUILD, gw.ALICE, 9)
    assert within_server_days(history_expiries(services, FactChange.DELETED))


def test_a_quarantined_batch_keeps_the_servers_message_retention(
    dynamodb: Any, clock: ManualClock
) -> None:
    """A batch that fails even alone is quarantined; the quarantine names the messages and
    lasts as long as they may."""
    settings = Settings(
        table_name=TABLE,
        memory_model="rules",
        bot_user_id=gw.BOT,
        consolidate_every=2,
        batch_max_attempts=1,
    )
    model = ScriptedModel(*[MemoryModelError("not an answer")] * 10)
    services = build_services(settings, dynamodb=dynamodb, clock=clock, model=model)
    assert settings.observation_retention_days > SERVER_DAYS
    shortened(services, messages=SERVER_DAYS)
    at = clock.now_ms()
    services.recorder.record(
        [gw.message(gw.ALICE, "one", at), gw.message(gw.BOB, "two", at + 1_000)]
    )

    quarantined: list[dict[str, Any]] = []
    for _ in range(6):
        services.consolidator.consolidate(gw.CHANNEL, force=True)
        quarantined = dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :q)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.channel_pk(gw.CHANNEL)},
                ":q": {"S": keys.QUARANTINE_PREFIX},
            },
        )["Items"]
        if quarantined:
            break
        clock.advance(ms=3 * 60 * 60_000)  # past the longest back-off

    assert quarantined, model.calls
    for item in quarantined:
        at_ms = int(item["quarantined_ms"]["N"])
        assert int(item["expires_at"]["N"]) <= (at_ms + SERVER_DAYS * DAY_MS) // 1000
