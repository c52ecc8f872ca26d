"""Persona knowledge needs real support (issue 23, item 6).

Two people "teach" a persona something only when each of their cited lines says it: a model
citing someone's unrelated "good morning" adds no teacher, and a staff member alone teaches
only with a line that says it. A member's account name and global name name them as much as
their server nickname: knowledge naming a member by either is refused, and the name registry
learns all three.

The production path: IngestFunction records the guild and the messages, ConsolidateFunction
runs the round from the table's stream, with an OpenAI-compatible memory model on 127.0.0.1
that writes the knowledge, citing every line it was shown.
"""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.people.erasure import Eraser
from botmemory.records import Persona
from botmemory.storage import keys
from localrun import gateway as gw
from tests.botmemory.consolidation.test_candidates import (
    T0,
    Deployment,
    FactWriterServer,
    Shown,
    memory_model_fixture,  # noqa: F401 (the fixture)
    proposed,
)

OTHER_CHANNEL = "200000000000000002"
DAVE = "300000000000000004"
MODS = "500000000000000001"
TUTOR = Persona(
    persona_id="tutor",
    lineage_id="s-tutor",
    name="Tutor",
    prompt="You are a patient tutor.\n{memory}",
    guild_id=gw.GUILD,
    channels=[gw.CHANNEL],
)
TUTOR_SCOPE = keys.persona_scope(gw.GUILD, TUTOR.lineage_id)
KNOWLEDGE = "Homework is due on Fridays here"


def teaches(text: str) -> Any:
    """A model that proposes `text` as the persona's knowledge, citing every line shown."""

    def write(shown: list[Shown]) -> list[dict[str, Any]]:
        numbers = [line.number for line in shown]
        return [proposed(keys.PERSONA_SUBJECT, text, numbers, scope="persona", kind="fact")]

    return write


def tutor_bot(
    monkeypatch: pytest.MonkeyPatch, dynamodb: Any, model: FactWriterServer
) -> Deployment:
    bot = Deployment(monkeypatch, dynamodb, model, MEMORY_CONSOLIDATE_EVERY="1")
    bot.services.repository.put_persona(TUTOR, replaces_ms=None)
    return bot


def line(
    author: str,
    text: str,
    at_ms: int,
    *,
    channel: str = gw.CHANNEL,
    username: str | None = None,
    global_name: str | None = None,
    nick: str | None = None,
    roles: list[str] | None = None,
) -> dict[str, Any]:
    event = gw.message(author, text, at_ms, channel=channel)
    if username is not None:
        event["d"]["author"]["username"] = username
    if global_name is not None:
        event["d"]["author"]["global_name"] = global_name
    event["d"]["member"]["nick"] = nick
    event["d"]["member"]["roles"] = roles or []
    return event


def knowledge_of(bot: Deployment) -> list[Any]:
    return bot.services.repository.all_facts(TUTOR_SCOPE, keys.PERSONA_SUBJECT)


def guild(owner: str) -> dict[str, Any]:
    """The guild as the relay forwards it: its owner, @everyone and a Manage Server role."""
    return {
        "t": "GUILD_CREATE",
        "d": {
            "id": gw.GUILD,
            "owner_id": owner,
            "roles": [
                {"id": gw.GUILD, "permissions": str(1 << 10)},
                {"id": MODS, "permissions": str(1 << 5)},
            ],
            "channels": [{"id": gw.CHANNEL, "type": 0}],
        },
    }


# Two teachers, each in a line that says it ------------------------------------------------


