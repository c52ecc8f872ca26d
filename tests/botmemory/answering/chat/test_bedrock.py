"""BedrockChatModel against a real bedrock-runtime client: botocore's Stubber for the Converse
request and answer, and a `before-send` handler (no request leaves the process) for the
attempts botocore makes with the chat settings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.exceptions import ReadTimeoutError
from botocore.stub import Stubber

from botmemory.answering.chat import build_chat_model
from botmemory.answering.chat.bedrock import EMPTY_TURN, BedrockChatModel, converse_messages
from botmemory.answering.chat.contract import (
    UPDATE_MEMORY,
    ChatModelError,
    ChatReply,
    ChatRequest,
    ChatTurn,
    ToolCall,
)
from botmemory.settings.config import settings_from

MODEL_ID = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
SYSTEM = 'You answer briefly.\n\n<memory>\n- "Ada likes Rust."\n</memory>'


def converse_response(
    content: list[dict[str, Any]], stop_reason: str = "end_turn"
) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_reason,
        "usage": {"inputTokens": 120, "outputTokens": 40, "totalTokens": 160},
        "metrics": {"latencyMs": 350},
    }


def tool_use(use_id: str, tool_input: Any, name: str = "update_memory") -> dict[str, Any]:
    return {"toolUse": {"toolUseId": use_id, "name": name, "input": tool_input}}


def request(*, tools: bool = True, max_output_tokens: int = 800) -> ChatRequest:
    return ChatRequest(
        system=SYSTEM,
        turns=[ChatTurn(role="user", content="What does Ada like?")],
        tools=[UPDATE_MEMORY] if tools else [],
        max_output_tokens=max_output_tokens,
    )


def expected_params(*, tools: bool = True, max_tokens: int = 500) -> dict[str, Any]:
    params: dict[str, Any] = {
        "modelId": MODEL_ID,
        "system": [{"text": SYSTEM}],
        "messages": [{"role": "user", "content": [{"text": "What does Ada like?"}]}],
        "inferenceConfig": {"maxTokens": max_tokens},
    }
    if tools:
        params["toolConfig"] = {
            "tools": [
                {
                    "toolSpec": {
                        "name": "update_memory",
                        "description": UPDATE_MEMORY.description,
                        "inputSchema": {"json": UPDATE_MEMORY.parameters},
                    }
                }
            ]
        }
    return params


@pytest.fixture
def client() -> Any:
    return boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


@pytest.fixture
def stubber(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


def make_model(client: Any) -> BedrockChatModel:
    return BedrockChatModel(MODEL_ID, client=client, max_output_tokens=500)


# The request and the answer ----------------------------------------------------------------


def test_converse_gets_the_system_prompt_the_turns_and_the_tool(
    client: Any, stubber: Stubber
) -> None:
    stubber.add_response(
        "converse", converse_response([{"text": "Ada likes Rust."}]), expected_params()
    )

    reply = make_model(client).reply(request())

    assert reply == ChatReply(text="Ada likes Rust.")


def test_no_tool_config_without_tools_and_a_smaller_request_limit_wins(
    client: Any, stubber: Stubber
) -> None:
    stubber.add_response(
        "converse",
        converse_response([{"text": "ok"}]),
        expected_params(tools=False, max_tokens=120),
    )

    assert make_model(client).reply(request(tools=False, max_output_tokens=120)).text == "ok"


def test_tool_use_blocks_become_tool_calls_next_to_the_text(client: Any, stubber: Stubber) -> None:
    content = [
        {"text": "I'll fix that."},
        tool_use("tu-1", {"id": "f-1", "text": "Ada likes Go."}),
        tool_use("tu-2", {"id": "f-2", "text": ""}),
    ]
    stubber.add_response("converse", converse_response(content, "tool_use"), expected_params())

    reply = make_model(client).reply(request())

    assert reply == ChatReply(
        text="I'll fix that.",
        tool_calls=[
            ToolCall(
                id="tu-1", name="update_memory", arguments={"id": "f-1", "text": "Ada likes Go."}
            ),
            ToolCall(id="tu-2", name="update_memory", arguments={"id": "f-2", "text": ""}),
        ],
    )


@pytest.mark.parametrize(
    "tool_input", ["{not json", [1, 2], None, 3], ids=["broken-string", "list", "null", "number"]
)
def test_a_tool_input_that_is_not_an_object_becomes_empty(
    client: Any, stubber: Stubber, tool_input: Any
) -> None:
    content = [tool_use("tu-1", tool_input)]
    stubber.add_response("converse", converse_response(content, "tool_use"), expected_params())

    reply = make_model(client).reply(request())

    assert reply == ChatReply(
        text="", tool_calls=[ToolCall(id="tu-1", name="update_memory", arguments={})]
    )


def test_several_text_blocks_are_joined_by_lines(client: Any, stubber: Stubber) -> None:
    content = [{"text": "Ada likes Rust. "}, {"text": "   "}, {"text": "And C."}]
    stubber.add_response("converse", converse_response(content), expected_params())

    assert make_model(client).reply(request()).text == "Ada likes Rust.\nAnd C."


def test_a_cut_off_answer_keeps_its_text_but_not_its_tool_calls(
    client: Any, stubber: Stubber
) -> None:
    content = [{"text": "Ada likes"}, tool_use("tu-1", {"id": "f-1"})]
    stubber.add_response("converse", converse_response(content, "max_tokens"), expected_params())

    assert make_model(client).reply(request()) == ChatReply(text="Ada likes")


def test_an_answer_without_text_or_tool_call_is_an_error(client: Any, stubber: Stubber) -> None:
    stubber.add_response("converse", converse_response([{"text": "  "}]), expected_params())

    with pytest.raises(ChatModelError, match="neither text nor a tool call"):
        make_model(client).reply(request())


def test_a_service_error_is_a_chat_model_error(client: Any, stubber: Stubber) -> None:
    stubber.add_client_error(
        "converse",
        service_error_code="ThrottlingException",
        service_message="Too many requests",
        http_status_code=429,
        expected_params=expected_params(),
    )

    with pytest.raises(ChatModelError, match="ThrottlingException: Too many requests"):
        make_model(client).reply(request())


def test_turns_become_alternating_messages_that_start_with_the_user() -> None:
    turns = [
        ChatTurn(role="assistant", content="(joined the channel)"),
        ChatTurn(role="user", content="hi"),
        ChatTurn(role="user", content="   "),
        ChatTurn(role="assistant", content="Hello!"),
        ChatTurn(role="user", content="What does Ada like?"),
    ]

    assert converse_messages(turns) == [
        {"role": "user", "content": [{"text": "hi"}, {"text": EMPTY_TURN}]},
        {"role": "assistant", "content": [{"text": "Hello!"}]},
        {"role": "user", "content": [{"text": "What does Ada like?"}]},
    ]


# Attempts and timeouts, as botocore makes them with the chat settings ---------------------


class Wire:
    """Answers every Converse request on the wire itself, counting them."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse:
        self.calls += 1
        if self.answer == "timeout":
            raise ReadTimeoutError(endpoint_url=request.url)
        headers = HTTPHeaders.from_dict({"x-amzn-errortype": "ServiceUnavailableException"})
        return AWSResponse(request.url, 503, headers, Body())


