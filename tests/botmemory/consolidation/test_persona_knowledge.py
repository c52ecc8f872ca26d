"""A persona's own knowledge: who may teach it (two members, or staff alone), what it may not
hold, and its own cap."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.clock import ManualClock
from botmemory.consolidation.outcome import Status
from botmemory.records import MemoryScope
from botmemory.search.port import PassageKind
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.storage import keys
from botmemory.text import content_hash, normalized, short_id
from localrun import gateway as gw
from tests.botmemory.consolidation.test_personas import (
    DAVE,
    OTHER_BOT,
    OTHER_CHANNEL,
    T0,
    TUTOR,
    TUTOR_SCOPE,
    answer,
    fact,
    knowledge,
    persona_items,
    reasons,
    round_in,
    said,
    services_with,
    stored,
)
from tests.conftest import ScriptedModel

# A persona's own knowledge --------------------------------------------------------------------


def test_one_member_alone_cannot_teach_a_persona_even_citing_two_of_her_messages(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(answer(knowledge("Homework is due on Fridays here", [1, 2])))
    services = services_with(dynamodb, clock, model, TUTOR)
    said(services, [(gw.ALICE, "Homework is due Friday."), (gw.ALICE, "Every Friday.")])

    outcome = round_in(services)

    assert outcome.status == Status.CONSOLIDATED and outcome.facts_written == 0
    assert reasons(outcome) == {
        "Homework is due on Fridays here": (
            "persona knowledge needs evidence from at least two different people, or staff, "
            "each in a line that says it"
        )
    }
    assert persona_items(dynamodb) == []


MODS = "500000000000000001"


@pytest.mark.parametrize("who", ["owner", "a Manage Server role"])
def test_a_staff_member_alone_may_teach_a_persona(
    dynamodb: Any, clock: ManualClock, who: str
) -> None:
    model = ScriptedModel(answer(knowledge("Homework is due on Fridays here", [1, 2])))
    services = services_with(dynamodb, clock, model, TUTOR)
    # The guild as the relay forwards it: its owner, @everyone and a staff role.
    services.recorder.record(
        [
            {
                "t": "GUILD_CREATE",
                "d": {
                    "id": gw.GUILD,
                    "owner_id": gw.ALICE if who == "owner" else gw.CAROL,
                    "roles": [
                        {"id": gw.GUILD, "permissions": str(1 << 10)},
                        {"id": MODS, "permissions": str(1 << 5)},
                    ],
                    "channels": [{"id": gw.CHANNEL, "type": 0}],
                },
            }
        ]
    )
    events = [
        gw.message(gw.ALICE, text, T0 + i * 1000)
        for i, text in enumerate(["Homework is due Friday.", "Every Friday."])
    ]
    if who != "owner":
        for event in events:
            event["d"]["member"]["roles"] = [MODS]
    services.recorder.record(events)

    outcome = round_in(services)

    assert outcome.facts_written == 1 and reasons(outcome) == {}
    (taught,) = stored(services, TUTOR_SCOPE, keys.PERSONA_SUBJECT)
    assert taught.evidence_user_ids == [gw.ALICE]


def test_a_member_whose_role_is_not_staff_still_cannot_teach_alone(
    dynamodb: Any, clock: ManualClock
) -> None:
    model = ScriptedModel(answer(knowledge("Homework is due on Fridays here", [1, 2])))
    services = services_with(dynamodb, clock, model, TUTOR)
    services.recorder.record(
        [
            {
                "t": "GUILD_CREATE",
                "d": {
                    "id": gw.GUILD,
                    "owner_id": gw.CAROL,
                    "roles": [
                        {"id": gw.GUILD, "permissions": str(1 << 10)},
                        {"id": MODS, "permissions": str(1 << 10 | 1 << 11)},  # view and send
                    ],
                    "channels": [{"id": gw.CHANNEL, "type": 0}],
                },
            }
        ]
    )
    events = [
        gw.message(gw.ALICE, text, T0 + i * 1000)
        for i, text in enumerate(["Homework is due Friday.", "Every Friday."])
    ]
    for event in events:
        event["d"]["member"]["roles"] = [MODS]
    services.recorder.record(events)

    outcome = round_in(services)

    assert (
        outcome.facts_written == 0
        and "or staff" in reasons(outcome)["Homework is due on Fridays here"]
    )


@pytest.mark.parametrize("bot", [gw.BOT, OTHER_BOT], ids=["this bot", "another bot"])
def test_a_bots_words_do_not_count_as_a_second_teacher(
    dynamodb: Any, clock: ManualClock, bot: str
) -> None:
    model = ScriptedModel(answer(knowledge("Homework is due on Fridays here", [1, 2])))
    services = services_with(dynamodb, clock, model, TUTOR)
    said(
        services,
        [(gw.ALICE, "Homework is due Friday."), (bot, "Yes, every Friday.")],
        bots={OTHER_BOT},
    )

    outcome = round_in(services)

    assert reasons(outcome) == {
        "Homework is due on Fridays here": "cites #2, which holds no member's words"
    }
    assert persona_items(dynamodb) == []


def test_knowledge_two_people_taught_is_kept_under_the_persona_with_who_taught_it(
    dynamodb: Any, clock: ManualClock
) -> None:
    index = SqliteSearchIndex(":memory:")
    model = ScriptedModel(
        answer(
            knowledge("Homework is due on Fridays here", [1, 2]),
            fact(gw.ALICE, "Alice loves chess", [3]),
        )
    )
    services = services_with(dynamodb, clock, model, TUTOR, search_index=index)
    said(
        services,
        [
            (gw.ALICE, "Homework is due Friday."),
            (gw.BOB, "Yes, every Friday."),
            (gw.ALICE, "I love chess."),
        ],
    )

    outcome = round_in(services)

    assert outcome.facts_written == 2 and outcome.discarded == []
    (kept,) = stored(services, TUTOR_SCOPE, keys.PERSONA_SUBJECT)
    assert kept.memory_scope == MemoryScope.PERSONA and kept.lineage_id == "d-tutor"
    assert kept.evidence_user_ids == [gw.ALICE, gw.BOB] and len(kept.provenance) == 2
    assert kept.fact_id == short_id(
        content_hash(TUTOR_SCOPE, keys.PERSONA_SUBJECT, normalized(kept.text))
    )
    # Nothing of it in a member's partition; only the person's own fact is searchable.
    assert persona_items(dynamodb) and all(
        i["pk"]["S"] != keys.user_pk(TUTOR_SCOPE, gw.ALICE) for i in persona_items(dynamodb)
    )
    searchable = [p for p in index.passages() if p.kind == PassageKind.FACT]
    assert [p.text for p in searchable] == ["Alice: Alice loves chess"]
    index.close()


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (f"Ask <@{gw.CAROL}> about recursion", "mentions someone"),
        ("Everyone pings @everyone for recursion help", "mentions someone"),
        (f"Recursion questions go to {gw.CAROL} first", "names a member: holds an id"),
        ("Carol answers the recursion questions", "names a member of this server"),
        ("Alice explains recursion best", "names a member of this server"),
        ("Robin explains recursion with drawings", "names someone who spoke in this batch"),
    ],
)
def test_knowledge_naming_a_member_is_refused(
    dynamodb: Any, clock: ManualClock, text: str, reason: str
) -> None:
    model = ScriptedModel(answer(), answer(knowledge(text, [1, 2])))
    services = services_with(dynamodb, clock, model, TUTOR)
    # Carol is known to the server's name registry from another channel.
    said(services, [(gw.CAROL, "Hi all.")], channel=OTHER_CHANNEL)
    round_in(services, OTHER_CHANNEL)
    # Two members go by "Robin": the name is no one's alone, yet it is a member's.
    said(
        services,
        [(gw.BOB, "Recursion is hard."), (DAVE, "Recursion, again."), (gw.ALICE, "Indeed.")],
        names={gw.BOB: "Robin", DAVE: "Robin"},
        at_ms=T0 + 60_000,
    )

    outcome = round_in(services)

    assert outcome.status == Status.CONSOLIDATED
    assert reason in reasons(outcome)[text]
    assert persona_items(dynamodb) == []


def test_the_persona_knowledge_cap_is_its_own(dynamodb: Any, clock: ManualClock) -> None:
    proposed = [fact(gw.ALICE, f"Alice plays sport {i}", [1]) for i in range(4)]
    proposed += [
        fact(gw.ALICE, f"Alice needs help with topic {i}", [1], MemoryScope.PERSONA_USER)
        for i in range(4)
    ]
    proposed += [knowledge(f"People here ask about topic {i}", [1, 2]) for i in range(4)]
    services = services_with(
        dynamodb, clock, ScriptedModel(answer(*proposed)), TUTOR, new_facts_per_person=3
    )
    said(services, [(gw.ALICE, "Lots to say about topics."), (gw.BOB, "Topics, me too.")])

    outcome = round_in(services)

    assert len(stored(services, gw.GUILD, gw.ALICE)) == 3
    assert len(stored(services, TUTOR_SCOPE, gw.ALICE)) == 3
    assert len(stored(services, TUTOR_SCOPE, keys.PERSONA_SUBJECT)) == 3
    # One of each scope beyond its cap waits for the next round (botmemory.consolidation.candidates).
    assert reasons(outcome) == {}
    waiting = services.repository.candidates(gw.CHANNEL)
    assert sorted(c.fact.memory_scope.value for c in waiting) == [
        "persona",
        "persona_user",
        "user",
    ]
