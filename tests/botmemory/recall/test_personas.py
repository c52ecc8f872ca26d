"""Personas in recall, answers, corrections and erasure: two personas of one server never see
each other's memories, everyone's own facts reach both, the persona's memories come first,
one persona's model cannot change another's facts, and erasure reaches every scope."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.answering.corrections import Refusal, apply_update_memory
from botmemory.answering.prompt import PromptBuilder
from botmemory.answering.question import Question
from botmemory.clock import ManualClock
from botmemory.people.erasure import Eraser
from botmemory.recall.block import FACT_HEADING
from botmemory.recall.contract import RecallResult, parse_request
from botmemory.records import Fact, MemoryScope, Persona
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from localrun import gateway as gw
from tests.conftest import RequestCounter, scan_all
from tests.support.facts import a_fact

T0 = 1_767_225_600_000
SUPPORT = "200000000000000501"
HOMEWORK = "200000000000000502"
GENERAL = "200000000000000503"
HELPDESK = Persona(
    persona_id="helpdesk",
    lineage_id="lin-help",
    name="Helpdesk",
    prompt="You are the helpdesk.\n{memory}",
    guild_id=gw.GUILD,
    channels=[SUPPORT],
)
TUTOR = Persona(
    persona_id="tutor",
    lineage_id="lin-tutor",
    name="Tutor",
    prompt="You are a patient tutor.\n{memory}",
    guild_id=gw.GUILD,
    channels=[HOMEWORK],
)


def fact(user: str, text: str, persona: Persona | None = None, *, knowledge: bool = False) -> Fact:
    scope = keys.persona_scope(gw.GUILD, persona.lineage_id) if persona else gw.GUILD
    memory_scope = MemoryScope.USER
    if persona is not None:
        memory_scope = MemoryScope.PERSONA if knowledge else MemoryScope.PERSONA_USER
    subject = keys.PERSONA_SUBJECT if knowledge else user
    return a_fact(
        subject,
        text,
        scope=scope,
        at_ms=T0,
        retention_days=100,
        learned_in=(HOMEWORK, SUPPORT, GENERAL, gw.CHANNEL),
        memory_scope=memory_scope,
        lineage_id=persona.lineage_id if persona else None,
        evidence_user_ids=[user, gw.CAROL] if knowledge else [],
    )


@pytest.fixture
def world(dynamodb: Any, clock: ManualClock) -> MemoryServices:
    clock.set(T0 + 1000)
    settings = Settings(table_name="MemoryTable", memory_model="rules", bot_user_id=gw.BOT)
    services = build_services(settings, dynamodb=dynamodb, clock=clock)
    for persona in (HELPDESK, TUTOR):
        services.repository.put_persona(persona, replaces_ms=None)
    for seeded in (
        fact(gw.ALICE, "Alice is learning Python"),
        fact(gw.ALICE, "Alice prefers email over phone", HELPDESK),
        fact(gw.ALICE, "Alice struggles with recursion", TUTOR),
        fact(gw.BOB, "Password resets go through the portal", HELPDESK, knowledge=True),
        fact(gw.BOB, "Homework is due on Fridays", TUTOR, knowledge=True),
    ):
        services.repository.put_fact(seeded)
    return services


def recall(services: MemoryServices, channel: str, **fields: Any) -> RecallResult:
    request = {
        "guild_id": gw.GUILD,
        "channel_id": channel,
        "user_id": gw.ALICE,
        "participants": [gw.ALICE],
        **fields,
    }
    return services.recaller.recall(parse_request(request))


def texts(result: RecallResult) -> set[str]:
    return {f.text for facts in result.facts.values() for f in facts}


def test_two_personas_never_see_each_others_memories_and_both_see_the_persons_own(
    world: MemoryServices,
) -> None:
    helpdesk = recall(world, SUPPORT, persona_id="helpdesk")
    tutor = recall(world, HOMEWORK, persona_id="tutor")
    none = recall(world, GENERAL)

    assert texts(helpdesk) == {
        "Alice is learning Python",
        "Alice prefers email over phone",
        "Password resets go through the portal",
    }
    assert texts(tutor) == {
        "Alice is learning Python",
        "Alice struggles with recursion",
        "Homework is due on Fridays",
    }
    assert texts(none) == {"Alice is learning Python"}
    assert helpdesk.persona is not None and helpdesk.persona.lineage == "lin-help"
    assert none.persona is None and none.persona_note is None
    # The block says whose knowledge it is, and the JSON says whose memory each fact is.
    assert 'What "Helpdesk" knows here:' in helpdesk.memory
    scopes = {f.text: f.memory_scope for facts in helpdesk.facts.values() for f in facts}
    assert scopes["Alice prefers email over phone"] == MemoryScope.PERSONA_USER
    assert scopes["Password resets go through the portal"] == MemoryScope.PERSONA
    assert scopes["Alice is learning Python"] == MemoryScope.USER


def test_the_persona_s_memories_fill_the_facts_budget_first(world: MemoryServices) -> None:
    for n in range(6):
        world.repository.put_fact(fact(gw.ALICE, f"Alice has own fact number {n} " + "x" * 40))
    tight = world.settings.model_copy(update={"recall_fact_chars": 320})
    world.recaller._settings = tight  # one budget, the rest as built

    result = recall(world, SUPPORT, persona_id="helpdesk")

    section = next(s for s in result.memory.split("\n\n") if s.startswith(FACT_HEADING))
    assert len(section) <= 320
    shown = {f.text: f.memory_scope for facts in result.facts.values() for f in facts}
    # What the persona knows of Alice and its own knowledge are in; the rest of the room
    # goes to Alice's own facts, which do not all fit.
    assert "Alice prefers email over phone" in shown
    assert "Password resets go through the portal" in shown
    own = [text for text, scope in shown.items() if scope == MemoryScope.USER]
    assert 0 < len(own) < 7
    lines = section.splitlines()
    first_own = min(i for i, line in enumerate(lines) if any(t in line for t in own))
    persona_line = next(i for i, line in enumerate(lines) if "Alice prefers email" in line)
    assert lines[persona_line].startswith('  - "Alice prefers email over phone" (said ')
    assert persona_line < first_own


def test_an_unknown_or_removed_persona_is_said_and_recall_goes_on_without(
    world: MemoryServices,
) -> None:
    removed = TUTOR.model_copy(update={"removed_ms": T0, "updated_ms": T0})
    world.repository.put_persona(removed, replaces_ms=0)

    unknown = recall(world, SUPPORT, persona_id="nobody")
    gone = recall(world, HOMEWORK, persona_id="tutor")

    for result in (unknown, gone):
        assert result.persona is None and result.persona_note
        assert texts(result) == {"Alice is learning Python"}


def test_a_bad_persona_id_is_a_bad_request(world: MemoryServices) -> None:
    from botmemory.recall.contract import RecallError

    with pytest.raises(RecallError) as refused:
        parse_request({"channel_id": SUPPORT, "user_id": gw.ALICE, "persona_id": "Bad Id!"})
    assert refused.value.fields == ["persona_id"]


def test_recall_with_a_persona_reads_its_scopes_in_the_same_waves(
    world: MemoryServices, dynamodb: Any
) -> None:
    recall(world, SUPPORT)  # the server's retention, read once a minute (a warm container)
    counter = RequestCounter(dynamodb)
    recall(world, SUPPORT, persona_id="helpdesk")
    with_persona = list(counter.calls)
    counter.reset()
    recall(world, SUPPORT)
    without = list(counter.calls)

    # The persona lookup (one Query of the server's personas), what it knows of Alice and
    # its own knowledge: three more requests, all in waves recall already has.
    assert len(with_persona) == len(without) + 3


def test_the_answer_uses_the_channel_s_persona_and_may_correct_only_its_facts(
    world: MemoryServices,
) -> None:
    builder = PromptBuilder(world.repository, world.recaller, world.settings)
    question = Question(
        guild_id=gw.GUILD,
        channel_id=SUPPORT,
        author_id=gw.ALICE,
        author_name="Alice",
        content="can you reset my password?",
    )
    persona = world.personas.for_channel(gw.GUILD, SUPPORT)

    prompt = builder.build(question, "default prompt {memory}", persona)

    assert persona == HELPDESK.model_copy(update={"guild_id": gw.GUILD})
    # The persona's prompt is the instructions, after the memory block (primacy, the default).
    assert prompt.system.startswith("<memory>") and "\n\nYou are the helpdesk." in prompt.system
    assert "default prompt" not in prompt.system
    assert "Alice struggles with recursion" not in prompt.system
    correctable = {f.text for f in prompt.correctable.values()}
    assert correctable == {"Alice is learning Python", "Alice prefers email over phone"}
    # A forged call against the tutor's fact about Alice changes nothing.
    tutors = fact(gw.ALICE, "Alice struggles with recursion", TUTOR)
    refusal = apply_update_memory(
        world,
        {"id": tutors.fact_id, "text": ""},
        shown={tutors.fact_id: tutors},
        scope=gw.GUILD,
        bot_user_id=gw.BOT,
        actor_id=gw.ALICE,
        lineage_id=HELPDESK.lineage_id,
    )
    assert isinstance(refusal, Refusal) and "another persona" in refusal.reason
    stored = world.repository.fact(tutors.scope, gw.ALICE, tutors.fact_id)
    assert stored is not None and stored.text == "Alice struggles with recursion"
    # Its own fact about Alice, it may.
    own = fact(gw.ALICE, "Alice prefers email over phone", HELPDESK)
    done = apply_update_memory(
        world,
        {"id": own.fact_id, "text": "Alice prefers chat over email"},
        shown={own.fact_id: own},
        scope=gw.GUILD,
        bot_user_id=gw.BOT,
        actor_id=gw.ALICE,
        lineage_id=HELPDESK.lineage_id,
    )
    assert not isinstance(done, Refusal)


def test_erasure_reaches_every_scope(world: MemoryServices, dynamodb: Any) -> None:
    learned_with_alice = fact(gw.BOB, "Tickets close after a week", HELPDESK, knowledge=True)
    learned_with_alice = learned_with_alice.model_copy(
        update={"evidence_user_ids": [gw.ALICE, gw.BOB]}
    )
    world.repository.put_fact(learned_with_alice)
    eraser = Eraser(
        world.repository, world.clock, world.opt_outs.hash_of, lineages=world.personas.lineages_of
    )
    # Alice's profile in the server tells erasure which servers (and personas) to visit.
    world.recorder.record([gw.message(gw.ALICE, "hello", T0, channel=GENERAL)])
    world.consolidator.consolidate(GENERAL, force=True)

    eraser.erase(gw.ALICE, ["Alice"])

    left = {
        i.get("text", {}).get("S")
        for i in scan_all(dynamodb)
        if i["sk"]["S"].startswith(keys.FACT_PREFIX)
    }
    # Her own facts and what each persona knew of her are gone, in every scope ...
    assert not any("Alice" in (text or "") for text in left)
    # ... and the knowledge learned from her; knowledge learned from others stays.
    assert "Tickets close after a week" not in left
    assert {"Password resets go through the portal", "Homework is due on Fridays"} <= left
