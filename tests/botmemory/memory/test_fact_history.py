"""Every change to a fact, by anyone, is kept as a history entry, retained and erased like
the fact (botmemory.memory.fact_history)."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.clock import DAY_MS, ManualClock, epoch_seconds, ttl_alive
from botmemory.commands.router import Commands
from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    ModelInput,
    ProposedEpisode,
    ProposedFact,
)
from botmemory.discord.interactions import Permissions
from botmemory.people.erasure import Eraser
from botmemory.records import (
    Fact,
    FactChange,
    FactHistory,
    FactKind,
    FactSource,
    HistoryActor,
)
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.commit import MAX_TRANSACTION_ACTIONS, ConsolidationCommit
from botmemory.storage.repository import MemoryRepository
from localrun import gateway as gw
from scripts.make_events import command
from tests.conftest import TABLE, ScriptedModel, scan_all

T0 = 1_767_225_600_000
STAFF = str(Permissions.MANAGE_GUILD.value)


def services_with(
    dynamodb: Any, clock: ManualClock, model: Any, **overrides: Any
) -> MemoryServices:
    settings = Settings(table_name=TABLE, memory_model="scripted", bot_user_id=gw.BOT, **overrides)
    return build_services(settings, dynamodb=dynamodb, clock=clock, model=model)


def said(batch: ModelInput, text: str) -> int:
    return next(o.number for o in batch.observations if text in o.text)


def proposed(user: str, text: str, evidence: int, supersedes: list[str] | None = None) -> Any:
    return ProposedFact(
        user_id=user,
        text=text,
        kind=FactKind.PREFERENCE,
        evidence=[evidence],
        supersedes=supersedes or [],
    )


def answer(*facts: ProposedFact) -> ConsolidationAnswer:
    return ConsolidationAnswer(
        facts=list(facts), episode=ProposedEpisode(summary="They talked.", participants=[])
    )


def history(services: MemoryServices, fact_id: str, scope: str = gw.GUILD) -> list[FactHistory]:
    return services.repository.history_of(scope, fact_id)


def changes(entries: list[FactHistory]) -> list[tuple[str, str | None, str | None, str]]:
    return [(e.change.value, e.old, e.new, e.actor.value) for e in entries]


def only_fact(services: MemoryServices, text: str, user: str = gw.ALICE) -> Fact:
    return next(f for f in services.repository.all_facts(gw.GUILD, user) if f.text == text)


# Consolidation ------------------------------------------------------------------------


def test_consolidation_records_created_restated_superseded_and_deleted_facts(
    dynamodb: Any, clock: ManualClock
) -> None:
    tea_then_coffee = ScriptedModel(
        lambda b: answer(proposed(gw.ALICE, "Likes tea", said(b, "tea"))),
        lambda b: answer(proposed(gw.ALICE, "Likes tea", said(b, "still"))),  # as it is
        lambda b: answer(
            proposed(gw.ALICE, "Likes coffee", said(b, "coffee"), supersedes=[tea.fact_id])
        ),
        lambda b: answer(proposed(gw.ALICE, "likes COFFEE!", said(b, "COFFEE"))),  # new text
        lambda b: answer(),
    )
    services = services_with(dynamodb, clock, tea_then_coffee)
    record, consolidate = services.recorder.record, services.consolidator.consolidate

    record([gw.message(gw.ALICE, "I like tea", T0)])
    consolidate(gw.CHANNEL, force=True)
    tea = only_fact(services, "Likes tea")
    record([gw.message(gw.ALICE, "I still like tea", T0 + 1000)])
    consolidate(gw.CHANNEL, force=True)
    clock.advance(seconds=5)
    record([gw.message(gw.ALICE, "I like coffee now", T0 + 2000)])
    consolidate(gw.CHANNEL, force=True)
    coffee = only_fact(services, "Likes coffee")
    clock.advance(seconds=5)
    restated = gw.message(gw.ALICE, "COFFEE is life", T0 + 3000)
    record([restated])
    consolidate(gw.CHANNEL, force=True)
    assert only_fact(services, "likes COFFEE!").fact_id == coffee.fact_id  # same fact, new text

    assert changes(history(services, tea.fact_id)) == [
        ("created", None, "Likes tea", "consolidation"),  # stated again as it is: no entry
        ("superseded", "Likes tea", "Likes coffee", "consolidation"),
    ]
    assert history(services, tea.fact_id)[1].superseded_by == coffee.fact_id
    assert changes(history(services, coffee.fact_id)) == [
        ("created", None, "Likes coffee", "consolidation"),
        ("updated", "Likes coffee", "likes COFFEE!", "consolidation"),
    ]

    # Its evidence goes (the restatement is all it rests on now): the fact goes, recorded.
    record([gw.delete(restated)])
    consolidate(gw.CHANNEL, force=True)
    assert services.repository.fact(gw.GUILD, gw.ALICE, coffee.fact_id) is None
    assert changes(history(services, coffee.fact_id))[-1] == (
        "deleted",
        "likes COFFEE!",
        None,
        "consolidation",
    )
    assert all(e.actor_id is None for e in history(services, coffee.fact_id))


def test_history_is_retained_like_the_fact(dynamodb: Any, clock: ManualClock) -> None:
    services = services_with(
        dynamodb,
        clock,
        ScriptedModel(lambda b: answer(proposed(gw.ALICE, "Likes tea", said(b, "tea")))),
        fact_retention_days=30,
    )
    services.recorder.record([gw.message(gw.ALICE, "I like tea", T0)])
    services.consolidator.consolidate(gw.CHANNEL, force=True)
    tea = only_fact(services, "Likes tea")

    (entry,) = history(services, tea.fact_id)

    assert entry.expires_at == tea.expires_at == epoch_seconds(clock.now_ms() + 30 * DAY_MS)
    clock.advance(days=31)
    assert not ttl_alive(entry.expires_at, clock.now_ms())


def test_history_entries_of_a_full_batch_never_cost_a_fact_its_place(
    dynamodb: Any, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction stays within DynamoDB's 100 actions; entries that do not fit it are
    written right after it, so every fact still has its entry."""

    def one_fact_per_message(batch: ModelInput) -> ConsolidationAnswer:
        return answer(
            *(
                proposed(o.author_id, f"Likes topic {o.text.split()[-1]}", o.number)
                for o in batch.observations
            )
        )

    # Many facts per person on purpose (the cap on new facts is not what this measures).
    services = services_with(
        dynamodb, clock, ScriptedModel(one_fact_per_message), max_batch=50, new_facts_per_person=20
    )
    sizes: list[int] = []
    original = MemoryRepository.commit_consolidation

    def measured(self: MemoryRepository, commit: ConsolidationCommit) -> None:
        sizes.append(len(commit.actions(TABLE)))
        original(self, commit)

    monkeypatch.setattr(MemoryRepository, "commit_consolidation", measured)
    speakers = [gw.ALICE, gw.BOB, gw.CAROL]
    services.recorder.record(
        [gw.message(speakers[i % 3], f"I like topic {i}", T0 + i * 1000) for i in range(50)]
    )

    (outcome,) = services.consolidator.consolidate(gw.CHANNEL, force=True)

    assert outcome.consumed == 50 and sizes and max(sizes) <= MAX_TRANSACTION_ACTIONS
    # As many facts as before history existed: 100 actions less 50 consumptions, 6 erasure
    # and opt-out checks, the episode and the lock leave 42, two a fact (the profiles and
    # names are written after the transaction: botmemory.storage.round_people).
    facts = [f for user in speakers for f in services.repository.all_facts(gw.GUILD, user)]
    assert len(facts) == outcome.facts_written == 21
    for fact in facts:
        assert changes(history(services, fact.fact_id)) == [
            ("created", None, fact.text, "consolidation")
        ]


