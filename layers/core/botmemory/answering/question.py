"""What an answer is asked and where it goes: the types the answer-event parser
(answering.requests) and the answerer share, below both."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Question:
    """What to answer: a message that mentions or replies to the bot, a DM, or /ask."""

    guild_id: str | None
    channel_id: str
    author_id: str
    author_name: str | None
    content: str
    message_id: str | None = None  # None for /ask: there is no message to reply to
    # /ask: from the interaction's permissions; a message: from its stored roles and the
    # guild's staff record (`asker_is_staff`); None: not known.
    staff: bool | None = None


@dataclass(frozen=True)
class Reply:
    """Where an answer goes: a reply to the message, or the edit of a deferred /ask."""

    interaction: dict[str, Any] | None = None  # /ask: id, token, application_id
