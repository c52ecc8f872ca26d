"""Answering after acting: the model's `update_memory` calls are applied, and their results
handed back to it for one more call, whose text is the answer (docs/answering.md, step 5).

The second request is the first one grown by two turns: the assistant's turn with the text
and the calls it made, and a `tool` turn with one result per call (applied, with the fact's
text now, or refused, with why), each a short JSON text. The tool is offered again: Converse
refuses a conversation that holds tool blocks without its `toolConfig`, and one request
shape serves every provider. But nothing the second reply calls is applied: a model may not
act twice on one message. Its calls are counted and logged, and its text goes out.

The member always gets words, never only a notice: if the second call fails, says nothing,
or cannot fit in the invocation's time left, the first reply's text is the answer, and
failing that AFTER_ACTING.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from botmemory.answering.chat.contract import (
    APPLIED,
    REFUSED,
    ChatModel,
    ChatModelError,
    ChatReply,
    ChatRequest,
    ChatTurn,
    ToolCall,
    ToolResult,
    tool_result,
)
from botmemory.answering.corrections import Correction, Refusal
from botmemory.settings.config import Settings

log = logging.getLogger(__name__)

# Said after the notices when the model gives no words of its own.
AFTER_ACTING = "That's what became of what I remember; ask me again if you'd like more."
# Left, beyond the second call's timeout, to post and record the answer.
FOLLOW_UP_RESERVE_MS = 5_000


class FollowUpStatus(StrEnum):
    NONE = "none"  # no update_memory call: one model call was the answer
    ANSWERED = "answered"  # the second reply's text is the answer
    EMPTY = "empty"  # the second reply had no text
    FAILED = "failed"  # the second call failed
    NO_TIME = "no_time"  # the invocation's time left could not fit it: not made


@dataclass(frozen=True)
class FollowUp:
    text: str  # never empty
    status: FollowUpStatus
    called: bool  # whether the second model call was made
    ignored_calls: int  # tool calls of the second reply, not applied


def applied_result(call: ToolCall, correction: Correction) -> ToolResult:
    if correction.new is None:
        return tool_result(call.id, APPLIED, id=correction.fact_id, deleted=True)
    return tool_result(call.id, APPLIED, id=correction.fact_id, text=correction.new)


def refused_result(call: ToolCall, refusal: Refusal) -> ToolResult:
    return tool_result(call.id, REFUSED, id=refusal.fact_id, reason=refusal.reason)


def needed_ms(settings: Settings) -> int:
    """The time the second call must find left: its attempt's timeout and the posts. (A
    retry is the provider's; AnswerFunction's Timeout, 90 s, leaves room for one after a
    first call that took its full 20 s attempt.)"""
    return int(settings.chat_timeout_seconds * 1000) + FOLLOW_UP_RESERVE_MS


def answer_after(
    model: ChatModel,
    request: ChatRequest,
    first: ChatReply,
    acted: list[tuple[ToolCall, ToolResult]],
    *,
    time_left_ms: Callable[[], int | None],
    needed: int,
) -> FollowUp:
    """The answer once the calls in `acted` (each with its result) were applied: at most
    one more call of `model`, made only when `needed` ms fit in `time_left_ms()` (None:
    unbounded)."""
    fallback = first.text.strip() or AFTER_ACTING
    left = time_left_ms()
    if left is not None and left < needed:
        log.warning(
            "no time left to answer after the corrections",
            extra={"time_left_ms": left, "needed_ms": needed},
        )
        return FollowUp(fallback, FollowUpStatus.NO_TIME, called=False, ignored_calls=0)
    try:
        asked = follow_up_request(request, first, acted)
    except ValueError as error:  # a conversation the contract refuses: never sent
        log.error("answer after the corrections not asked", extra={"error": str(error)[:300]})
        return FollowUp(fallback, FollowUpStatus.FAILED, called=False, ignored_calls=0)
    try:
        second = model.reply(asked)
    except ChatModelError as error:
        log.warning("answer after the corrections failed", extra={"error": str(error)[:300]})
        return FollowUp(fallback, FollowUpStatus.FAILED, called=True, ignored_calls=0)
    if second.tool_calls:
        log.warning(
            "tool calls in the answer after the corrections not applied",
            extra={
                "calls": len(second.tool_calls),
                "names": [c.name[:40] for c in second.tool_calls],
            },
        )
    text = second.text.strip()
    status = FollowUpStatus.ANSWERED if text else FollowUpStatus.EMPTY
    return FollowUp(text or fallback, status, called=True, ignored_calls=len(second.tool_calls))


def follow_up_request(
    request: ChatRequest, first: ChatReply, acted: list[tuple[ToolCall, ToolResult]]
) -> ChatRequest:
    """The first request with the assistant's calls and their results after it (built anew,
    so the contract's checks run on it)."""
    return ChatRequest(
        system=request.system,
        turns=[
            *request.turns,
            ChatTurn(role="assistant", content=first.text, tool_calls=[c for c, _ in acted]),
            ChatTurn(role="tool", tool_results=[r for _, r in acted]),
        ],
        tools=request.tools,
        max_output_tokens=request.max_output_tokens,
    )
