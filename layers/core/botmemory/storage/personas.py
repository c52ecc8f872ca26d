"""What the table keeps of personas (botmemory.memory.personas): a server's personas under its scope
partition, and, in each persona's scope, a marker per person it keeps memories of (so a purge
finds them without a scan). Part of `MemoryRepository` (see repository.py), which callers use.

A purge (`purge_persona`) deletes a removed persona's whole scope, in an order that a purge
cut short can simply run again: its own knowledge, then each marked person's partition, then
the scope's partition (history entries, ACTED# pointers) but the markers, then the markers,
then the persona item, only if it is still that removed persona.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from botmemory.records import Persona
from botmemory.storage import keys
from botmemory.storage.items import from_item, key, to_item
from botmemory.storage.table import BATCH_WRITE_LIMIT, Table, error_code

PERSONA_MEMBER_PREFIX = "MEMBER#"


class PersonaConflict(Exception):
    """The persona changed since it was read: nothing was written."""


@dataclass(frozen=True)
class PersonaPurge:
    """What a purge deleted."""

    knowledge: int  # facts of the persona's own (keys.PERSONA_SUBJECT)
    facts: int  # what it knew of people (persona_user facts)
    people: int  # the people it kept memories of (its member markers)
    history: int  # history entries of those facts
    other: int  # forget tombstones, ACTED# pointers, markers and the like
    persona_deleted: bool  # False: the id was set again meanwhile, the new persona stays

    def summary(self) -> str:
        return (
            f"{self.knowledge} facts of its own, {self.facts} facts about {self.people} people, "
            f"{self.history} history entries and {self.other} other records"
        )


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
        assert persona.guild_id is not None  # nosec B101 # narrows the type for mypy; never guards input; the deployment's live in SSM, not here
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

    def delete_persona_item(
        self, guild_id: str, persona_id: str, *, removed_lineage: str | None = None
    ) -> bool:
        """Delete a server's persona item; with `removed_lineage`, only while it is that
        lineage's and removed (False otherwise: nothing was deleted)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": key(keys.scope_pk(guild_id), keys.persona_sk(persona_id)),
        }
        if removed_lineage is not None:
            request["ConditionExpression"] = (
                "lineage_id = :lineage AND attribute_exists(removed_ms)"
            )
            request["ExpressionAttributeValues"] = {":lineage": {"S": removed_lineage}}
        try:
            self._client.delete_item(**request)
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def persona_holds_memories(self, guild_id: str, lineage_id: str) -> bool:
        """Whether anything is kept in a persona's scope: its knowledge, or anything in the
        scope's partition (markers of people it knows, history). Two one-item Queries."""
        scope = keys.persona_scope(guild_id, lineage_id)
        return any(
            self._client.query(
                TableName=self.table_name,
                KeyConditionExpression="pk = :pk",
                ExpressionAttributeValues={":pk": {"S": pk}},
                ProjectionExpression="pk",
                Limit=1,
            )["Items"]
            for pk in (keys.user_pk(scope, keys.PERSONA_SUBJECT), keys.scope_pk(scope))
        )

    def persona_members(self, guild_id: str, lineage_id: str) -> list[str]:
        """The people a persona keeps memories of, by their markers (paged)."""
        scope_pk = keys.scope_pk(keys.persona_scope(guild_id, lineage_id))
        return [
            str(item["sk"]).removeprefix(PERSONA_MEMBER_PREFIX)
            for item in self._items_under(scope_pk, PERSONA_MEMBER_PREFIX)
        ]

    def purge_persona(self, persona: Persona) -> PersonaPurge:
        """Delete everything in a removed server persona's scope, then the persona item (only
        if it is still this removed persona). Idempotent: run again, it finishes the rest."""
        assert persona.guild_id is not None and not persona.active  # nosec B101 # narrows the type for mypy; the caller picked this persona so
        scope = keys.persona_scope(persona.guild_id, persona.lineage_id)
        knowledge = self._delete_partition(keys.user_pk(scope, keys.PERSONA_SUBJECT))
        members = self.persona_members(persona.guild_id, persona.lineage_id)
        about_people: Counter[keys.ItemKind] = Counter()
        for member in members:
            about_people += self._delete_partition(keys.user_pk(scope, member))
        # The markers go last: a purge cut short still finds the people they name.
        records = self._delete_partition(keys.scope_pk(scope), keep=PERSONA_MEMBER_PREFIX)
        markers = self._delete_partition(keys.scope_pk(scope), PERSONA_MEMBER_PREFIX)
        deleted = self.delete_persona_item(
            persona.guild_id, persona.persona_id, removed_lineage=persona.lineage_id
        )
        counted = knowledge[keys.ItemKind.FACT] + about_people[keys.ItemKind.FACT]
        counted += records[keys.ItemKind.HISTORY]
        everything = knowledge + about_people + records + markers
        return PersonaPurge(
            knowledge=knowledge[keys.ItemKind.FACT],
            facts=about_people[keys.ItemKind.FACT],
            people=len(members),
            history=records[keys.ItemKind.HISTORY],
            other=sum(everything.values()) - counted,
            persona_deleted=deleted,
        )

    def _delete_partition(
        self, pk: str, prefix: str = "", *, keep: str | None = None
    ) -> Counter[keys.ItemKind]:
        """Delete a partition's items (those whose sort key starts with `prefix`, but those
        starting with `keep`), page by page, 25 per batch; how many of each kind."""
        deleted: Counter[keys.ItemKind] = Counter()
        batch: list[dict[str, Any]] = []
        for item in self._items_under(pk, prefix):
            sk = str(item["sk"])
            if keep is not None and sk.startswith(keep):
                continue
            deleted[keys.kind_of(sk)] += 1
            batch.append(key(pk, sk))
            if len(batch) == BATCH_WRITE_LIMIT:
                self._delete_keys(batch)
                batch = []
        if batch:
            self._delete_keys(batch)
        return deleted
