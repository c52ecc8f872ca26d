"""Answer after acting (botmemory.answering.follow_up): a reply that calls `update_memory`
gets the results back, applied or refused and why, and the model answers in the same turn,
with at most one more call. Through IngestFunction and AnswerFunction as template.yaml
declares them, a fake Discord REST server and a fake OpenAI-compatible chat endpoint on
127.0.0.1 (or the offline `rules` model), and the in-process DynamoDB.

The member always gets words: a second reply that calls the tool again (not applied), says
nothing, fails, or cannot fit in the invocation's time left still ends in an answer.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
from botocore.stub import ANY, Stubber

from botmemory.answering.answerer import MAX_CORRECTIONS, TOO_MANY, Answerer
from botmemory.answering.chat.bedrock import BedrockChatModel
from botmemory.answering.chat.contract import ChatReply, ChatRequest, ToolCall
from botmemory.answering.follow_up import AFTER_ACTING
from botmemory.answering.prompt import DEFAULT_SYSTEM_PROMPT
from botmemory.answering.question import Question
from botmemory.answering.rate import AnswerRateLimiter
from botmemory.records import scope_of
from botmemory.services import MemoryServices
from localrun import gateway as gw
from tests.botmemory.answering.test_answerer import (  # noqa: F401
    ANSWER,
    Bot,
    completion,
    mention,
    openai_bot,
    rules_bot,
    seed_fact,
)
from tests.conftest import START_MS
from tests.support.facts import a_fact
from tests.support.fake_discord import fake_discord_fixture  # noqa: F401
from tests.support.fake_providers import Scripted, ScriptServer


def update(fact_id: str, text: str) -> dict[str, Any]:
    return {"name": "update_memory", "arguments": {"id": fact_id, "text": text}}


def tool_messages(body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The assistant's tool-call message of a second request and the tool messages after it."""
    messages = body["messages"]
    (at,) = [i for i, m in enumerate(messages) if m.get("tool_calls")]
    return messages[at], messages[at + 1 :]


def result(message: dict[str, Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(message["content"])
    return parsed


# Answered after acting ------------------------------------------------------------------------


def test_a_tool_only_reply_ends_in_an_answer_written_with_the_result(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    city = seed_fact(openai_bot, gw.ALICE, "Alice lives in Paris")
    chat_server.script.extend(
        [
            completion("", [update(city.fact_id, "Alice lives in Berlin")]),
            completion("Berlin it is! How is the new flat?"),
        ]
    )

    openai_bot.say(mention(gw.ALICE, "I moved to Berlin last month", START_MS))

    first, second = (r.body for r in chat_server.requests)
    # The same conversation, grown by the call and its result.
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["tools"] == first["tools"]
    assistant, tools = tool_messages(second)
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "type": "function",
                "id": "call-0",
                "function": {
                    "name": "update_memory",
                    "arguments": json.dumps({"id": city.fact_id, "text": "Alice lives in Berlin"}),
                },
            }
        ],
    }
    (tool,) = tools
    assert (tool["role"], tool["tool_call_id"]) == ("tool", "call-0")
    assert result(tool) == {
        "status": "applied",
        "id": city.fact_id,
        "text": "Alice lives in Berlin",
    }
    (posted,) = openai_bot.posts()
    notice, answer = posted["content"].split("\n")
    assert notice.startswith("I corrected what I remember about Alice")
    assert answer == "Berlin it is! How is the new flat?"
    report = openai_bot.reports[-1]
    assert (report["status"], report["model_calls"], report["follow_up"]) == (
        "answered",
        2,
        "answered",
    )
    stored = openai_bot.services().repository.fact_by_id(city.fact_id)
    assert stored is not None and stored.text == "Alice lives in Berlin"


