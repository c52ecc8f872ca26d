"""The bot answers: through IngestFunction and AnswerFunction as the template wires them, a
fake Discord REST server and a fake OpenAI-compatible chat endpoint on 127.0.0.1, and the
in-process DynamoDB.

IngestFunction starts AnswerFunction asynchronously; here the start is queued (as Lambda
queues an asynchronous invoke) and run after ingest returns.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from botmemory.answering.requests import register_local_target
from botmemory.records import Fact, ObservationKind, scope_of
from botmemory.runtime import build_services
from botmemory.settings.config import Settings
from botmemory.storage.keys import channel_pk
from localrun import gateway as gw
from tests.conftest import START_MS, TABLE
from tests.support.facts import a_fact
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_providers import Scripted, ScriptServer
from tests.support.lambda_local import LocalLambda, sample_env

ANSWER = "AnswerFunction"


def completion(text: str, tool_calls: list[dict[str, Any]] | None = None) -> Scripted:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call-{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for n, (name, arguments) in enumerate((c["name"], c["arguments"]) for c in tool_calls)
        ]
    return Scripted(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


class Bot:
    """IngestFunction and AnswerFunction, with the answers Lambda would start queued."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        discord: FakeDiscordRest,
        dynamodb: Any,
        chat: dict[str, str],
    ) -> None:
        env = sample_env()
        env[ANSWER].update(
            DISCORD_API_BASE=discord.url,
            DISCORD_BOT_TOKEN=BOT_TOKEN,
            DISCORD_BOT_USER_ID=gw.BOT,
            **chat,
        )
        env["IngestFunction"]["DISCORD_BOT_USER_ID"] = gw.BOT
        self.local = LocalLambda(monkeypatch, env)
        self.discord = discord
        self.dynamodb = dynamodb
        self.started: list[dict[str, Any]] = []
        self.reports: list[dict[str, Any]] = []
        register_local_target(ANSWER, self.started.append)

    def say(self, *events: dict[str, Any]) -> dict[str, Any]:
        """Ingest a batch, then run the answers it started."""
        result: dict[str, Any] = self.local.invoke("IngestFunction", {"events": list(events)})
        while self.started:
            self.reports.append(self.local.invoke(ANSWER, self.started.pop(0)))
        return result

    def posts(self) -> list[dict[str, Any]]:
        return [
            r.body
            for r in self.discord.requests_matching("POST", f"/channels/{gw.CHANNEL}/messages")
        ]

    def services(self) -> Any:
        settings = Settings(table_name=TABLE, memory_model="rules", bot_user_id=gw.BOT)
        return build_services(settings, dynamodb=self.dynamodb)


def mention(author: str, text: str, at_ms: int, **kwargs: Any) -> dict[str, Any]:
    event = gw.message(author, f"<@{gw.BOT}> {text}", at_ms, **kwargs)
    event["d"]["mentions"] = [gw.user(gw.BOT, bot=True)]
    return event


def reply_to_bot(author: str, text: str, at_ms: int, bot_message_id: str) -> dict[str, Any]:
    event = gw.message(author, text, at_ms, reply_to=bot_message_id)
    event["d"]["referenced_message"] = gw.message(gw.BOT, "earlier answer", at_ms - 1000)["d"]
    event["d"]["referenced_message"]["id"] = bot_message_id
    return event


def seed_fact(bot: Bot, user_id: str, text: str, guild: str = gw.GUILD) -> Fact:
    fact = a_fact(user_id, text, scope=scope_of(guild), at_ms=START_MS, expires_at=None)
    bot.services().repository.put_fact(fact)
    return fact


@pytest.fixture
def openai_bot(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
) -> Bot:
    chat = {
        "CHAT_MODEL": "openai:test-chat",
        "CHAT_MODEL_BASE_URL": chat_server.base_url,
        "CHAT_MODEL_API_KEY": "sk-test-chat",
    }
    return Bot(monkeypatch, fake_discord, dynamodb, chat)


@pytest.fixture
def rules_bot(monkeypatch: pytest.MonkeyPatch, fake_discord: FakeDiscordRest, dynamodb: Any) -> Bot:
    return Bot(monkeypatch, fake_discord, dynamodb, {"CHAT_MODEL": "rules"})


