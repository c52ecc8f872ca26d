"""Asking AnswerFunction to answer, and reading what it was asked.

IngestFunction starts an answer for each new message that calls for one (a mention of the
bot, a reply to it, a DM: botmemory.answering.triggers), never for an event it had already
stored; InteractionsFunction starts one for `/ask`. Both hand AnswerFunction one small
event through Lambda's asynchronous Invoke, so neither waits for the model. A local run
(localrun/) registers the stack's own queue instead of Lambda.

The event is one of:
    {"answer": <AnswerTrigger>}                                      a message
    {"ask": {"interaction": <deferred interaction>, "question": ...}}  /ask
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from botmemory.answering.question import Question, Reply
from botmemory.answering.triggers import AnswerTrigger, answer_trigger
from botmemory.discord.interactions import Permissions
from botmemory.ingest.observe import IngestResult
from botmemory.search.keywords import clip_query
from botmemory.settings.config import Settings
from botmemory.text import scrub

log = logging.getLogger(__name__)

# In a local run, function name -> the stack's own asynchronous invoke.
_LOCAL_TARGETS: dict[str, Callable[[dict[str, Any]], None]] = {}


def register_local_target(function_name: str, target: Callable[[dict[str, Any]], None]) -> None:
    """Route asynchronous invokes of `function_name` to `target` (local runs only)."""
    _LOCAL_TARGETS[function_name] = target


class AnswerRequests:
    """Starts AnswerFunction (ANSWER_FUNCTION); does nothing when answering is not set up."""

    def __init__(self, settings: Settings, lambda_client: Any | None = None) -> None:
        self._function = settings.answer_function
        self._bot_user_id = settings.bot_user_id
        self._client = lambda_client

    @property
    def enabled(self) -> bool:
        return bool(self._function)

    def after_ingest(self, events: list[Any], result: IngestResult) -> int:
        """Start an answer for each event that calls for one and was not a duplicate."""
        if not self._function:
            return 0
        seen_before = set(result.duplicate_indexes)
        started = 0
        for index, event in enumerate(events):
            if index in seen_before:
                continue
            trigger = answer_trigger(event, self._bot_user_id)
            if trigger is not None:
                self._start({"answer": trigger.model_dump(mode="json")})
                started += 1
        return started

    def ask(self, job: dict[str, Any]) -> None:
        """/ask: the deferred interaction and its question."""
        self._start(job)

    def _start(self, payload: dict[str, Any]) -> None:
        assert self._function is not None  # nosec B101 # set whenever a job can start (the constructor); a programming error, never input
        self._client = invoke_async(self._function, payload, self._client)


def invoke_async(function: str, payload: dict[str, Any], client: Any | None = None) -> Any:
    """Start `function` with `payload` (Lambda's asynchronous Invoke; a local target in a
    local run); returns the client, made here when none was given."""
    local = _LOCAL_TARGETS.get(function)
    if local is not None:
        local(payload)
        return client
    if client is None:
        import boto3  # deferred: only a function that starts another pays for the client

        client = boto3.client("lambda")
    client.invoke(FunctionName=function, InvocationType="Event", Payload=json.dumps(payload))
    return client


class BadAnswerEvent(ValueError):
    """An AnswerFunction event that is neither a message trigger nor an /ask."""


def question_of(event: Any) -> tuple[Question, Reply]:
    """What AnswerFunction was asked, and where the answer goes."""
    if not isinstance(event, dict):
        raise BadAnswerEvent("the event is not an object")
    if "answer" in event:
        try:
            trigger = AnswerTrigger.model_validate(event["answer"])
        except ValidationError as error:
            raise BadAnswerEvent(f"bad message trigger: {error.error_count()} errors") from None
        question = Question(
            guild_id=trigger.guild_id,
            channel_id=trigger.channel_id,
            author_id=trigger.author_id,
            author_name=trigger.author_name,
            content=trigger.content,
            message_id=trigger.message_id,
        )
        return question, Reply()
    if "ask" in event:
        return _ask(event["ask"])
    raise BadAnswerEvent('expected {"answer": ...} or {"ask": ...}')


def _ask(job: Any) -> tuple[Question, Reply]:
    try:
        interaction = job["interaction"]
        member = interaction.get("member") or {}
        user = member.get("user") or interaction.get("user") or {}
        permissions = int(member.get("permissions") or 0)
        question, _ = clip_query(" ".join(scrub(str(job["question"])).split()))
        asked = Question(
            guild_id=interaction.get("guild_id"),
            channel_id=str(interaction["channel_id"]),
            author_id=str(user["id"]),
            author_name=user.get("global_name") or user.get("username"),
            content=question or "",
            staff=bool(permissions & Permissions.MANAGE_GUILD) if member else None,
        )
        reply = Reply(
            interaction={
                "id": str(interaction["id"]),
                "token": str(interaction["token"]),
                "application_id": str(interaction["application_id"]),
            }
        )
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise BadAnswerEvent(f"bad /ask job: {error!r}"[:200]) from None
    if not asked.content:
        raise BadAnswerEvent("the question is empty")
    return asked, reply
