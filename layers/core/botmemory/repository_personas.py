"""What the table keeps of personas (botmemory.personas): a server's personas under its scope
partition, and, in each persona's scope, a marker per person it keeps memories of (so a purge
finds them without a scan). Part of `MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from botmemory import keys
from botmemory.items import from_item, key, to_item
from botmemory.records import Persona
from botmemory.table import Table, error_code

PERSONA_MEMBER_PREFIX = "MEMBER#"


class PersonaConflict(Exception):
    """The persona changed since it was read: nothing was written."""


class PersonaRepository(Table):
    def personas_of(self, guild_id: str) -> list[Persona]:
        """The server's personas, removed ones included, by id (one Query)."""
        return [
            Persona.model_validate(item)
            for item in self._items_under(keys.scope_pk(guild_id), keys.PERSONA_PREFIX)
        ]

    def put_persona(self, persona: Persona, *, replaces_ms: int | None) -> None:
        """Write a server's persona: a new one only if its id is free (or held by a removed
        persona), a change only if it is still as read (`replaces_ms`, its `updated_ms`)."""
        assert persona.guild_id is not None  # the deployment's live in SSM, not here
        values: dict[str, Any] = persona.model_dump(mode="json")
        values.update(pk=keys.scope_pk(persona.guild_id), sk=keys.persona_sk(persona.persona_id))
        # A live persona has no removed_ms (None is not stored).
        request: dict[str, Any] = {"TableName": self.table_name, "Item": to_item(values)}
        if replaces_ms is None:
            request["ConditionExpression"] = (
                "attribute_not_exists(pk) OR attribute_exists(removed_ms)"
            )
        else:
            request["ConditionExpression"] = (
                "updated_ms = :seen AND attribute_not_exists(removed_ms)"
            )
            request["ExpressionAttributeValues"] = {":seen": {"N": str(replaces_ms)}}
        try:
            self._client.put_item(**request)
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                raise PersonaConflict(persona.persona_id) from exc
            raise

    def persona_item(self, guild_id: str, persona_id: str) -> Persona | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.scope_pk(guild_id), keys.persona_sk(persona_id)),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return Persona.model_validate(from_item(item)) if item else None

    def delete_persona_item(self, guild_id: str, persona_id: str) -> None:
        self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.scope_pk(guild_id), keys.persona_sk(persona_id)),
        )
