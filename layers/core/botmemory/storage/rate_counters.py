"""The answer rate counters (botmemory.answering.rate): per fixed window, one counter per
channel and one per person under the scope's rate partition (keys.rate_pk), each added to with
one UpdateItem that returns its new value. Part of `MemoryRepository` (see repository.py),
which callers use.
"""

from __future__ import annotations

from typing import Any

from botmemory.storage import keys
from botmemory.storage.items import key
from botmemory.storage.schema import TTL_ATTRIBUTE
from botmemory.storage.table import Table

_COUNT = "hits"


class RateCounterStore(Table):
    def add_to_channel_counter(
        self, scope: str, channel_id: str, window: int, expires_at: int, *, step: int = 1
    ) -> int:
        """Add `step` (-1 takes one back) to the channel's counter of this window; its value
        afterwards. A new counter expires at `expires_at` (epoch seconds)."""
        return self._add(keys.channel_rate_sk(channel_id, window), scope, expires_at, step)

    def add_to_person_counter(self, scope: str, person: str, window: int, expires_at: int) -> int:
        """Add one to the person's counter of this window; its value afterwards. The counter
        carries `person` as `user_id`, so an erasure finds and deletes it with the rest."""
        return self._add(keys.person_rate_sk(person, window), scope, expires_at, 1, person)

    def _add(
        self, sk: str, scope: str, expires_at: int, step: int, user_id: str | None = None
    ) -> int:
        # The first add sets the expiry; later ones keep it (a counter never outlives its window).
        assignments = [f"{TTL_ATTRIBUTE} = if_not_exists({TTL_ATTRIBUTE}, :expires)"]
        values: dict[str, Any] = {":step": {"N": str(step)}, ":expires": {"N": str(expires_at)}}
        if user_id is not None:
            assignments.append("user_id = :user")
            values[":user"] = {"S": user_id}
        response = self._client.update_item(
            TableName=self.table_name,
            Key=key(keys.rate_pk(scope), sk),
            UpdateExpression=f"SET {', '.join(assignments)} ADD #count :step",
            ExpressionAttributeNames={"#count": _COUNT},
            ExpressionAttributeValues=values,
            ReturnValues="UPDATED_NEW",
        )
        return int(response["Attributes"][_COUNT]["N"])
