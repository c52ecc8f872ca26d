"""When the memory model last answered a round, deployment-wide: one item (keys.MODEL_HEALTH_PK)
that names no one. A failed round reads it to tell an outage (the model answers nobody) from
a batch that fails alone (botmemory.consolidation.attempts). Part of `MemoryRepository` (see
repository.py), which callers use."""

from __future__ import annotations

from botocore.exceptions import ClientError

from botmemory.storage import keys
from botmemory.storage.items import key
from botmemory.storage.table import Table, error_code


class ModelHealthStore(Table):
    def record_model_answer(self, now_ms: int) -> None:
        """The model answered a round at `now_ms`; the item only moves forward, so a late
        writer never hides a newer answer."""
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=key(keys.MODEL_HEALTH_PK, keys.MODEL_HEALTH_SK),
                UpdateExpression="SET answered_ms = :now",
                ConditionExpression="attribute_not_exists(answered_ms) OR answered_ms < :now",
                ExpressionAttributeValues={":now": {"N": str(now_ms)}},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise

    def model_answered_after(self, since_ms: int) -> bool:
        """Whether the model answered any round after `since_ms` (read strongly consistent)."""
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.MODEL_HEALTH_PK, keys.MODEL_HEALTH_SK),
            ConsistentRead=True,
        )
        answered = (response.get("Item") or {}).get("answered_ms", {}).get("N")
        return answered is not None and int(answered) > since_ms
