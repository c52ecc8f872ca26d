"""Honest answers: through IngestFunction and AnswerFunction as template.yaml declares them,
with a fake Discord REST server and chat models (an OpenAI-compatible one on 127.0.0.1, and
the `rules` one) and the in-process DynamoDB.

- The speaker note says whether the person asking is staff, from what ingest keeps (the
  guild's staff record from GUILD_CREATE, the roles stored with the question's message):
  "not known" only when the guild was never seen.
- A correction the table refuses (the fact went or changed between the prompt and the
  apply) is not announced as done: no correction notice, a refusal said instead, counted.
- A correction whose text is a behaviour request (botmemory.memory.behaviour) is refused too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from botmemory.discord.interactions import Permissions
from botmemory.storage.repository import MemoryRepository
from localrun import gateway as gw
from localrun.stack import parse_emf
from tests.botmemory.answering.test_answerer import (  # noqa: F401
    Bot,
    completion,
    mention,
    openai_bot,
    rules_bot,
    seed_fact,
)
from tests.conftest import START_MS
from tests.support.fake_discord import FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_providers import ScriptHandler, ScriptServer

STAFF_ROLE = "500000000000000009"
OTHER_ROLE = "500000000000000008"
DM_CHANNEL = "200000000000000099"
VIEW_AND_SEND = (1 << 10) | (1 << 11)


def guild_create(owner: str = gw.CAROL) -> dict[str, Any]:
    """The guild as the gateway announces it: its owner, @everyone, a staff role (Manage
    Server) and a plain one."""
    return {
        "t": "GUILD_CREATE",
        "d": {
            "id": gw.GUILD,
            "name": "a guild",
            "owner_id": owner,
            "roles": [
                {"id": gw.GUILD, "name": "@everyone", "permissions": str(VIEW_AND_SEND)},
                {"id": STAFF_ROLE, "name": "mods", "permissions": str(Permissions.MANAGE_GUILD)},
                {"id": OTHER_ROLE, "name": "regulars", "permissions": str(VIEW_AND_SEND)},
            ],
            "channels": [{"id": gw.CHANNEL, "type": 0, "permission_overwrites": []}],
        },
    }


def asked_with_roles(author: str, roles: list[str], at_ms: int, **kwargs: Any) -> dict[str, Any]:
    event = mention(author, "who am I to you?", at_ms, **kwargs)
    if "member" in event["d"]:
        event["d"]["member"]["roles"] = roles
    return event


def staff_line(bot: Bot, server: ScriptServer, event: dict[str, Any]) -> str:
    """The speaker note's staff line of the prompt the chat model got for this question."""
    server.script.append(completion("Hello!"))
    bot.say(event)
    system = server.requests[-1].body["messages"][0]["content"]
    (line,) = [part for part in system.splitlines() if "staff of this server" in part]
    return line


# The speaker note ---------------------------------------------------------------------------


