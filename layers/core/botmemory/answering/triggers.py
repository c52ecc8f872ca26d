"""Which gateway messages the bot answers, and the question each one asks.

A `MESSAGE_CREATE` calls for an answer when it mentions the bot (the bot's user id in the
message's `mentions`; a role mention or @everyone does not count), replies to one of the
bot's messages (`referenced_message.author.id` is the bot's), or is a direct message (no
`guild_id`). Never for a message of the bot itself or of any other bot or webhook, never for
Discord's system messages (a pin notice references the pinned message, which may be the
bot's), never when the bot's own id is unknown, never for a question that is empty once the
bot's mention is removed and the text cleaned. Whatever the event, `answer_trigger` returns
a trigger or None: a malformed event is no reason to answer, and no reason to raise either.

The question is bounded before it is cleaned (a message of megabytes is cut first, so the
cleaning never walks megabytes) and after (recall's own bound on a query, MAX_QUERY_CHARS).
"""

from __future__ import annotations

import re
from enum import IntEnum, StrEnum
from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict

from botmemory.search.keywords import MAX_QUERY_CHARS
from botmemory.text import clean, clip, scrub

_SNOWFLAKE = re.compile(r"[0-9]{1,20}")
# Raw text looked at, at most: enough for any real message and its mentions; the rest of a
# forged one is never scanned.
_RAW_CHARS = MAX_QUERY_CHARS * 4
# What a mention leaves in front of the question ("@bot, what…" -> "what…").
_LEADING_PUNCTUATION = re.compile(r"^[\s,:;]+")
_AUTHOR_NAME_CHARS = 80


class TriggerKind(StrEnum):
    MENTION = "mention"
    REPLY = "reply"
    DIRECT = "direct"


class MessageType(IntEnum):
    """Discord's message types that a person writes; every other type is a system message."""

    DEFAULT = 0
    REPLY = 19


class MessageReferenceType(IntEnum):
    DEFAULT = 0  # a reply
    FORWARD = 1  # a forwarded message: it points at a message, it does not answer it


class AnswerTrigger(BaseModel):
    """A message the bot answers, as AnswerFunction receives it."""

    model_config = ConfigDict(frozen=True)

    kind: TriggerKind
    guild_id: str | None
    channel_id: str
    message_id: str
    author_id: str
    author_name: str | None
    # Cleaned (control and invisible characters dropped, cut to MAX_QUERY_CHARS), without the
    # mention of the bot; never empty.
    content: str
    replied_to_bot: bool


def answer_trigger(event: Any, bot_user_id: str | None) -> AnswerTrigger | None:
    """The trigger a raw gateway dispatch event (`{"t": ..., "d": {...}}`) carries, or None."""
    if not _is_snowflake(bot_user_id):
        return None
    if not isinstance(event, dict) or event.get("t") != "MESSAGE_CREATE":
        return None
    payload = event.get("d")
    if not isinstance(payload, dict) or not _written_by_a_person(payload, bot_user_id):
        return None
    ids = _ids(payload)
    if ids is None:
        return None
    guild_id, channel_id, message_id, author_id = ids
    replied_to_bot = _replies_to(payload, bot_user_id)
    kind = _kind(payload, bot_user_id, guild_id=guild_id, replied_to_bot=replied_to_bot)
    if kind is None:
        return None
    content = question_text(payload.get("content"), bot_user_id)
    if not content:
        return None
    return AnswerTrigger(
        kind=kind,
        guild_id=guild_id,
        channel_id=channel_id,
        message_id=message_id,
        author_id=author_id,
        author_name=_author_name(payload),
        content=content,
        replied_to_bot=replied_to_bot,
    )


def question_text(raw: Any, bot_user_id: str) -> str:
    """A message's content as a question: the bot's mentions removed, cleaned, bounded."""
    if not isinstance(raw, str):
        return ""
    text = raw[:_RAW_CHARS]
    text = re.sub(rf"<@!?{re.escape(bot_user_id)}>", " ", text)
    text = _LEADING_PUNCTUATION.sub("", scrub(text, keep_newlines=True))
    return clip(text, MAX_QUERY_CHARS)


def _written_by_a_person(payload: dict[str, Any], bot_user_id: str) -> bool:
    author = payload.get("author")
    if not isinstance(author, dict) or author.get("id") == bot_user_id:
        return False
    if author.get("bot") is True or author.get("system") is True:
        return False
    if payload.get("webhook_id") is not None:  # a webhook's author is no person
        return False
    kind = payload.get("type", int(MessageType.DEFAULT))
    return type(kind) is int and kind in tuple(MessageType)


def _ids(payload: dict[str, Any]) -> tuple[str | None, str, str, str] | None:
    """(guild, channel, message, author): each a snowflake, the guild None in a DM."""
    guild_id = payload.get("guild_id")
    channel_id, message_id = payload.get("channel_id"), payload.get("id")
    author_id = payload["author"].get("id")
    if guild_id is not None and not _is_snowflake(guild_id):
        return None
    if not (_is_snowflake(channel_id) and _is_snowflake(message_id) and _is_snowflake(author_id)):
        return None
    return guild_id, channel_id, message_id, author_id


def _kind(
    payload: dict[str, Any], bot_user_id: str, *, guild_id: str | None, replied_to_bot: bool
) -> TriggerKind | None:
    if guild_id is None:
        return TriggerKind.DIRECT
    # A reply that pings lists the replied-to author in `mentions` too: a reply to the bot
    # is a reply unless the text itself mentions the bot.
    mentioned = _mentions(payload, bot_user_id)
    written = re.search(rf"<@!?{re.escape(bot_user_id)}>", _raw(payload)) is not None
    if mentioned and (written or not replied_to_bot):
        return TriggerKind.MENTION
    if replied_to_bot:
        return TriggerKind.REPLY
    return None


def _mentions(payload: dict[str, Any], bot_user_id: str) -> bool:
    mentions = payload.get("mentions")
    if not isinstance(mentions, list):
        return False
    return any(isinstance(user, dict) and user.get("id") == bot_user_id for user in mentions)


def _replies_to(payload: dict[str, Any], bot_user_id: str) -> bool:
    reference = payload.get("message_reference")
    referenced = payload.get("referenced_message")
    if not isinstance(reference, dict) or not isinstance(referenced, dict):
        return False  # not a reply, or the message replied to was deleted
    if reference.get("type", MessageReferenceType.DEFAULT) != MessageReferenceType.DEFAULT:
        return False
    author = referenced.get("author")
    return isinstance(author, dict) and author.get("id") == bot_user_id


def _author_name(payload: dict[str, Any]) -> str | None:
    """The name the channel sees: the server nickname, else the global name, else the handle."""
    author = payload["author"]
    member = payload.get("member")
    candidates = (
        member.get("nick") if isinstance(member, dict) else None,
        author.get("global_name"),
        author.get("username"),
    )
    for candidate in candidates:
        if isinstance(candidate, str) and (
            name := clean(candidate[:_RAW_CHARS], _AUTHOR_NAME_CHARS)
        ):
            return name
    return None


def _raw(payload: dict[str, Any]) -> str:
    content = payload.get("content")
    return content[:_RAW_CHARS] if isinstance(content, str) else ""


def _is_snowflake(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and _SNOWFLAKE.fullmatch(value) is not None