def test_a_mention_is_answered_from_memory_with_the_person_note(
    openai_bot: Bot, chat_server: ScriptServer
) -> None:
    hiking = seed_fact(openai_bot, gw.ALICE, "Alice loves hiking in the Alps")
    openai_bot.say(gw.message(gw.BOB, "morning all", START_MS + 1000))
    chat_server.script.append(completion("You told me you love hiking in the Alps!"))
    asked = mention(gw.ALICE, "what do I like doing?", START_MS + 2000)

    openai_bot.say(asked)

    (request,) = chat_server.requests
    system = request.body["messages"][0]["content"]
    assert request.body["messages"][0]["role"] == "system"
    assert "<memory>" in system and "Alice loves hiking in the Alps" in system
    assert "<speaker>" in system and '"Alice"' in system
    assert f"[fact {hiking.fact_id}]" in system  # the speaker's facts, correctable by id
    assert '"morning all"' in system  # the channel's history, quoted as data
    assert request.body["messages"][-1] == {"role": "user", "content": "what do I like doing?"}
    assert [t["function"]["name"] for t in request.body["tools"]] == ["update_memory"]
    (posted,) = openai_bot.posts()
    assert posted["content"] == "You told me you love hiking in the Alps!"
    assert posted["message_reference"]["message_id"] == asked["d"]["id"]
    assert posted["allowed_mentions"] == {"parse": [], "users": [], "replied_user": False}
    assert openai_bot.reports[-1]["status"] == "answered"


def test_the_answer_is_an_observation_once_even_when_the_relay_sees_it(
    rules_bot: Bot,
) -> None:
    rules_bot.say(gw.message(gw.ALICE, "I grow chillies on my balcony.", START_MS))
    rules_bot.say(mention(gw.ALICE, "what do I grow?", START_MS + 5000))
    assert rules_bot.reports[-1]["recorded"] == 1
    answers = [
        item
        for item in rules_bot.dynamodb.query(
            TableName=TABLE,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": channel_pk(gw.CHANNEL)}},
        )["Items"]
        if item.get("kind", {}).get("S") == ObservationKind.ANSWER
    ]
    assert len(answers) == 1
    # The gateway then delivers the bot's own message to the relay: already stored.
    (posted,) = rules_bot.discord.requests_matching("POST", f"/channels/{gw.CHANNEL}/messages")
    own = gw.message(gw.BOT, posted.body["content"], START_MS + 6000)
    own["d"]["id"] = answers[0]["message_id"]["S"]
    result = rules_bot.say(own)
    assert (result["stored"], result["duplicates"]) == (0, 1)
    assert not rules_bot.started  # the bot's own message starts no answer


def test_a_reply_to_the_bot_is_answered_and_another_bots_message_is_not(
    rules_bot: Bot,
) -> None:
    rules_bot.say(reply_to_bot(gw.ALICE, "and what about Bob?", START_MS, "1300000000000000001"))
    assert len(rules_bot.posts()) == 1
    other_bot = mention(gw.CAROL, "hello bot", START_MS + 1000)
    other_bot["d"]["author"]["bot"] = True
    rules_bot.say(other_bot)
    assert len(rules_bot.posts()) == 1


def test_a_mention_sent_twice_by_the_relay_is_answered_once(rules_bot: Bot) -> None:
    asked = mention(gw.ALICE, "hello?", START_MS)
    rules_bot.say(asked)
    rules_bot.say(asked)  # the relay resends a batch after a timeout
    assert len(rules_bot.posts()) == 1


