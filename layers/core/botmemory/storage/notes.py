"""What the table keeps of a server's notes for direct messages (botmemory.memory.notes): one
item under the server's scope partition (keys.NOTES_SK), written by staff. It names no
member and holds no user id (so erasure, which finds a person's items by their id, never
meets it): the text, and when it was written. Part of `MemoryRepository` (see
repository.py), which callers use."""

from __future__ import annotations

from dataclasses import dataclass

from botmemory.storage import keys
from botmemory.storage.items import from_item, key, to_item
from botmemory.storage.table import Table


@dataclass(frozen=True)
class ServerNotes:
    """A server's notes for direct messages, as staff wrote them."""

    scope: str  # the server's scope (its guild id)
    text: str
    updated_ms: int


class NotesRepository(Table):
    def server_notes(self, scopes: list[str]) -> list[ServerNotes]:
        """The notes of these servers that have some, in the order asked (one BatchGetItem
        per 100 servers; recall asks for at most a handful)."""
        wanted = [key(keys.scope_pk(scope), keys.NOTES_SK) for scope in dict.fromkeys(scopes)]
        found: dict[str, ServerNotes] = {}
        for item in self._items_at(wanted) if wanted else []:
            plain = from_item(item)
            scope = str(plain["pk"]).removeprefix(keys.SCOPE_PREFIX)
            text = plain.get("text")
            if isinstance(text, str) and text:
                found[scope] = ServerNotes(scope, text, int(plain.get("updated_ms", 0)))
        return [found[scope] for scope in dict.fromkeys(scopes) if scope in found]

    def put_server_notes(self, notes: ServerNotes) -> None:
        """Write a server's notes, replacing what it had."""
        values = {
            "pk": keys.scope_pk(notes.scope),
            "sk": keys.NOTES_SK,
            "text": notes.text,
            "updated_ms": notes.updated_ms,
        }
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def clear_server_notes(self, scope: str) -> bool:
        """Delete a server's notes; True when there were some."""
        response = self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.scope_pk(scope), keys.NOTES_SK),
            ReturnValues="ALL_OLD",
        )
        return bool(response.get("Attributes"))
