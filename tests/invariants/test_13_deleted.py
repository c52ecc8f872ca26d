"""Invariant 13: deleted means never remembered, whatever the delivery order and batch
boundaries. Each test is an attack on that promise: a delete that arrives before its
message, a backlog split between a message and its delete, a delete after the fact."""

from __future__ import annotations

from typing import Any

from botmemory.clock import ManualClock
from botmemory.consolidation.consolidator import round_reserve_ms
from botmemory.consolidation.model.contract import ModelInput
from botmemory.consolidation.outcome import Status
from botmemory.services import MemoryServices
from localrun import gateway as gw
from tests.botmemory.consolidation.test_consolidator import (
    T0,
    answer,
    chat,
    fact,
    facts,
    number_of,
    with_model,
)
from tests.conftest import CountingModel, ScriptedModel

SECRET = "I love sailing at night"


def shown(model: CountingModel | ScriptedModel) -> str:
    return "\n".join(o.text for batch in model.calls for o in batch.observations)


def fact_texts(dynamodb: Any) -> list[str]:
    return sorted(i["text"]["S"] for i in facts(dynamodb))


def test_a_delete_consumed_before_its_message_arrives_keeps_the_message_from_the_model(
    services: MemoryServices, model: CountingModel, dynamodb: Any
) -> None:
    secret = gw.message(gw.ALICE, SECRET, T0 + 500)
    # The delete reaches ingest first (async delivery, a relay retry) and is consolidated.
    services.recorder.record([gw.delete(secret), *chat(19, start_ms=T0 + 10_000)])
    (first,) = services.consolidator.consolidate(gw.CHANNEL)
    assert first.status == Status.CONSOLIDATED

    services.recorder.record([secret, *chat(19, start_ms=T0 + 100_000)])
    (second,) = services.consolidator.consolidate(gw.CHANNEL)

    assert second.status == Status.CONSOLIDATED and second.consumed == 20
    assert "sailing" not in shown(model)
    assert not any("sailing" in t.lower() for t in fact_texts(dynamodb))


def test_a_backlog_split_between_a_message_and_its_delete_never_shows_the_message(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = CountingModel()
    services = with_model(dynamodb, clock, model, consolidate_every=20, max_batch=20)
    secret = gw.message(gw.ALICE, SECRET, T0 + 19_000)
    # 19 messages, then the secret and its delete at the same millisecond: the delete's key
    # sorts first, so it closes the first batch and the message opens the second.
    services.recorder.record([*chat(19), secret, gw.delete(secret), *chat(19, T0 + 60_000)])

    # Time for normal rounds only: a backlog's grown batch would hold both in one.
    reserve = round_reserve_ms(services.settings)
    outcomes = services.consolidator.consolidate(gw.CHANNEL, time_left_ms=lambda: reserve)

    assert [o.consumed for o in outcomes] == [20, 20]
    assert len(model.calls) == 2
    assert "sailing" not in shown(model)


def test_a_bulk_delete_consumed_before_its_messages_arrive_hides_them_too(
    services: MemoryServices, model: CountingModel
) -> None:
    secrets = [gw.message(gw.ALICE, f"{SECRET} number {i}", T0 + 500 + i) for i in range(3)]
    services.recorder.record([gw.delete_bulk(secrets), *chat(19, start_ms=T0 + 10_000)])
    services.consolidator.consolidate(gw.CHANNEL)

    services.recorder.record([*secrets, *chat(17, start_ms=T0 + 100_000)])
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.consumed == 20
    assert "sailing" not in shown(model)


def test_a_fact_drawn_from_a_message_deleted_later_is_retired(
    services: MemoryServices, model: CountingModel, dynamodb: Any
) -> None:
    secret = gw.message(gw.ALICE, SECRET, T0 + 500)
    services.recorder.record([secret, *chat(19, start_ms=T0 + 10_000)])
    services.consolidator.consolidate(gw.CHANNEL)
    assert any("sailing" in t.lower() for t in fact_texts(dynamodb))

    services.recorder.record([gw.delete(secret), *chat(19, start_ms=T0 + 100_000)])
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    assert outcome.retired == 1
    assert not any("sailing" in t.lower() for t in fact_texts(dynamodb))


def test_a_retired_message_leaves_a_fact_its_other_evidence(
    dynamodb: Any, clock: ManualClock
) -> None:
    first = gw.message(gw.ALICE, "I sail on lakes", T0 + 500)
    second = gw.message(gw.ALICE, "Sailing is my thing", T0 + 600)

    def sailing(batch: ModelInput) -> Any:
        cited = [number_of(batch, "I sail on lakes"), number_of(batch, "Sailing is my thing")]
        return answer(fact(gw.ALICE, "Sails", cited))

    model = ScriptedModel(sailing, answer())
    services = with_model(dynamodb, clock, model)
    services.recorder.record([first, second, *chat(18, start_ms=T0 + 10_000)])
    services.consolidator.consolidate(gw.CHANNEL)
    (kept,) = services.repository.all_facts(gw.GUILD, gw.ALICE)
    assert len(kept.provenance) == 2

    services.recorder.record([gw.delete(first), *chat(19, start_ms=T0 + 100_000)])
    (outcome,) = services.consolidator.consolidate(gw.CHANNEL)

    (still,) = services.repository.all_facts(gw.GUILD, gw.ALICE)
    assert outcome.retired == 0
    assert still.provenance == [p for p in kept.provenance if first["d"]["id"] not in p]
    assert len(still.provenance) == 1

    services.recorder.record([gw.delete(second), *chat(19, start_ms=T0 + 200_000)])
    (last,) = services.consolidator.consolidate(gw.CHANNEL)

    assert last.retired == 1
    assert services.repository.all_facts(gw.GUILD, gw.ALICE) == []