# Members and staff ------------------------------------------------------------------------


def run(
    commands: Commands,
    name: str,
    sub: str,
    options: dict[str, Any],
    *,
    user: str = gw.ALICE,
    permissions: str = "0",
) -> str:
    interaction = command("1600000000000000001", name, sub, options, permissions, user)
    interaction["guild_id"] = gw.GUILD
    return str(commands.handle(interaction)["data"]["content"])


def seeded(services: MemoryServices, user: str, text: str) -> Fact:
    now = services.clock.now_ms()
    fact = Fact(
        fact_id=f"f{abs(hash((user, text))) % 10**7:07d}",
        scope=gw.GUILD,
        user_id=user,
        text=text,
        kind=FactKind.FACT,
        source=FactSource.SELF,
        created_ms=now,
        updated_ms=now,
        expires_at=epoch_seconds(now + 30 * DAY_MS),
    )
    services.repository.put_fact(fact)
    return fact


def test_members_and_staff_changes_are_recorded_with_who_acted(
    services: MemoryServices, clock: ManualClock
) -> None:
    commands = Commands(services, defer=lambda job: None)

    remembered = run(commands, "memory", "remember", {"text": "I grow chillies"})
    fact_id = remembered.split("`")[1]
    clock.advance(seconds=1)
    run(commands, "memory", "remember", {"text": "I grow chillies"})  # the same again: no change
    clock.advance(seconds=1)
    run(commands, "memory", "remember", {"text": "I grow Chillies!"})  # same fact, new text
    clock.advance(seconds=1)
    run(commands, "memory", "forget", {"what": fact_id})
    tuba = seeded(services, gw.BOB, "Plays the tuba")
    run(commands, "memory-staff", "forget-fact", {"id": tuba.fact_id}, permissions=STAFF)

    mine = history(services, fact_id)
    assert changes(mine) == [
        ("created", None, "I grow chillies", "member"),
        ("updated", "I grow chillies", "I grow Chillies!", "member"),
        ("deleted", "I grow Chillies!", None, "member"),
    ]
    assert {e.actor_id for e in mine} == {gw.ALICE}
    (staff,) = history(services, tuba.fact_id)
    assert changes([staff]) == [("deleted", "Plays the tuba", None, "staff")]
    assert (staff.user_id, staff.actor_id) == (gw.BOB, gw.ALICE)