def test_two_people_who_both_say_it_teach_the_persona(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    memory_model.writer = teaches(KNOWLEDGE)
    bot = tutor_bot(monkeypatch, dynamodb, memory_model)
    bot.ingest(
        [
            line(gw.ALICE, "Homework is due Friday.", T0),
            line(gw.BOB, "Yes, every Friday.", T0 + 1000),
        ]
    )

    assert bot.consolidate() == {"batchItemFailures": []}

    (taught,) = knowledge_of(bot)
    assert taught.text == KNOWLEDGE and taught.evidence_user_ids == [gw.ALICE, gw.BOB]


def test_an_unrelated_good_morning_adds_no_teacher(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    memory_model.writer = teaches(KNOWLEDGE)
    bot = tutor_bot(monkeypatch, dynamodb, memory_model)
    bot.ingest(
        [
            line(gw.ALICE, "Homework is due Friday.", T0),
            line(gw.BOB, "good morning", T0 + 1000),
        ]
    )

    bot.consolidate()

    assert len(memory_model.batches) == 1 and knowledge_of(bot) == []


def test_a_supporting_line_teaches_and_the_unrelated_one_is_no_part_of_its_evidence(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    memory_model.writer = teaches(KNOWLEDGE)
    bot = tutor_bot(monkeypatch, dynamodb, memory_model)
    bot.ingest(
        [
            line(gw.ALICE, "Homework is due Friday.", T0),
            line(gw.CAROL, "good morning", T0 + 1000),
            line(gw.BOB, "Every Friday, the homework.", T0 + 2000),
        ]
    )

    bot.consolidate()

    (taught,) = knowledge_of(bot)
    assert taught.evidence_user_ids == [gw.ALICE, gw.BOB] and len(taught.provenance) == 2


@pytest.mark.parametrize(
    ("said", "kept"),
    [("Homework is due Friday.", True), ("good morning", False)],
    ids=["a line that says it", "an unrelated line"],
)
def test_a_staff_member_alone_teaches_only_with_a_line_that_says_it(
    dynamodb: Any,
    monkeypatch: pytest.MonkeyPatch,
    memory_model: FactWriterServer,
    said: str,
    kept: bool,
) -> None:
    memory_model.writer = teaches(KNOWLEDGE)
    bot = tutor_bot(monkeypatch, dynamodb, memory_model)
    bot.ingest([guild(owner=gw.ALICE), line(gw.ALICE, said, T0)])

    bot.consolidate()

    assert len(memory_model.batches) == 1
    assert [f.evidence_user_ids for f in knowledge_of(bot)] == ([[gw.ALICE]] if kept else [])


# Every name of a member is a name ---------------------------------------------------------


def test_knowledge_naming_a_speaker_by_global_name_is_refused(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    """Bob goes by the nickname "Robin" here (as Dave does); his global name is his alone."""
    memory_model.writer = teaches("Bobby Tables explains recursion with drawings")
    bot = tutor_bot(monkeypatch, dynamodb, memory_model)
    bot.ingest(
        [
            line(gw.BOB, "Recursion with drawings!", T0, global_name="Bobby Tables", nick="Robin"),
            line(DAVE, "Drawings help recursion.", T0 + 1000, nick="Robin"),
        ]
    )

    bot.consolidate()

    assert len(memory_model.batches) == 1 and knowledge_of(bot) == []


def test_knowledge_naming_a_member_by_account_name_is_refused_from_the_registry(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    """Carol spoke only in another channel, shown as "CC": the registry knows her account
    name too, so knowledge naming her by it is refused in this one."""
    memory_model.writer = lambda shown: []
    bot = tutor_bot(monkeypatch, dynamodb, memory_model)
    bot.ingest(
        [line(gw.CAROL, "Hi all.", T0, channel=OTHER_CHANNEL, username="carolina_k", nick="CC")]
    )
    bot.consolidate()
    registry = bot.services.repository.name_registry(gw.GUILD, 10)
    assert registry["carolina_k"] == [gw.CAROL] and registry["carol"] == [gw.CAROL]

    memory_model.writer = teaches("carolina_k answers the recursion questions")
    bot.ingest(
        [
            line(gw.ALICE, "Recursion questions?", T0 + 60_000),
            line(gw.BOB, "Recursion questions, yes.", T0 + 61_000),
        ]
    )
    bot.consolidate()

    assert len(memory_model.batches) == 2 and knowledge_of(bot) == []


def test_erasure_takes_every_name_of_the_person_out_of_the_registry(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch, memory_model: FactWriterServer
) -> None:
    memory_model.writer = lambda shown: []
    bot = tutor_bot(monkeypatch, dynamodb, memory_model)
    bot.ingest(
        [
            line(gw.CAROL, "Hi all.", T0, username="carolina_k", global_name="Carolina", nick="CC"),
            line(gw.BOB, "Hi.", T0 + 1000),
        ]
    )
    bot.consolidate()
    assert {"carolina_k", "carolina"} <= set(bot.services.repository.name_registry(gw.GUILD, 10))

    Eraser(bot.services.repository).erase(gw.CAROL)

    registry = bot.services.repository.name_registry(gw.GUILD, 10)
    assert all(gw.CAROL not in users for users in registry.values())
    assert "carolina_k" not in registry and "carolina" not in registry
