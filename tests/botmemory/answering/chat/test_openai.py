"""OpenAIChatModel against a real HTTP server on 127.0.0.1 that plays scripted answers (the
memory model tests' server), and build_chat_model's choice of URL and key for `openai:`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities import parameters

from botmemory.answering.chat import build_chat_model
from botmemory.answering.chat.contract import (
    UPDATE_MEMORY,
    ChatModelError,
    ChatReply,
    ChatRequest,
    ChatTurn,
    ToolCall,
)
from botmemory.answering.chat.openai_compat import OpenAIChatModel
from botmemory.settings.config import chat_api_key, settings_from
from tests.botmemory.consolidation.model.test_openai_compat import SleepRecorder
from tests.support.fake_providers import Scripted, ScriptServer

CHAT_KEY = "sk-chat-secret-456"
SYSTEM = 'You answer briefly.\n\n<memory>\n- "Ada likes Rust."\n</memory>'


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    srv = ScriptServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.stop.set()
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def completion(message: dict[str, Any], finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-chat",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", **message},
                "finish_reason": finish_reason,
            }
        ],
    }


def function_call(call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
    return call


def request(*, tools: bool = True, max_output_tokens: int = 800) -> ChatRequest:
    return ChatRequest(
        system=SYSTEM,
        turns=[
            ChatTurn(role="user", content="hi"),
            ChatTurn(role="assistant", content="Hello!"),
            ChatTurn(role="user", content="What does Ada like?"),
        ],
        tools=[UPDATE_MEMORY] if tools else [],
        max_output_tokens=max_output_tokens,
    )


def make_model(
    server: ScriptServer,
    sleep: SleepRecorder | None = None,
    *,
    max_attempts: int = 2,
    timeout_seconds: float = 5.0,
) -> OpenAIChatModel:
    return OpenAIChatModel(
        "gpt-chat",
        base_url=server.base_url,
        api_key=CHAT_KEY,
        timeout_seconds=timeout_seconds,
        max_attempts=max_attempts,
        max_output_tokens=600,
        sleep=sleep or SleepRecorder(),
    )


# The request -----------------------------------------------------------------------------


def test_the_request_carries_the_system_prompt_the_turns_and_the_tool(
    server: ScriptServer,
) -> None:
    server.script.append(Scripted(200, completion({"content": "Ada likes Rust."})))

    reply = make_model(server).reply(request())

    assert reply == ChatReply(text="Ada likes Rust.")
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {CHAT_KEY}"
    assert sent.body == {
        "model": "gpt-chat",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "What does Ada like?"},
        ],
        "max_tokens": 600,  # the request's 800, capped by the model's setting
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "update_memory",
                    "description": UPDATE_MEMORY.description,
                    "parameters": UPDATE_MEMORY.parameters,
                },
            }
        ],
    }


def test_no_tools_key_without_tools_and_a_smaller_request_limit_wins(
    server: ScriptServer,
) -> None:
    server.script.append(Scripted(200, completion({"content": "ok"})))

    make_model(server).reply(request(tools=False, max_output_tokens=100))

    body = server.requests[0].body
    assert "tools" not in body
    assert body["max_tokens"] == 100


# Tool calls -------------------------------------------------------------------------------


def test_tool_calls_are_parsed_with_their_arguments(server: ScriptServer) -> None:
    calls = [
        function_call(
            "call_a", "update_memory", json.dumps({"id": "f-1", "text": "Ada likes Go."})
        ),
        function_call("call_b", "update_memory", json.dumps({"id": "f-2", "text": ""})),
    ]
    server.script.append(Scripted(200, completion({"content": None, "tool_calls": calls})))

    reply = make_model(server).reply(request())

    assert reply == ChatReply(
        text="",
        tool_calls=[
            ToolCall(
                id="call_a", name="update_memory", arguments={"id": "f-1", "text": "Ada likes Go."}
            ),
            ToolCall(id="call_b", name="update_memory", arguments={"id": "f-2", "text": ""}),
        ],
    )


@pytest.mark.parametrize(
    "arguments",
    ['{"id": "f-1", "text": "cut sh', "[1, 2]", '"just a string"', "", None, 42],
    ids=["broken-json", "a-list", "a-string", "empty", "null", "a-number"],
)
def test_arguments_that_are_not_a_json_object_become_empty(
    server: ScriptServer, arguments: Any
) -> None:
    call = function_call("call_x", "update_memory", arguments)
    server.script.append(Scripted(200, completion({"content": "", "tool_calls": [call]})))

    reply = make_model(server).reply(request())

    assert reply.tool_calls == [ToolCall(id="call_x", name="update_memory", arguments={})]


def test_arguments_sent_as_an_object_are_kept(server: ScriptServer) -> None:
    # Some compatible servers send the arguments parsed already.
    call = function_call("call_o", "update_memory", {"id": "f-1", "text": "x"})
    server.script.append(Scripted(200, completion({"content": None, "tool_calls": [call]})))

    reply = make_model(server).reply(request())

    assert reply.tool_calls[0].arguments == {"id": "f-1", "text": "x"}


def test_a_call_without_an_id_gets_one_and_a_call_without_a_name_is_skipped(
    server: ScriptServer,
) -> None:
    calls: list[Any] = [
        function_call(None, "update_memory", "{}"),
        {"type": "function", "function": {"arguments": "{}"}},
        "not a call",
        function_call("", "update_memory", "{}"),
    ]
    server.script.append(Scripted(200, completion({"content": "Noted.", "tool_calls": calls})))

    reply = make_model(server).reply(request())

    assert reply.text == "Noted."
    assert [(c.id, c.name) for c in reply.tool_calls] == [
        ("call_0", "update_memory"),
        ("call_3", "update_memory"),
    ]


def test_text_and_tool_calls_come_together(server: ScriptServer) -> None:
    call = function_call("call_a", "update_memory", '{"id": "f-1", "text": ""}')
    message = {"content": "  I forgot that one.  ", "tool_calls": [call]}
    server.script.append(Scripted(200, completion(message)))

    reply = make_model(server).reply(request())

    assert reply.text == "I forgot that one."
    assert len(reply.tool_calls) == 1


def test_a_cut_off_answer_keeps_its_text_but_not_its_tool_calls(server: ScriptServer) -> None:
    call = function_call("call_a", "update_memory", '{"id": "f-1", "text": "Ada li')
    message = {"content": "Ada likes", "tool_calls": [call]}
    server.script.append(Scripted(200, completion(message, finish_reason="length")))

    reply = make_model(server).reply(request())

    assert reply == ChatReply(text="Ada likes")


def test_content_given_as_text_parts_is_joined(server: ScriptServer) -> None:
    parts = [{"type": "text", "text": "Ada "}, {"type": "text", "text": "likes Rust."}, 7]
    server.script.append(Scripted(200, completion({"content": parts})))

    assert make_model(server).reply(request()).text == "Ada likes Rust."


def test_a_refusal_is_the_answer_when_there_is_no_content(server: ScriptServer) -> None:
    server.script.append(Scripted(200, completion({"content": None, "refusal": "I can't help."})))

    assert make_model(server).reply(request()).text == "I can't help."


# Failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "<html>bad gateway page</html>",
        {"object": "error"},
        {"choices": []},
        {"choices": [{"index": 0}]},
        completion({"content": "   "}),
        completion({"content": None, "tool_calls": [{"type": "function"}]}),
    ],
    ids=["not-json", "no-choices", "empty-choices", "no-message", "blank", "no-usable-call"],
)
def test_a_malformed_answer_is_an_error_and_is_not_retried(server: ScriptServer, body: Any) -> None:
    server.script.append(Scripted(200, body))

    with pytest.raises(ChatModelError, match="openai:gpt-chat"):
        make_model(server).reply(request())

    assert len(server.requests) == 1


def test_a_persistent_5xx_fails_after_the_configured_attempts(server: ScriptServer) -> None:
    server.script.extend(Scripted(503, "overloaded") for _ in range(3))
    sleep = SleepRecorder()

    with pytest.raises(ChatModelError, match="after 2 attempts: HTTP 503"):
        make_model(server, sleep, max_attempts=2).reply(request())

    assert len(server.requests) == 2
    assert len(sleep.calls) == 1


def test_a_5xx_then_an_answer_succeeds(server: ScriptServer) -> None:
    server.script.append(Scripted(500, "oops"))
    server.script.append(Scripted(200, completion({"content": "Ada likes Rust."})))

    assert make_model(server).reply(request()).text == "Ada likes Rust."
    assert len(server.requests) == 2


def test_a_timeout_fails_after_the_configured_attempts(server: ScriptServer) -> None:
    server.script.extend(Scripted(200, completion({"content": "late"}), delay=5) for _ in range(2))

    with pytest.raises(ChatModelError, match="after 2 attempts: timed out"):
        make_model(server, max_attempts=2, timeout_seconds=0.2).reply(request())

    assert len(server.requests) == 2


def test_a_long_retry_after_is_capped_for_someone_waiting(server: ScriptServer) -> None:
    server.script.append(Scripted(429, "slow down", headers={"Retry-After": "3600"}))
    server.script.append(Scripted(200, completion({"content": "ok"})))
    sleep = SleepRecorder()

    make_model(server, sleep).reply(request())

    assert sleep.calls == [10.0]


def test_401_is_not_retried_and_does_not_leak_the_key(server: ScriptServer) -> None:
    server.script.append(Scripted(401, {"error": f"bad key {CHAT_KEY}"}))

    with pytest.raises(ChatModelError) as caught:
        make_model(server).reply(request())

    assert "HTTP 401" in str(caught.value) and CHAT_KEY not in str(caught.value)
    assert len(server.requests) == 1


# Built from the settings -------------------------------------------------------------------


def test_the_memory_models_url_and_key_serve_when_the_chat_has_none(server: ScriptServer) -> None:
    server.script.append(Scripted(200, completion({"content": "ok"})))
    settings = settings_from(
        {
            "CHAT_MODEL": "openai:gpt-chat",
            "MEMORY_MODEL_BASE_URL": server.base_url,
            "MEMORY_MODEL_API_KEY": "sk-memory",
        }
    )

    model = build_chat_model(settings)

    assert isinstance(model, OpenAIChatModel) and model.name == "openai:gpt-chat"
    assert model.reply(request()).text == "ok"
    assert server.requests[0].headers["authorization"] == "Bearer sk-memory"


def test_the_chat_models_own_url_key_and_limits_win(server: ScriptServer) -> None:
    server.script.extend(Scripted(500, "down") for _ in range(4))
    settings = settings_from(
        {
            "CHAT_MODEL": "openai:gpt-chat",
            "CHAT_MODEL_BASE_URL": server.base_url,
            "CHAT_MODEL_API_KEY": CHAT_KEY,
            "CHAT_MODEL_MAX_ATTEMPTS": "3",
            "CHAT_MODEL_MAX_OUTPUT_TOKENS": "300",
            "MEMORY_MODEL_BASE_URL": "http://127.0.0.1:9/unused",
            "MEMORY_MODEL_API_KEY": "sk-memory",
        }
    )
    model = build_chat_model(settings)
    assert isinstance(model, OpenAIChatModel)
    model._endpoint._sleep = SleepRecorder()

    with pytest.raises(ChatModelError, match="after 3 attempts"):
        model.reply(request())

    assert len(server.requests) == 3
    assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {CHAT_KEY}"}
    assert server.requests[0].body["max_tokens"] == 300


def test_the_chat_key_secret_is_read_and_the_memory_key_is_then_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secrets = {"chat-key": "sk-from-secret", "memory-key": "sk-memory-secret"}
    monkeypatch.setattr(parameters, "get_secret", lambda name, **_: secrets[name])

    own = settings_from(
        {"CHAT_MODEL_API_KEY_SECRET": "chat-key", "MEMORY_MODEL_API_KEY_SECRET": "memory-key"}
    )
    inherited = settings_from({"MEMORY_MODEL_API_KEY_SECRET": "memory-key"})

    assert chat_api_key(own) == "sk-from-secret"
    assert chat_api_key(inherited) == "sk-memory-secret"
    assert chat_api_key(settings_from({})) is None


def test_no_chat_model_unless_configured() -> None:
    assert build_chat_model(settings_from({"MEMORY_MODEL": "rules"})) is None


def test_limits_left_unset_are_the_chat_models_own(server: ScriptServer) -> None:
    # Someone is waiting: two attempts, waits capped at 10 s, at most 800 output tokens and a
    # 20 s timeout when the caller says nothing (its DEFAULTS, ChatCompletionsClient).
    server.script.extend(Scripted(503, "busy", {"Retry-After": "3600"}) for _ in range(2))
    server.script.append(Scripted(200, completion({"content": "ok"})))
    sleep = SleepRecorder()
    model = OpenAIChatModel("gpt-chat", base_url=server.base_url, api_key=None, sleep=sleep)

    with pytest.raises(ChatModelError, match="after 2 attempts"):
        model.reply(request())
    model.reply(request(max_output_tokens=5000))

    assert sleep.calls == [10.0]
    assert server.requests[-1].body["max_tokens"] == 800
    assert model._endpoint.client is not None and model._endpoint.client.timeout.read == 20.0
