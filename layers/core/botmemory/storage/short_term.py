"""What the table keeps of short-term cross-channel memory (botmemory.memory.short_term): one item per
person and scope, with one attribute per public channel they spoke in lately, so recall reads
everyone's in one BatchGetItem and a round updates one attribute without reading. Part of
`MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

from botmemory.records import ShortTermEntry
from botmemory.storage import keys
from botmemory.storage.items import from_item, key, short_term_entries_of, to_item
from botmemory.storage.table import Table, error_code


class ShortTermRepository(Table):
    def record_short_term(self, entry: ShortTermEntry, keep: int) -> bool:
        """Write (or rewrite) a person's entry for one channel unless the one stored there is
        newer (a round and an answer may write it in either order), then drop their oldest
        beyond `keep`. One UpdateItem; a second only when some must go. False when a newer
        entry stood."""
        name = keys.short_term_attribute(entry.channel_id)
        value = entry.model_dump(
            mode="json",
            include={"observation_sks", "messages", "at_ms", "expires_at", "summary", "digest"},
        )
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.user_pk(entry.scope, entry.user_id), keys.SHORT_TERM_SK),
                UpdateExpression=(
                    "SET #entry = :entry, user_id = :user, #scope = :scope, expires_at = :expires"
                ),
                ConditionExpression="attribute_not_exists(#entry) OR #entry.at_ms <= :at",
                ExpressionAttributeNames={"#entry": name, "#scope": "scope"},
                ExpressionAttributeValues=to_item(
                    {
                        ":entry": value,
                        ":user": entry.user_id,
                        ":scope": entry.scope,
                        ":expires": entry.expires_at,
                        ":at": entry.at_ms,
                    }
                ),
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return False
        beyond = short_term_entries_of(from_item(response["Attributes"]))[keep:]
        if beyond:
            self._drop_entries(entry.scope, entry.user_id, beyond)
        return True

    def _drop_entries(self, scope: str, user_id: str, entries: list[ShortTermEntry]) -> None:
        """Remove these entries unless a round rewrote one meanwhile (then the next trims)."""
        names = {f"#e{n}": keys.short_term_attribute(e.channel_id) for n, e in enumerate(entries)}
        values = {f":at{n}": {"N": str(e.at_ms)} for n, e in enumerate(entries)}
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.user_pk(scope, user_id), keys.SHORT_TERM_SK),
                UpdateExpression="REMOVE " + ", ".join(names),
                ConditionExpression=" AND ".join(
                    f"#e{n}.at_ms = :at{n}" for n in range(len(entries))
                ),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def short_term_of(self, scope: str, people: Iterable[str]) -> dict[str, list[ShortTermEntry]]:
        """Each person's entries in a scope, newest first (expired ones too: TTL is lazy), in
        one strongly consistent BatchGetItem per 100 people."""
        wanted = [key(keys.user_pk(scope, p), keys.SHORT_TERM_SK) for p in dict.fromkeys(people)]
        found: dict[str, list[ShortTermEntry]] = {}
        for item in self._items_at(wanted):
            plain: dict[str, Any] = from_item(item)
            found[plain["user_id"]] = short_term_entries_of(plain)
        return found