def test_erasure_takes_the_subjects_history_and_unnames_the_actor(
    services: MemoryServices,
) -> None:
    commands = Commands(services, defer=lambda job: None)
    run(commands, "memory", "remember", {"text": "I grow chillies"})
    tuba = seeded(services, gw.BOB, "Plays the tuba")
    run(commands, "memory-staff", "forget-fact", {"id": tuba.fact_id}, permissions=STAFF)
    kinds = {keys.kind_of(i["sk"]["S"]) for i in scan_all(services.repository.client)}
    assert {keys.ItemKind.HISTORY, keys.ItemKind.ACTED} <= kinds

    Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(gw.ALICE)

    left = scan_all(services.repository.client)
    assert not [i for i in left if gw.ALICE in str(i)]  # her entries, her id as an actor
    (bobs,) = history(services, tuba.fact_id)  # Bob's history stays Bob's
    assert (bobs.user_id, bobs.actor_id, bobs.actor) == (gw.BOB, None, HistoryActor.STAFF)

    Eraser(services.repository, services.clock, services.opt_outs.hash_of).erase(gw.BOB)
    assert history(services, tuba.fact_id) == []


def test_a_history_entry_sort_key_lists_a_facts_changes_oldest_first() -> None:
    first = keys.history_sk("abc", 5, "x")
    later = keys.history_sk("abc", 40, "a")
    assert first.startswith(keys.history_prefix("abc")) and first < later
    assert keys.kind_of(first) == keys.ItemKind.HISTORY
    pointer = keys.acted_sk(gw.ALICE, later)
    assert keys.kind_of(pointer) == keys.ItemKind.ACTED
    assert keys.acted_target(pointer) == later
    assert keys.acted_target(first) is None
    assert FactChange.DELETED.value == "deleted"
