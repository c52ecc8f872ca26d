"""A chat model on Amazon Bedrock, through the Converse API.

Converse wants a conversation that starts with the user and alternates roles: consecutive
turns of one role travel as one message (one text block each), and assistant turns before
the first user turn are left out; a blank turn is sent as EMPTY_TURN (Converse refuses an
empty text block). Tools are offered through `toolConfig` (the model chooses
whether to call them); text blocks make the reply's text, `toolUse` blocks its tool calls.
Tool results go back as the assistant message with its `toolUse` blocks, then a user message
of `toolResult` blocks, one per `toolUseId`, each a text block. Their `status` is left out:
only some models take it; the text says applied or refused.
"""

from __future__ import annotations

from typing import Any

from botmemory.answering.chat.contract import (
    ChatModelError,
    ChatReply,
    ChatRequest,
    ChatTurn,
    ToolCall,
    effective_max_tokens,
    generated_call_id,
    parsed_arguments,
    usable_call_ids,
)
from botmemory.providers.aws_clients import ConverseCaller

# What a blank turn becomes: Converse refuses a text block with nothing in it.
EMPTY_TURN = "(an empty message)"

# How much of Bedrock's error message an error keeps, on one line: the text reaches the logs.
_ERROR_MESSAGE_CHARS = 300


class BedrockChatModel:
    """One Converse call per model turn. Timeouts and retries (throttling, 5xx, transport errors)
    are botocore's, configured from the chat settings by botmemory.providers.aws_clients."""

    def __init__(
        self,
        model_id: str,
        *,
        client: Any | None = None,
        max_output_tokens: int = 800,
        region_name: str | None = None,
        timeout_seconds: float = 20.0,
        max_attempts: int = 2,
    ) -> None:
        self._converse = ConverseCaller(
            model_id,
            error=ChatModelError,
            client=client,
            region_name=region_name,
            read_timeout_seconds=timeout_seconds,
            max_attempts=max_attempts,
            message_chars=_ERROR_MESSAGE_CHARS,
        )
        self.name = self._converse.name
        self._max_output_tokens = max_output_tokens

    def _bedrock(self) -> Any:
        return self._converse.client()

    def reply(self, request: ChatRequest) -> ChatReply:
        return self._parse_response(self._converse.converse(**self._converse_params(request)))

    # -- request -------------------------------------------------------------------------------

    def _converse_params(self, request: ChatRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "system": [{"text": request.system}],
            "messages": converse_messages(request.turns),
            "inferenceConfig": {
                "maxTokens": effective_max_tokens(request, self._max_output_tokens)
            },
        }
        if request.tools:
            params["toolConfig"] = {
                "tools": [
                    {
                        "toolSpec": {
                            "name": tool.name,
                            "description": tool.description,
                            "inputSchema": {"json": tool.parameters},
                        }
                    }
                    for tool in request.tools
                ]
            }
        return params

    # -- response ------------------------------------------------------------------------------

    def _parse_response(self, response: Any) -> ChatReply:
        output = response.get("output") if isinstance(response, dict) else None
        message = output.get("message") if isinstance(output, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            raise ChatModelError(f"{self.name} returned no message")
        stop_reason = response.get("stopReason")
        blocks = [block for block in content if isinstance(block, dict)]
        text = "\n".join(
            block["text"].strip()
            for block in blocks
            if isinstance(block.get("text"), str) and block["text"].strip()
        )
        # A call cut off by the token limit may carry half its input: it is not applied. Cut
        # text is still an answer, better than an apology.
        calls = [] if stop_reason == "max_tokens" else _tool_calls(blocks)
        if not text and not calls:
            raise ChatModelError(
                f"{self.name} returned neither text nor a tool call (stopReason={stop_reason!r})"
            )
        return ChatReply(text=text, tool_calls=calls)


def converse_messages(turns: list[ChatTurn]) -> list[dict[str, Any]]:
    """The turns as Converse messages: from the first user turn on, one message per run of
    turns of one role (a tool turn is the user's: Converse carries results in a user
    message)."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        role = "assistant" if turn.role == "assistant" else "user"
        if not messages and turn.role != "user":
            continue
        blocks = _blocks(turn)
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    return messages


def _blocks(turn: ChatTurn) -> list[dict[str, Any]]:
    if turn.role == "tool":
        return [
            {"toolResult": {"toolUseId": result.call_id, "content": [{"text": result.content}]}}
            for result in turn.tool_results
        ]
    uses = [
        {"toolUse": {"toolUseId": call.id, "name": call.name, "input": call.arguments}}
        for call in turn.tool_calls
    ]
    if uses and not turn.content.strip():
        return uses  # calls alone: no placeholder text in front of them
    return [{"text": turn.content if turn.content.strip() else EMPTY_TURN}, *uses]


def _tool_calls(blocks: list[dict[str, Any]]) -> list[ToolCall]:
    """The `toolUse` blocks as tool calls; one without a name is skipped."""
    calls: list[ToolCall] = []
    for index, block in enumerate(blocks):
        use = block.get("toolUse")
        name = use.get("name") if isinstance(use, dict) else None
        if not isinstance(use, dict) or not isinstance(name, str) or not name:
            continue
        call_id = use.get("toolUseId")
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) and call_id else generated_call_id(index),
                name=name,
                arguments=parsed_arguments(use.get("input")),
            )
        )
    return usable_call_ids(calls)
