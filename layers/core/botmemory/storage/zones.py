"""What the table keeps of a server's time zone (`/memory-staff timezone`, botmemory.when):
one item under the server's scope partition (keys.ZONE_SK), about no member, holding the
IANA name staff chose. Part of `MemoryRepository` (see repository.py), which callers use."""

from __future__ import annotations

from botmemory.storage import keys
from botmemory.storage.items import from_item, key, to_item
from botmemory.storage.table import Table


class ZoneStore(Table):
    def server_zone(self, scope: str) -> str | None:
        """The zone a server's staff chose; None when none (UTC then). Direct messages
        (scope `dm`) have none."""
        response = self._client.get_item(
            TableName=self.table_name, Key=key(keys.scope_pk(scope), keys.ZONE_SK)
        )
        item = response.get("Item")
        zone = from_item(item).get("zone") if item else None
        return zone if isinstance(zone, str) and zone else None

    def put_server_zone(self, scope: str, zone: str, now_ms: int) -> None:
        """Write a server's zone (a name botmemory.when.zones accepted), replacing any."""
        values = {
            "pk": keys.scope_pk(scope),
            "sk": keys.ZONE_SK,
            "zone": zone,
            "updated_ms": now_ms,
        }
        self._client.put_item(TableName=self.table_name, Item=to_item(values))
