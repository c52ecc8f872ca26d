"""The hot tier, continued: staff restore a demoted fact, the races a retiering loses, and the
addresses of the facts a block showed."""

from __future__ import annotations

from typing import Any

from botmemory.clock import DAY_MS, ManualClock, epoch_seconds
from botmemory.commands.router import Commands
from botmemory.discord.interactions import InteractionResponseType, InteractionType
from botmemory.memory.hot_tier import HotTier
from botmemory.recall.contract import (
    RecalledFact,
    RecalledPersona,
    RecallResult,
    shown_facts,
)
from botmemory.records import (
    FactChange,
    FactStatus,
    HistoryActor,
    MemoryScope,
    scope_of,
)
from botmemory.services import MemoryServices
from botmemory.storage import keys
from localrun import gateway as gw
from scripts.make_events import command
from tests.botmemory.memory.test_hot_tier import (
    STAFF,
    _ids,
    round_with,
    run,
    seed,
    services_with,
    status_of,
    stored,
)

# Staff restore ---------------------------------------------------------------------------


def test_staff_restore_a_demoted_fact_as_just_recalled_and_a_member_cannot(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock, consolidate_every=2, hot_facts_per_person=1)
    tuba = seed(services, gw.BOB, "Bob plays the tuba", status=FactStatus.DEMOTED, hits=0)
    other = seed(services, gw.BOB, "Bob fact never recalled", updated_days_ago=0.5)

    refused = run(services, "memory-staff", "restore-fact", {"member": gw.BOB, "id": tuba.fact_id})
    assert "Only members with the Manage Server permission" in refused
    assert status_of(services, tuba) == FactStatus.DEMOTED
    wrong_member = run(
        services,
        "memory-staff",
        "restore-fact",
        {"member": gw.ALICE, "id": tuba.fact_id},
        permissions=STAFF,
    )
    assert "no fact with that id" in wrong_member
    assert "not demoted" in run(
        services,
        "memory-staff",
        "restore-fact",
        {"member": gw.BOB, "id": other.fact_id},
        permissions=STAFF,
    )
    # Autocomplete offers the member's demoted facts.
    typing = command(
        str(next(_ids)), "memory-staff", "restore-fact", {"member": gw.BOB, "id": ""}, STAFF
    )
    typing.update(type=InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE, guild_id=gw.GUILD)
    typing["data"]["options"][0]["options"][1]["focused"] = True
    offered = Commands(services, defer=lambda job: None).handle(typing)
    assert offered["type"] == InteractionResponseType.APPLICATION_COMMAND_AUTOCOMPLETE_RESULT
    assert [c["value"] for c in offered["data"]["choices"]] == [tuba.fact_id]

    clock.advance(seconds=10)
    done = run(
        services,
        "memory-staff",
        "restore-fact",
        {"member": gw.BOB, "id": tuba.fact_id},
        user=gw.ALICE,
        permissions=STAFF,
    )

    assert f"Restored `{tuba.fact_id}`" in done
    restored = stored(services, tuba)
    assert restored is not None and restored.status == FactStatus.ACTIVE
    assert (restored.recall_hits, restored.last_recall_ms) == (1, clock.now_ms())
    assert tuba.fact_id in {
        f.fact_id for f in services.repository.active_facts(gw.GUILD, gw.BOB, 9)
    }
    (entry,) = services.repository.history_of(gw.GUILD, tuba.fact_id)
    assert (entry.change, entry.actor, entry.actor_id) == (
        FactChange.RESTORED,
        HistoryActor.STAFF,
        gw.ALICE,
    )
    history = run(services, "memory-staff", "history", {"id": tuba.fact_id}, permissions=STAFF)
    assert f"staff <@{gw.ALICE}>: restored " in history
    # Counting as just recalled, the next round keeps it and demotes the never-recalled one.
    round_with(services, gw.BOB)
    assert status_of(services, tuba) == FactStatus.ACTIVE
    assert status_of(services, other) == FactStatus.DEMOTED


def tier_of(services: MemoryServices) -> HotTier:
    """The hot tier as the consolidator builds it."""
    return HotTier(
        services.repository,
        services.settings,
        services.clock,
        services.opt_outs.hash_of,
        services.retention,
    )


# Races ------------------------------------------------------------------------------------


def test_a_forget_landing_after_the_read_beats_the_demotion(
    dynamodb: Any, clock: ManualClock
) -> None:
    services = services_with(dynamodb, clock, hot_facts_per_person=1)
    forgotten = seed(services, gw.ALICE, "Alice fact never recalled", updated_days_ago=9)
    second = seed(services, gw.ALICE, "Alice fact also never recalled", updated_days_ago=5)
    seed(services, gw.ALICE, "Alice fact recalled", hits=3, last_hit_days_ago=1)
    tier = tier_of(services)
    read = services.repository.all_facts(gw.GUILD, gw.ALICE)  # what the round read

    assert "Forgotten" in run(services, "memory", "forget", {"what": forgotten.fact_id})
    report = tier.tend(read)

    assert stored(services, forgotten) is None  # not written back as a demoted stub
    assert [e.change for e in services.repository.history_of(gw.GUILD, forgotten.fact_id)] == [
        FactChange.DELETED
    ]
    assert report.demoted == 1 and status_of(services, second) == FactStatus.DEMOTED


def test_a_person_being_erased_is_not_retiered(dynamodb: Any, clock: ManualClock) -> None:
    services = services_with(dynamodb, clock, hot_facts_per_person=1)
    facts = [seed(services, gw.ALICE, f"Alice fact {n}") for n in range(3)]
    now = clock.now_ms()
    services.repository.mark_erasing(
        services.opt_outs.hash_of(gw.ALICE), now, epoch_seconds(now + DAY_MS)
    )
    tier = tier_of(services)

    report = tier.tend(services.repository.all_facts(gw.GUILD, gw.ALICE))

    assert (report.demoted, report.evicted) == (0, 0)
    assert [status_of(services, f) for f in facts] == [FactStatus.ACTIVE] * 3
    assert all(services.repository.history_of(gw.GUILD, f.fact_id) == [] for f in facts)


def test_the_facts_a_block_showed_are_addressed_where_they_are_kept() -> None:
    # A person's own fact is the server's; what a persona knows of them and its own knowledge
    # live in its lineage's scope, where the answer path counts their recall hits.
    def shown(fact_id: str, memory_scope: MemoryScope) -> RecalledFact:
        return RecalledFact(
            id=fact_id,
            text="x",
            kind="preference",
            source="self",
            updated_ms=1,
            memory_scope=memory_scope,
        )

    facts = {
        "101": [shown("f1", MemoryScope.USER), shown("f2", MemoryScope.PERSONA_USER)],
        keys.PERSONA_SUBJECT: [shown("f3", MemoryScope.PERSONA)],
    }
    persona = RecalledPersona(id="bard", name="Bard", lineage="L1")
    with_persona = RecallResult(
        memory="", system_prompt=None, enabled=True, facts=facts, persona=persona
    )
    server, lineage = scope_of("900"), keys.persona_scope(scope_of("900"), "L1")

    assert shown_facts(with_persona, "900") == [
        (server, "101", "f1"),
        (lineage, "101", "f2"),
        (lineage, keys.PERSONA_SUBJECT, "f3"),
    ]
    without = RecallResult(memory="", system_prompt=None, enabled=True, facts=facts)
    assert {scope for scope, _, _ in shown_facts(without, "900")} == {server}
    assert shown_facts(with_persona, None)[0] == (scope_of(None), "101", "f1")
