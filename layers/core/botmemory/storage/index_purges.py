"""The marker a purge of a server's search index leaves (botmemory.search.shards): one item
under the server's scope partition (keys.INDEX_PURGED_SK) that names nobody, living until
every write that began before the purge has ended. Part of `MemoryRepository` (see
repository.py), which callers use."""

from __future__ import annotations

from botmemory.clock import epoch_seconds, ttl_alive
from botmemory.storage import keys
from botmemory.storage.items import from_item, key, to_item
from botmemory.storage.table import Table


class IndexPurgeStore(Table):
    def mark_index_purged(self, scope: str, now_ms: int, until_ms: int) -> None:
        """Record that the server's index is being purged, until `until_ms`."""
        values = {
            "pk": keys.scope_pk(scope),
            "sk": keys.INDEX_PURGED_SK,
            "purged_ms": now_ms,
            "expires_at": epoch_seconds(until_ms),
        }
        self._client.put_item(TableName=self.table_name, Item=to_item(values))

    def index_purged(self, scope: str, now_ms: int) -> bool:
        """Whether the server's index was purged and its marker still lives (read strongly
        consistent: the write racing the purge must see it)."""
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.scope_pk(scope), keys.INDEX_PURGED_SK),
            ConsistentRead=True,
        )
        item = from_item(response.get("Item") or {})
        if not item:
            return False
        expires_at = item.get("expires_at")
        return ttl_alive(int(expires_at) if expires_at is not None else None, now_ms)