class Body:
    """The raw body of a scripted response (botocore reads it with `stream()`)."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b'{"message": "try later"}'


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's waits between attempts, recorded instead of slept."""
    recorded: list[float] = []
    # botocore.endpoint sleeps through the time module between attempts.
    monkeypatch.setattr(time, "sleep", recorded.append)
    return recorded


def built(**extra: str) -> BedrockChatModel:
    model = build_chat_model(settings_from({"CHAT_MODEL": f"bedrock:{MODEL_ID}", **extra}))
    assert isinstance(model, BedrockChatModel)
    return model


def test_the_client_has_the_chat_timeout_and_attempts() -> None:
    config = (
        built(CHAT_MODEL_TIMEOUT_SECONDS="7.5", CHAT_MODEL_MAX_ATTEMPTS="3")._bedrock().meta.config
    )

    assert config.read_timeout == 7.5
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}


def test_the_defaults_are_a_short_timeout_and_two_attempts() -> None:
    config = built()._bedrock().meta.config

    assert config.read_timeout == 20.0
    assert config.retries == {"mode": "standard", "total_max_attempts": 2}


@pytest.mark.parametrize("answer", ["timeout", "503"])
def test_a_timeout_or_a_5xx_fails_after_the_configured_attempts(
    waits: list[float], answer: str
) -> None:
    model = built(CHAT_MODEL_MAX_ATTEMPTS="2")
    wire = Wire(answer)
    model._bedrock().meta.events.register("before-send.bedrock-runtime.Converse", wire)

    with pytest.raises(ChatModelError, match=f"bedrock:{MODEL_ID} call failed"):
        model.reply(request())

    assert wire.calls == 2
    assert len(waits) == 1