def test_a_refused_call_is_handed_back_with_why(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    bobs = seed_fact(openai_bot, gw.BOB, "Bob is a nurse")  # not the speaker's: never shown
    chat_server.script.extend(
        [
            completion("Let me fix that.", [update(bobs.fact_id, "")]),
            completion("I can only change what you told me about yourself."),
        ]
    )

    openai_bot.say(mention(gw.ALICE, "forget what Bob does", START_MS))

    assistant, (tool,) = tool_messages(chat_server.requests[1].body)
    assert assistant["content"] == "Let me fix that."  # its own words travel back too
    assert result(tool) == {
        "status": "refused",
        "id": bobs.fact_id,
        "reason": "not a fact shown in this conversation",
    }
    (posted,) = openai_bot.posts()
    assert posted["content"].startswith("I did not change what I remember about Alice")
    assert posted["content"].endswith("\nI can only change what you told me about yourself.")
    assert openai_bot.services().repository.fact_by_id(bobs.fact_id) is not None


def test_calls_past_the_limit_are_answered_as_refused_in_call_order(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    facts = [seed_fact(openai_bot, gw.ALICE, f"Alice owns {n} cats") for n in range(1, 6)]
    chat_server.script.extend(
        [
            completion("", [update(f.fact_id, "") for f in facts]),
            completion("I forgot three of them; tell me again for the rest."),
        ]
    )

    openai_bot.say(mention(gw.ALICE, "forget all my cats", START_MS))

    assistant, tools = tool_messages(chat_server.requests[1].body)
    assert [t["tool_call_id"] for t in tools] == [c["id"] for c in assistant["tool_calls"]]
    statuses = [result(t)["status"] for t in tools]
    assert statuses == ["applied"] * MAX_CORRECTIONS + ["refused"] * 2
    assert result(tools[-1]) == {"status": "refused", "id": facts[-1].fact_id, "reason": TOO_MANY}
    report = openai_bot.reports[-1]
    assert (report["corrections"], report["refused_corrections"]) == (3, 2)


def test_the_rules_model_answers_after_forgetting(rules_bot: Bot) -> None:  # noqa: F811
    city = seed_fact(rules_bot, gw.ALICE, "Alice lives in Paris")

    rules_bot.say(mention(gw.ALICE, f"forget {city.fact_id}", START_MS))

    (posted,) = rules_bot.posts()
    assert posted["content"] == (
        'I forgot what I remembered about Alice: "Alice lives in Paris"\n'
        "Done: I no longer remember that."
    )
    assert rules_bot.reports[-1]["model_calls"] == 2


# Bad input: the member still gets words -------------------------------------------------------


def test_a_tool_call_in_the_second_reply_is_not_applied_and_the_answer_goes_out(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    city = seed_fact(openai_bot, gw.ALICE, "Alice lives in Paris")
    dog = seed_fact(openai_bot, gw.ALICE, "Alice has a dog")
    chat_server.script.extend(
        [
            completion("", [update(city.fact_id, "Alice lives in Berlin")]),
            # Acting again on the result: deleting the dog, rewriting the city once more.
            completion(
                "Updated, and I tidied up.",
                [update(dog.fact_id, ""), update(city.fact_id, "Alice lives in Rome")],
            ),
        ]
    )

    openai_bot.say(mention(gw.ALICE, "I moved to Berlin", START_MS))

    repository = openai_bot.services().repository
    assert repository.fact_by_id(dog.fact_id) is not None
    stored = repository.fact_by_id(city.fact_id)
    assert stored is not None and stored.text == "Alice lives in Berlin"
    assert len(chat_server.requests) == 2  # no third call
    (posted,) = openai_bot.posts()
    assert posted["content"].endswith("\nUpdated, and I tidied up.")
    assert "Rome" not in posted["content"] and "dog" not in posted["content"]
    report = openai_bot.reports[-1]
    assert (report["corrections"], report["ignored_tool_calls"]) == (1, 2)


def test_a_second_reply_that_ignores_the_result_with_no_text_still_ends_in_words(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    city = seed_fact(openai_bot, gw.ALICE, "Alice lives in Paris")
    chat_server.script.extend(
        [
            completion("", [update(city.fact_id, "Alice lives in Berlin")]),
            completion("", [update(city.fact_id, "Alice lives in Berlin")]),  # the same again
        ]
    )

    openai_bot.say(mention(gw.ALICE, "I moved to Berlin", START_MS))

    (posted,) = openai_bot.posts()
    notice, words = posted["content"].split("\n")
    assert notice.startswith("I corrected what I remember about Alice")
    assert words == AFTER_ACTING
    report = openai_bot.reports[-1]
    assert (report["follow_up"], report["ignored_tool_calls"], report["corrections"]) == (
        "empty",
        1,
        1,
    )


def test_a_failed_second_call_keeps_the_first_words_or_says_a_sentence(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    city = seed_fact(openai_bot, gw.ALICE, "Alice lives in Paris")
    dog = seed_fact(openai_bot, gw.ALICE, "Alice has a dog")
    chat_server.script.extend(
        [
            completion("Noted, Berlin.", [update(city.fact_id, "Alice lives in Berlin")]),
            Scripted(500, "down"),
            Scripted(500, "still down"),
            completion("", [update(dog.fact_id, "")]),
            Scripted(200, {"choices": []}),  # malformed: not retried
        ]
    )

    openai_bot.say(mention(gw.ALICE, "I moved to Berlin", START_MS))
    openai_bot.say(mention(gw.ALICE, "the dog went to my sister", START_MS + 1000))

    with_words, without = (p["content"] for p in openai_bot.posts())
    assert with_words.endswith("\nNoted, Berlin.")  # the model's own words, from before
    assert without.startswith("I forgot what I remembered about Alice")
    assert without.endswith("\n" + AFTER_ACTING)
    assert [(r["status"], r["follow_up"], r["model_calls"]) for r in openai_bot.reports] == [
        ("answered", "failed", 2),
        ("answered", "failed", 2),
    ]
    assert openai_bot.services().repository.fact_by_id(dog.fact_id) is None  # applied once


def test_no_second_call_when_the_invocation_cannot_fit_it(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    # The invocation has AnswerFunction's Timeout left (90 s: tests/support/lambda_local.py
    # reports the template's); an 89 s attempt and the posts do not fit in it.
    openai_bot.local._overrides[ANSWER]["CHAT_MODEL_TIMEOUT_SECONDS"] = "89"
    city = seed_fact(openai_bot, gw.ALICE, "Alice lives in Paris")
    chat_server.script.append(completion("", [update(city.fact_id, "Alice lives in Berlin")]))

    openai_bot.say(mention(gw.ALICE, "I moved to Berlin", START_MS))

    assert len(chat_server.requests) == 1
    (posted,) = openai_bot.posts()
    assert posted["content"].endswith("\n" + AFTER_ACTING)
    report = openai_bot.reports[-1]
    assert (report["follow_up"], report["model_calls"], report["corrections"]) == (
        "no_time",
        1,
        1,
    )


def test_a_reply_without_update_memory_is_one_call(
    openai_bot: Bot,  # noqa: F811
    chat_server: ScriptServer,
) -> None:
    chat_server.script.append(
        completion("Hello!", [{"name": "search_web", "arguments": {"q": "x"}}])
    )

    openai_bot.say(mention(gw.ALICE, "hi", START_MS))

    assert len(chat_server.requests) == 1
    assert openai_bot.posts()[0]["content"] == "Hello!"
    assert (openai_bot.reports[-1]["model_calls"], openai_bot.reports[-1]["follow_up"]) == (
        1,
        "none",
    )


# Bedrock: the same turn through Converse (botocore's Stubber checks each request against the
# service model) -------------------------------------------------------------------------------


class RecordingPoster:
    def __init__(self) -> None:
        self.posted: list[str] = []

    def trigger_typing(self, channel_id: str) -> None:
        pass

    def create_message(self, channel_id: str, content: str, **_: Any) -> dict[str, Any]:
        self.posted.append(content)
        return {"id": gw.snowflake(START_MS + 10_000 + len(self.posted)), "content": content}

    def edit_original_response(
        self, application_id: str, token: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        return None


def converse_reply(content: list[dict[str, Any]], stop_reason: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
        "metrics": {"latencyMs": 1},
    }


def test_bedrock_hands_back_a_tool_result_and_posts_the_answer(
    services: MemoryServices,
) -> None:
    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    fact = a_fact(gw.ALICE, "Alice lives in Paris", scope=scope_of(gw.GUILD), at_ms=START_MS)
    services.repository.put_fact(fact)
    use = {
        "toolUse": {
            "toolUseId": "tooluse_1",
            "name": "update_memory",
            "input": {"id": fact.fact_id, "text": "Alice lives in Berlin"},
        }
    }
    question = Question(
        guild_id=gw.GUILD,
        channel_id=gw.CHANNEL,
        author_id=gw.ALICE,
        author_name="Alice",
        content="I moved to Berlin",
        message_id=gw.snowflake(START_MS + 5_000),
    )
    applied = {"status": "applied", "id": fact.fact_id, "text": "Alice lives in Berlin"}
    second = {
        "modelId": "anthropic.claude-test",
        "system": ANY,
        "messages": [
            {"role": "user", "content": [{"text": "I moved to Berlin"}]},
            {"role": "assistant", "content": [use]},  # the calls alone, no placeholder text
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": "tooluse_1",
                            "content": [{"text": json.dumps(applied)}],
                        }
                    }
                ],
            },
        ],
        "inferenceConfig": ANY,
        "toolConfig": ANY,
    }
    settings = services.settings
    limiter = AnswerRateLimiter(services.repository, settings, services.clock)
    poster = RecordingPoster()
    model = BedrockChatModel("anthropic.claude-test", client=client)
    answerer = Answerer(
        services, model, poster, limiter, lambda: DEFAULT_SYSTEM_PROMPT, time_left_ms=lambda: 60_000
    )

    with Stubber(client) as stub:
        stub.add_response("converse", converse_reply([use], "tool_use"))
        stub.add_response(
            "converse", converse_reply([{"text": "Welcome to Berlin!"}], "end_turn"), second
        )
        report = answerer.answer(question)
        stub.assert_no_pending_responses()

    (posted,) = poster.posted
    assert posted.startswith("I corrected what I remember about Alice")
    assert posted.endswith("\nWelcome to Berlin!")
    assert (report.model_calls, report.follow_up, report.corrections) == (2, "answered", 1)


class DuplicateIdModel:
    """A chat model (any ChatModel, not one of ours) whose calls share an id: no provider
    would take them back, so the second call is not asked, and the answer still has words."""

    def __init__(self, fact_id: str) -> None:
        self.fact_id = fact_id
        self.requests: list[ChatRequest] = []

    def reply(self, request: ChatRequest) -> ChatReply:
        self.requests.append(request)
        call = ToolCall(id="same", name="update_memory", arguments={"id": self.fact_id, "text": ""})
        return ChatReply(text="", tool_calls=[call, call])


def test_calls_no_provider_could_take_back_are_not_sent_and_words_go_out(
    services: MemoryServices,
) -> None:
    fact = a_fact(gw.ALICE, "Alice lives in Paris", scope=scope_of(gw.GUILD), at_ms=START_MS)
    services.repository.put_fact(fact)
    settings = services.settings
    limiter = AnswerRateLimiter(services.repository, settings, services.clock)
    poster, model = RecordingPoster(), DuplicateIdModel(fact.fact_id)
    answerer = Answerer(services, model, poster, limiter, lambda: DEFAULT_SYSTEM_PROMPT)

    report = answerer.answer(
        Question(gw.GUILD, gw.CHANNEL, gw.ALICE, "Alice", "forget where I live", "1234")
    )

    assert len(model.requests) == 1
    (posted,) = poster.posted
    assert posted.startswith("I forgot what I remembered about Alice")
    assert posted.endswith("\n" + AFTER_ACTING)
    assert (report.model_calls, report.follow_up) == (1, "failed")
