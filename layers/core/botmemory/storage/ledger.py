"""The erasure ledger: who erased their memory and when, by keyed person hash only
(keys.LEDGER_PK). Unlike the erasure marker (ERASED, which expires once the erasure has
settled) it is kept for good: reading the past again through Discord's REST API (catching
up on a gap, a backfill) checks it, so nothing a person erased is imported back.
"""

from __future__ import annotations

from collections.abc import Iterable

from botocore.exceptions import ClientError

from botmemory.storage import keys
from botmemory.storage.items import key
from botmemory.storage.table import Table, error_code


class LedgerStore(Table):
    def record_erased(self, user_hash: str, now_ms: int) -> None:
        """The person erased their memory at `now_ms` (the latest erasure wins)."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.LEDGER_PK, keys.ledger_person_sk(user_hash)),
                UpdateExpression="SET erased_ms = :now",
                ConditionExpression="attribute_not_exists(erased_ms) OR erased_ms < :now",
                ExpressionAttributeValues={":now": {"N": str(now_ms)}},
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise

    def erased_at(self, user_hashes: Iterable[str]) -> dict[str, int]:
        """Of these person hashes, the ones in the ledger, with when they last erased."""
        wanted = [key(keys.LEDGER_PK, keys.ledger_person_sk(h)) for h in dict.fromkeys(user_hashes)]
        found = self._items_at(wanted, "sk, erased_ms")
        prefix = keys.LEDGER_PERSON_PREFIX
        return {
            item["sk"]["S"].removeprefix(prefix): int(item["erased_ms"]["N"])
            for item in found
            if "erased_ms" in item
        }
