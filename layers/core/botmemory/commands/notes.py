"""The notes commands (`/memory-staff notes set | show | clear`): a server's notes for direct
messages (botmemory.memory.notes), which staff write and the bot keeps in mind when a member
of the server writes to it privately; and the line `/memory show` adds about them in a DM."""

from __future__ import annotations

import logging
from typing import Any

from botmemory.clock import moment
from botmemory.commands import specs as spec
from botmemory.commands.context import CommandContext
from botmemory.commands.invocation import CommandError, Invocation, ephemeral_reply
from botmemory.commands.listing import shown
from botmemory.memory.notes import MAX_SERVER_NOTES_CHARS
from botmemory.recall.recaller import MAX_SERVERS_IN_DM
from botmemory.services import MemoryServices
from botmemory.storage.notes import ServerNotes

log = logging.getLogger(__name__)


class NotesCommands:
    """Staff's notes for direct messages: set, shown, cleared."""

    def __init__(self, context: CommandContext) -> None:
        self._context = context
        self._services = context.services

    def set_notes(self, invocation: Invocation) -> dict[str, Any]:
        """Write the server's notes (replacing them): plain text about no member."""
        _guild_of(invocation)
        text = self._context.checked_text(
            invocation.text(spec.OPTION_TEXT), limit=MAX_SERVER_NOTES_CHARS
        )
        self._context.refuse_naming_members(
            invocation,
            text,
            whose="Notes for direct messages are",
            learned="what the bot knows of a person, it learns from them",
        )
        now = self._services.clock.now_ms()
        self._services.repository.put_server_notes(ServerNotes(invocation.scope, text, now))
        log.info(
            "dm notes set",
            extra={"guild_id": invocation.guild_id, "staff_id": invocation.user_id},
        )
        return ephemeral_reply(
            f"Saved this server's notes for direct messages ({len(text):,} characters): the bot "
            f"keeps them in mind when a member of this server writes to it privately. "
            f"{shown(text)}"
        )

    def show_notes(self, invocation: Invocation) -> dict[str, Any]:
        _guild_of(invocation)
        kept = self._services.repository.server_notes([invocation.scope])
        if not kept:
            return ephemeral_reply(
                "This server keeps no notes for direct messages. `/memory-staff notes set` "
                "writes them."
            )
        notes = kept[0]
        return ephemeral_reply(
            f"This server's notes for direct messages (written {moment(notes.updated_ms)}):\n"
            f"{shown(notes.text)}"
        )

    def clear_notes(self, invocation: Invocation) -> dict[str, Any]:
        _guild_of(invocation)
        if not self._services.repository.clear_server_notes(invocation.scope):
            return ephemeral_reply("This server had no notes for direct messages.")
        log.info(
            "dm notes cleared",
            extra={"guild_id": invocation.guild_id, "staff_id": invocation.user_id},
        )
        return ephemeral_reply("This server's notes for direct messages are deleted.")


def dm_notes_line(services: MemoryServices, user_id: str) -> str | None:
    """What `/memory show` says of the notes in a direct message: that they exist and whose
    they are, not their text (they are about no one: not the member's to review, and they
    would crowd out the member's own data in one message). None: no notes here."""
    settings = services.settings
    if settings.recall_notes_chars <= 0:
        return None
    servers = services.repository.servers_of(user_id, MAX_SERVERS_IN_DM)
    kept = services.repository.server_notes(servers)
    whose = ["the bot's operators"] if settings.dm_notes_parameter else []
    if kept:
        count = f"{len(kept)} of your servers" if len(kept) > 1 else "one of your servers"
        whose.append(f"the staff of {count}")
    if not whose:
        return None
    return (
        f"Here I also keep in mind notes from {' and '.join(whose)}. They are about no one, "
        "not about you, so they are not listed here and `/forgetme` leaves them."
    )


def _guild_of(invocation: Invocation) -> str:
    if invocation.guild_id is None:  # staff commands are for servers (`is_staff`)
        raise CommandError("This command works in a server only.")
    return invocation.guild_id