def test_the_rate_limit_answers_politely_once_then_stays_quiet(
    rules_bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANSWER_RATE_PER_PERSON", "2")
    rules_bot.local._overrides[ANSWER]["ANSWER_RATE_PER_PERSON"] = "2"
    for n in range(5):
        rules_bot.say(mention(gw.ALICE, f"question {n}", START_MS + n * 1000))
    statuses = [r["status"] for r in rules_bot.reports]
    assert statuses == ["answered", "answered", "rate_refused", "rate_silent", "rate_silent"]
    posts = rules_bot.posts()
    assert len(posts) == 3
    assert "again in a few minutes" in posts[2]["content"]
    # Someone else in the channel is still answered.
    rules_bot.say(mention(gw.BOB, "and me?", START_MS + 9000))
    assert rules_bot.reports[-1]["status"] == "answered"


def test_a_model_failure_answers_with_an_apology(
    openai_bot: Bot, chat_server: ScriptServer
) -> None:
    chat_server.script.extend([Scripted(500, "down"), Scripted(500, "still down")])
    openai_bot.say(mention(gw.ALICE, "are you there?", START_MS))
    assert openai_bot.reports[-1]["status"] == "model_failed"
    (posted,) = openai_bot.posts()
    assert posted["content"].startswith("Sorry")


def test_a_correction_of_the_speakers_fact_is_applied_announced_and_kept_in_history(
    openai_bot: Bot, chat_server: ScriptServer
) -> None:
    city = seed_fact(openai_bot, gw.ALICE, "Alice lives in Paris")
    chat_server.script.append(
        completion(
            "Got it, Berlin it is.",
            [
                {
                    "name": "update_memory",
                    "arguments": {"id": city.fact_id, "text": "Alice lives in Berlin"},
                }
            ],
        )
    )
    chat_server.script.append(completion("Got it, Berlin it is."))  # told the result
    openai_bot.say(mention(gw.ALICE, "I moved to Berlin last month", START_MS))

    services = openai_bot.services()
    stored = services.repository.fact_by_id(city.fact_id)
    assert stored is not None and stored.text == "Alice lives in Berlin"
    (posted,) = openai_bot.posts()
    assert (
        "Alice lives in Paris" in posted["content"] and "Alice lives in Berlin" in posted["content"]
    )
    assert posted["content"].endswith("Got it, Berlin it is.")
    assert openai_bot.reports[-1]["corrections"] == 1


def test_a_tool_call_on_a_fact_not_in_the_prompt_changes_nothing(
    openai_bot: Bot, chat_server: ScriptServer
) -> None:
    bobs = seed_fact(openai_bot, gw.BOB, "Bob is a nurse")
    elsewhere = seed_fact(openai_bot, gw.ALICE, "Alice keeps bees", guild=gw.OTHER_GUILD)
    for target in (bobs, elsewhere):
        chat_server.script.append(
            completion(
                "Done.",
                [{"name": "update_memory", "arguments": {"id": target.fact_id, "text": ""}}],
            )
        )
        chat_server.script.append(completion("I could not change that."))
    openai_bot.say(mention(gw.ALICE, "forget what Bob does", START_MS))
    openai_bot.say(mention(gw.ALICE, "forget my bees", START_MS + 1000))

    services = openai_bot.services()
    assert services.repository.fact_by_id(bobs.fact_id) is not None
    assert services.repository.fact_by_id(elsewhere.fact_id) is not None
    assert [r["refused_corrections"] for r in openai_bot.reports] == [1, 1]
    assert all("forgot" not in p["content"].lower() for p in openai_bot.posts())


def test_a_channel_the_bot_cannot_post_in_is_one_log_line_and_no_retry(
    rules_bot: Bot,
) -> None:
    rules_bot.discord.forbid(gw.CHANNEL)
    rules_bot.say(mention(gw.ALICE, "hello?", START_MS))
    assert rules_bot.reports[-1]["status"] == "post_refused"
    attempts = rules_bot.discord.requests_matching("POST", f"/channels/{gw.CHANNEL}/messages")
    assert len(attempts) == 1


def test_a_huge_mention_is_bounded_and_a_control_character_question_is_ignored(
    openai_bot: Bot, chat_server: ScriptServer
) -> None:
    chat_server.script.append(completion("That is a lot of text."))
    openai_bot.say(mention(gw.ALICE, "why? " * 400_000, START_MS))  # 2 MB
    (request,) = chat_server.requests
    assert len(request.body["messages"][-1]["content"]) <= 4000
    openai_bot.say(mention(gw.ALICE, "\u0000\u0007\u001b\u202e", START_MS + 1000))
    assert len(chat_server.requests) == 1 and len(openai_bot.posts()) == 1


def test_ask_edits_its_deferred_answer(rules_bot: Bot) -> None:
    seed_fact(rules_bot, gw.ALICE, "Alice grows chillies on her balcony")
    interaction = {
        "id": "1600000000000000001",
        "application_id": gw.BOT,
        "token": "token-ask",
        "type": 2,
        "guild_id": gw.GUILD,
        "channel_id": gw.CHANNEL,
        "member": {"user": {"id": gw.ALICE, "global_name": "Alice"}, "permissions": "32"},
    }
    report = rules_bot.local.invoke(
        ANSWER, {"ask": {"interaction": interaction, "question": "what do I grow?"}}
    )

    assert report["status"] == "answered"
    edit = rules_bot.discord.wait_for(
        lambda r: r.method == "PATCH" and "token-ask" in r.path, timeout=5
    )
    assert "chillies" in edit.body["content"]
    assert edit.body["allowed_mentions"] == {"parse": []}
    assert rules_bot.posts() == []  # the answer went into the deferred reply, not a new post
