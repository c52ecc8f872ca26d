"""What a chat model is given and what it answers, whatever the provider (docs/architecture.md section 10).

One call per answer: the request carries the whole system prompt (the memory block included),
the conversation oldest first, ending with the message being answered, and the tools the
model may call. The reply is the answer's text and the tool calls the model made; the caller
applies those itself and sends no tool result back.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, model_validator


class ChatModelError(RuntimeError):
    """The model gave no usable reply: a timeout, an HTTP or service error after the bounded
    attempts, or an answer that is malformed or empty. The text is safe to log."""


class ChatTurn(BaseModel):
    """One message of the conversation."""

    role: Literal["user", "assistant"]
    content: str


class ToolSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments


class ToolCall(BaseModel):
    id: str  # the provider's call id, or one made up when it sent none
    name: str
    arguments: dict[str, Any]  # {} when the model sent something that is not a JSON object


class ChatRequest(BaseModel):
    system: str
    # Oldest first; the last is the message being answered.
    turns: list[ChatTurn] = Field(min_length=1)
    tools: list[ToolSpec] = []
    # The caller's cap; a provider never asks for more than its own CHAT_MODEL_MAX_OUTPUT_TOKENS.
    max_output_tokens: int = Field(default=800, ge=1)

    @model_validator(mode="after")
    def _ends_with_the_user(self) -> ChatRequest:
        if self.turns[-1].role != "user":
            raise ValueError("the last turn must be the user's message")
        return self

    @property
    def question(self) -> str:
        """The message being answered."""
        return self.turns[-1].content


class ChatReply(BaseModel):
    text: str  # "" when the model only called tools
    tool_calls: list[ToolCall] = []


class ChatModel(Protocol):
    """One call per answer. Each provider also has a `name` (`rules`, `openai:<model>`...) for
    logs; the protocol does not require it, so a test's fake model is just a `reply`."""

    def reply(self, request: ChatRequest) -> ChatReply: ...


UPDATE_MEMORY = ToolSpec(
    name="update_memory",
    description=(
        "Correct a remembered fact shown in the prompt, by its id. New text replaces the "
        "fact; empty text deletes it. Use it only when the person says the fact is wrong "
        "or outdated."
    ),
    parameters={
        "type": "object",
        "properties": {
            "id": {"type": "string", "description": "the fact's id, as the prompt shows it"},
            "text": {
                "type": "string",
                "description": "the corrected fact as one short sentence, or empty to delete it",
            },
        },
        "required": ["id", "text"],
    },
)


def generated_call_id(index: int) -> str:
    """The id of a provider's tool call that came without one: unique within the reply."""
    return f"call_{index}"


def effective_max_tokens(request: ChatRequest, cap: int) -> int:
    """What a provider asks for: the request's limit, never above the configured cap."""
    return min(request.max_output_tokens, cap)


def parsed_arguments(raw: Any) -> dict[str, Any]:
    """A tool call's arguments as an object: OpenAI sends a JSON string, Converse an object.
    Anything else (broken JSON, a list, nothing) is {}: the caller checks what it needs."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    return dict(raw) if isinstance(raw, dict) else {}