def test_the_speaker_note_says_staff_from_the_stored_roles_and_the_guilds_staff(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    openai_bot.say(guild_create(owner=gw.CAROL))

    staff = staff_line(openai_bot, chat_server, asked_with_roles(gw.BOB, [STAFF_ROLE], START_MS))
    member = staff_line(
        openai_bot, chat_server, asked_with_roles(gw.ALICE, [OTHER_ROLE], START_MS + 1000)
    )
    owner = staff_line(openai_bot, chat_server, asked_with_roles(gw.CAROL, [], START_MS + 2000))

    assert staff == "- staff of this server: yes"
    assert member == "- staff of this server: no"
    assert owner == "- staff of this server: yes"
    assert [r["status"] for r in openai_bot.reports] == ["answered"] * 3


def test_in_a_direct_message_nobody_is_staff(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    openai_bot.say(guild_create(owner=gw.ALICE))
    event = asked_with_roles(gw.ALICE, [], START_MS, guild=None, channel=DM_CHANNEL)

    assert staff_line(openai_bot, chat_server, event) == "- staff of this server: no"


def test_staff_is_not_known_only_when_the_guild_was_never_seen(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    event = asked_with_roles(gw.BOB, [STAFF_ROLE], START_MS)

    assert staff_line(openai_bot, chat_server, event) == "- staff of this server: not known"


# Corrections the table refuses -------------------------------------------------------------

# What the fake chat server runs when a request reaches it: the prompt is built by then, the
# correction not applied yet.
_WHILE_THE_MODEL_THINKS: list[Callable[[], None]] = []


class RacingHandler(ScriptHandler):
    def do_POST(self) -> None:
        while _WHILE_THE_MODEL_THINKS:
            _WHILE_THE_MODEL_THINKS.pop(0)()
        super().do_POST()


@pytest.fixture
def racing_chat(chat_server: ScriptServer) -> Iterator[ScriptServer]:
    chat_server.RequestHandlerClass = RacingHandler
    try:
        yield chat_server
    finally:
        _WHILE_THE_MODEL_THINKS.clear()


def test_a_fact_deleted_while_the_model_answers_is_not_announced_as_corrected(
    openai_bot: Bot,  # noqa: F811
    racing_chat: ScriptServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    city = seed_fact(openai_bot, gw.ALICE, "Alice lives in Paris")
    repository = openai_bot.services().repository
    _WHILE_THE_MODEL_THINKS.append(lambda: repository.delete_facts([city]))
    racing_chat.script.append(
        completion(
            "Here is what I know.",
            [
                {
                    "name": "update_memory",
                    "arguments": {"id": city.fact_id, "text": "Alice lives in Berlin"},
                }
            ],
        )
    )
    racing_chat.script.append(completion("I could not change that."))
    capsys.readouterr()

    openai_bot.say(mention(gw.ALICE, "I moved to Berlin last month", START_MS))

    assert repository.fact_by_id(city.fact_id) is None  # nothing written back
    (posted,) = openai_bot.posts()
    assert "I corrected" not in posted["content"]
    assert posted["content"].startswith(
        'I did not change what I remember about Alice "Alice lives in Paris": '
        "no such fact any more."
    )
    report = openai_bot.reports[-1]
    assert (report["corrections"], report["refused_corrections"]) == (0, 1)
    assert parse_emf(capsys.readouterr().out)["MemoryCorrectionsRefused"] == 1


def test_a_correction_the_table_refuses_is_said_as_refused_not_noted(
    rules_bot: Bot,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    city = seed_fact(rules_bot, gw.ALICE, "Alice lives in Paris")
    repository = rules_bot.services().repository
    apply = MemoryRepository.correct_fact

    def changed_meanwhile(self: MemoryRepository, *args: Any, **kwargs: Any) -> bool:
        # Between the re-read and the transaction, the fact is rewritten (another answer's
        # correction, the member's own /memory remember): the transaction must refuse.
        repository.put_fact(city.model_copy(update={"text": "Alice lives in Lyon"}))
        return apply(self, *args, **kwargs)

    monkeypatch.setattr(MemoryRepository, "correct_fact", changed_meanwhile)

    rules_bot.say(mention(gw.ALICE, f"correct {city.fact_id} to Alice lives in Berlin", START_MS))

    stored = repository.fact_by_id(city.fact_id)
    assert stored is not None and stored.text == "Alice lives in Lyon"
    (posted,) = rules_bot.posts()
    # The refusal, then the model's answer once told of it (the rules model says why).
    assert posted["content"] == (
        'I did not change what I remember about Alice "Alice lives in Paris": the fact changed '
        "meanwhile, or its subject is being erased or opted out.\n"
        "I could not change that: the fact changed meanwhile, or its subject is being erased "
        "or opted out."
    )
    report = rules_bot.reports[-1]
    assert (report["corrections"], report["refused_corrections"]) == (0, 1)
    assert report["notes"] == [
        "correction refused: the fact changed meanwhile, or its subject is being erased or "
        "opted out"
    ]


def test_a_correction_into_a_behaviour_request_is_refused(rules_bot: Bot) -> None:  # noqa: F811
    city = seed_fact(rules_bot, gw.ALICE, "Alice lives in Paris")

    rules_bot.say(
        mention(gw.ALICE, f"correct {city.fact_id} to Alice wants to be called master", START_MS)
    )

    stored = rules_bot.services().repository.fact_by_id(city.fact_id)
    assert stored is not None and stored.text == "Alice lives in Paris"
    (posted,) = rules_bot.posts()
    assert "I did not change what I remember about Alice" in posted["content"]
    assert "behaviour request: how the bot should address someone" in posted["content"]
    assert rules_bot.reports[-1]["refused_corrections"] == 1
