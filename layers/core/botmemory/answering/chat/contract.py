"""What a chat model is given and what it answers, whatever the provider (docs/architecture.md section 10).

The request carries the whole system prompt (the memory block included), the conversation
oldest first, ending with the message being answered, and the tools the model may call. The
reply is the answer's text and the tool calls the model made; the caller applies those
itself. To have the model answer after acting, the caller asks once more with the
conversation grown by two turns: the assistant's turn with its tool calls, and a `tool` turn
holding one result per call id (botmemory.answering.follow_up). Each provider renders those
natively (OpenAI: `tool_calls` and `role: "tool"` messages; Converse: `toolUse` and
`toolResult` blocks).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, model_validator


class ChatModelError(RuntimeError):
    """The model gave no usable reply: a timeout, an HTTP or service error after the bounded
    attempts, or an answer that is malformed or empty. The text is safe to log."""


# A call id every provider accepts (Converse's toolUseId pattern and length).
_CALL_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ToolSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments


class ToolCall(BaseModel):
    id: str  # the provider's call id, or one made up when it sent none
    name: str
    arguments: dict[str, Any]  # {} when the model sent something that is not a JSON object


class ToolResult(BaseModel):
    """What became of one tool call, for the model's next turn."""

    call_id: str
    content: str  # short JSON text: {"status": "applied" | "refused", ...}


class ChatTurn(BaseModel):
    """One message of the conversation. An assistant turn may carry the tool calls it made
    (`tool_calls`); a `tool` turn carries only their results, one per call, and follows it."""

    role: Literal["user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ToolCall] = []
    tool_results: list[ToolResult] = []

    @model_validator(mode="after")
    def _parts_fit_the_role(self) -> ChatTurn:
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant turn carries tool calls")
        if self.role == "tool" and (self.content or not self.tool_results):
            raise ValueError("a tool turn carries tool results and nothing else")
        if self.tool_results and self.role != "tool":
            raise ValueError("only a tool turn carries tool results")
        ids = [call.id for call in self.tool_calls]
        if len(set(ids)) != len(ids) or not all(_CALL_ID_RE.fullmatch(i) for i in ids):
            raise ValueError("tool call ids must be unique and usable (usable_call_ids)")
        return self


class ChatRequest(BaseModel):
    system: str
    # Oldest first; the last is the message being answered, or the results of the tool calls
    # the turn before it made.
    turns: list[ChatTurn] = Field(min_length=1)
    tools: list[ToolSpec] = []
    # The caller's cap; a provider never asks for more than its own CHAT_MODEL_MAX_OUTPUT_TOKENS.
    max_output_tokens: int = Field(default=800, ge=1)

    @model_validator(mode="after")
    def _a_conversation_every_provider_takes(self) -> ChatRequest:
        if self.turns[-1].role not in ("user", "tool"):
            raise ValueError("the last turn must be the user's message or tool results")
        offered = {tool.name for tool in self.tools}
        for index, turn in enumerate(self.turns):
            following = self.turns[index + 1] if index + 1 < len(self.turns) else None
            before = self.turns[index - 1] if index else None
            if turn.role == "tool" and (before is None or not before.tool_calls):
                raise ValueError("tool results must follow the assistant turn that called")
            if turn.tool_calls:
                # Both APIs want every call answered in the very next message, and Converse
                # wants the tools offered whenever the conversation holds tool blocks.
                if {call.name for call in turn.tool_calls} - offered:
                    raise ValueError("a tool call names a tool the request does not offer")
                answered = [r.call_id for r in following.tool_results] if following else []
                if answered != [call.id for call in turn.tool_calls]:
                    raise ValueError("the next turn must hold one result per tool call, in order")
        return self

    @property
    def question(self) -> str:
        """The message being answered: the last user turn."""
        return next((turn.content for turn in reversed(self.turns) if turn.role == "user"), "")

    @property
    def results(self) -> list[ToolResult]:
        """The tool results this request hands back ([] when it asks the question itself)."""
        return self.turns[-1].tool_results


class ChatReply(BaseModel):
    text: str  # "" when the model only called tools
    tool_calls: list[ToolCall] = []


class ChatModel(Protocol):
    """One call per answer, and one more when the first called a tool. Each provider also has a `name` (`rules`, `openai:<model>`...) for
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


# What a tool result's JSON text says of its call: done, or not done and why.
APPLIED = "applied"
REFUSED = "refused"


def tool_result(call_id: str, status: str, **details: str | bool) -> ToolResult:
    """One call's result as the short JSON text the model reads: `status` first, then the
    details (the fact's id, its text now, why it was refused)."""
    return ToolResult(
        call_id=call_id,
        content=json.dumps({"status": status, **details}, ensure_ascii=False),
    )


def result_fields(result: ToolResult) -> dict[str, Any]:
    """A result's JSON text read back ({} for anything that is not a JSON object)."""
    return parsed_arguments(result.content)


def usable_call_ids(calls: list[ToolCall]) -> list[ToolCall]:
    """The calls with ids every provider takes back: unique within the reply, of Converse's
    form. A server's id that is not (a long one, odd characters, one already used) is
    replaced by a generated one, so the results the caller sends back can name each call."""
    seen: set[str] = set()
    usable: list[ToolCall] = []
    for index, call in enumerate(calls):
        call_id = call.id
        serial = index
        while not _CALL_ID_RE.fullmatch(call_id) or call_id in seen:
            call_id = generated_call_id(serial)
            serial += len(calls)
        seen.add(call_id)
        usable.append(call if call_id == call.id else call.model_copy(update={"id": call_id}))
    return usable


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
