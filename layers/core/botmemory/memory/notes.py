"""Notes for direct messages: curated text the bot keeps in mind when a member writes to it
privately, like DiscoClaw's workspace notes.

Two sources, both about no member:
- the deployment's, from ops: one SSM parameter (DM_NOTES_PARAMETER, String or
  SecureString), read through Powertools Parameters and its cache;
- each server's, from its staff (`/memory-staff notes set|show|clear`), one item per
  server (botmemory.storage.notes), at most MAX_SERVER_NOTES_CHARS.

Recall loads them in a direct message only, never in a server's channel: the deployment's,
then those of the member's servers its DM recall already covers (their profiles, at most
recaller.MAX_SERVERS_IN_DM), within their own budget (MEMORY_RECALL_NOTES_CHARS). A note
longer than that is cut to it, and the cut logged once per load of the parameter. In the
block they are quoted as data like every stored text (botmemory.recall.assemble).

They are not about a member, so erasure never touches them; staff cannot write one that
names a member (commands/context.py `refuse_naming_members`, the rule persona knowledge
follows). Ops own what the parameter says.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from botmemory.settings.config import Settings
from botmemory.storage.notes import ServerNotes
from botmemory.storage.repository import MemoryRepository
from botmemory.text import scrub

log = logging.getLogger(__name__)

# What staff may store for one server: a few paragraphs, inside one command option.
MAX_SERVER_NOTES_CHARS = 1500
# The deployment's notes are read through Powertools Parameters and cached this long.
PARAMETER_MAX_AGE_SECONDS = 300

OpsSource = Callable[[], str | None]


@dataclass(frozen=True)
class Note:
    """One source's notes as recall shows them: `guild_id` None for the deployment's."""

    text: str
    guild_id: str | None = None


def parameter_source(settings: Settings) -> OpsSource:
    """The deployment's notes, read from DM_NOTES_PARAMETER (cached, decrypted when a
    SecureString); None when unset, missing or unreadable (logged: a direct message is
    still answered)."""
    name = settings.dm_notes_parameter
    if not name:
        return lambda: None

    def from_parameter() -> str | None:
        from aws_lambda_powertools.utilities import parameters

        try:
            value = parameters.get_parameter(name, decrypt=True, max_age=PARAMETER_MAX_AGE_SECONDS)
        except Exception as error:  # answering goes on without the deployment's notes
            log.warning("dm notes not read", extra={"error": repr(error)[:300]})
            return None
        return str(value) if value else None

    return from_parameter


class DmNotes:
    """The notes a direct message's recall shows: the deployment's, then its servers'."""

    def __init__(
        self, repository: MemoryRepository, settings: Settings, ops: OpsSource | None = None
    ) -> None:
        self._repository = repository
        self._budget = settings.recall_notes_chars
        self._ops = ops or parameter_source(settings)
        # The last value the parameter held and its cut: a new value (a load that changed
        # it) is cut, and logged, once; the cache itself is Powertools'.
        self._lock = threading.Lock()
        self._last: tuple[str, str] | None = None

    @property
    def enabled(self) -> bool:
        return self._budget > 0

    def deployment(self) -> Note | None:
        """The deployment's notes, cut to the budget."""
        if not self.enabled:
            return None
        raw = self._ops()
        if not raw:
            return None
        with self._lock:
            if self._last is None or self._last[0] != raw:  # same object: no compare
                self._last = (raw, self._cut(raw))
            text = self._last[1]
        return Note(text) if text else None

    def of_servers(self, scopes: list[str]) -> list[Note]:
        """The notes of these servers (the member's, in the order recall read them)."""
        if not self.enabled or not scopes:
            return []
        return [_server_note(n) for n in self._repository.server_notes(scopes)]

    def _cut(self, raw: str) -> str:
        text = scrub(raw, keep_newlines=True)
        if len(text) <= self._budget:
            return text
        log.warning(
            "dm notes over their budget: cut",
            extra={"chars": len(raw), "budget": self._budget},
        )
        return text[: self._budget]


def _server_note(notes: ServerNotes) -> Note:
    return Note(notes.text, guild_id=notes.scope)
