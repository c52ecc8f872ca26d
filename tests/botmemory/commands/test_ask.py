"""/ask through InteractionsFunction's handler, and the bad input every command refuses."""

from __future__ import annotations

from typing import Any

import pytest

from botmemory.clock import SystemClock
from botmemory.commands.router import Commands
from botmemory.discord.interactions import (
    InteractionResponseType,
    MessageFlag,
)
from botmemory.runtime import build_services
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from scripts.make_events import ALICE, BOB, CHANNEL, GUILD, command
from tests.botmemory.commands.test_commands import STAFF, Discord, _ids, facts_of
from tests.botmemory.commands.test_commands import discord as discord
from tests.conftest import TABLE

# /ask ----------------------------------------------------------------------------------


def with_asker(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Answering configured: every Commands the handler builds hands questions to a list."""
    asked: list[dict[str, Any]] = []
    original = Commands.__init__

    def init(self: Commands, services: MemoryServices, defer: Any, ask: Any = None) -> None:
        original(self, services, defer, asked.append)

    monkeypatch.setattr(Commands, "__init__", init)
    return asked


def ask_interaction(question: Any, *, guild: str | None = GUILD) -> dict[str, Any]:
    interaction = command(str(next(_ids)), "ask", "", {"question": question})
    interaction["token"] = f"token-{interaction['id']}"
    if guild is None:
        interaction.pop("guild_id")
        interaction["user"] = interaction.pop("member")["user"]
    return interaction


def test_ask_defers_in_public_and_hands_over_the_question(
    discord: Discord, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = with_asker(monkeypatch)
    interaction = ask_interaction("What did Alice say \u202eabout hiking?")

    answer = discord.send(interaction)

    # "thinking…" for the whole channel: no ephemeral flag, the answer is for everyone.
    assert answer == {"type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE}
    (job,) = asked
    assert job["ask"]["question"] == "What did Alice say about hiking?"
    handed = job["ask"]["interaction"]
    assert (handed["id"], handed["token"]) == (interaction["id"], interaction["token"])
    assert (handed["guild_id"], handed["channel_id"]) == (GUILD, CHANNEL)
    assert handed["member"]["user"]["id"] == ALICE
    assert handed["data"]["name"] == "ask"


def test_a_replayed_ask_asks_once(discord: Discord, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = with_asker(monkeypatch)
    interaction = ask_interaction("What is on the agenda?")

    first = discord.send(interaction)
    again = discord.send(interaction)  # Discord retried, or someone replayed it

    assert first == again
    assert len(asked) == 1


def test_ask_works_in_direct_messages(discord: Discord, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = with_asker(monkeypatch)

    discord.send(ask_interaction("Hello?", guild=None))

    assert asked[0]["ask"]["interaction"]["guild_id"] is None


@pytest.mark.parametrize(
    ("question", "answer"),
    [("   ", "Please give `question`"), ("\u200b\u202e", "empty"), ("x" * 2001, "2000")],
)
def test_a_bad_question_gets_a_clear_answer_and_asks_nothing(
    discord: Discord, monkeypatch: pytest.MonkeyPatch, question: str, answer: str
) -> None:
    asked = with_asker(monkeypatch)

    reply = discord.send(ask_interaction(question))

    assert reply["data"]["flags"] == MessageFlag.EPHEMERAL and answer in reply["data"]["content"]
    assert asked == []


def test_ask_without_answering_configured_says_so(discord: Discord) -> None:
    commands = Commands(discord.services(), defer=lambda job: None)  # no `ask`

    reply = commands.handle(ask_interaction("What is on the agenda?"))

    assert reply["data"]["flags"] == MessageFlag.EPHEMERAL
    assert reply["data"]["allowed_mentions"] == {"parse": []}
    assert "Answering is not set up" in reply["data"]["content"]


def test_ask_needs_no_memory_and_changes_nothing_it_should_not(discord: Discord) -> None:
    asked: list[dict[str, Any]] = []
    services = build_services(
        Settings(table_name=TABLE), dynamodb=discord.dynamodb, clock=SystemClock()
    )  # memory off
    commands = Commands(services, defer=lambda job: None, ask=asked.append)
    interaction = ask_interaction("Anyone around?")

    assert not commands.changes_nothing(interaction)  # behind replay protection
    reply = commands.handle(interaction)

    assert reply == {"type": InteractionResponseType.DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE}
    assert len(asked) == 1


# Bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sub", "options", "answer"),
    [
        ("dance", {}, "don't know the command `/memory dance`"),
        ("remember", {}, "Please give `text`"),
        ("remember", {"text": 42}, "Please give `text`"),
        ("forget", {"what": "   "}, "Please give `what`"),
    ],
)
def test_bad_options_get_a_clear_answer_and_change_nothing(
    discord: Discord, sub: str, options: dict[str, Any], answer: str
) -> None:
    assert answer in discord.text("memory", sub, options)
    assert discord.services().repository.all_facts(GUILD, ALICE) == []


def test_staff_commands_are_refused_in_direct_messages(discord: Discord) -> None:
    answer = discord.text("memory-staff", "user", {"member": BOB}, permissions=STAFF, guild=None)

    assert "Manage Server" in answer


def test_memory_commands_work_in_direct_messages_with_the_dm_scope(discord: Discord) -> None:
    discord.text("memory", "remember", {"text": "I like quiet mornings"}, guild=None)

    assert facts_of(discord.services(), ALICE, "dm") == ["I like quiet mornings"]
    assert discord.services().repository.all_facts(GUILD, ALICE) == []
