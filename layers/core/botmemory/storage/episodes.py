"""What the table keeps of a channel's past: its episodes, the rolling channel summary and
the summaries it replaced, the quarantined batches, and the earlier bot's legacy memory.
Part of `MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botmemory.records import ChannelSummary, Episode, Quarantine
from botmemory.storage import keys
from botmemory.storage.commit import MAX_TRANSACTION_ACTIONS
from botmemory.storage.items import (
    episode_key,
    episode_values,
    from_item,
    key,
    state_key,
    to_item,
)
from botmemory.storage.table import Table


class EpisodeStore(Table):
    # Episodes -----------------------------------------------------------------------

    def recent_episodes(self, channel_id: str, limit: int) -> list[Episode]:
        """The channel's newest episodes, newest first."""
        items = self._newest_under(keys.channel_pk(channel_id), keys.EPISODE_PREFIX, limit)
        return [Episode.model_validate(i) for i in items]

    # The rolling channel summary (botmemory.consolidation.summary) -----------------

    def channel_summary(
        self, channel_id: str, *, consistent: bool = False
    ) -> ChannelSummary | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=key(keys.channel_pk(channel_id), keys.SUMMARY_SK),
            ConsistentRead=consistent,
        )
        item = response.get("Item")
        return ChannelSummary.model_validate(from_item(item)) if item else None

    def summary_archives(self, channel_id: str, limit: int) -> list[ChannelSummary]:
        """The summaries the channel's rolling summary replaced, newest first."""
        pk = keys.channel_pk(channel_id)
        items = self._newest_under(pk, keys.SUMMARY_ARCHIVE_PREFIX, limit)
        return [ChannelSummary.model_validate(i) for i in items]

    def clear_channel_summary(self, channel_id: str) -> bool:
        """Delete the channel's rolling summary (its archives stay until they expire); the
        next round starts a new one. True when there was one."""
        response = self._client.delete_item(
            TableName=self.table_name,
            Key=key(keys.channel_pk(channel_id), keys.SUMMARY_SK),
            ReturnValues="ALL_OLD",
        )
        return bool(response.get("Attributes"))

    # Quarantine ---------------------------------------------------------------------

    def quarantined(self, channel_id: str, limit: int = 25) -> list[Quarantine]:
        """The channel's quarantined batches (consumed without facts after failing even
        alone), newest first, for staff. TTL deletes them lazily: filter with `ttl_alive`."""
        items = self._newest_under(keys.channel_pk(channel_id), keys.QUARANTINE_PREFIX, limit)
        return [Quarantine.model_validate(i) for i in items]

    # Legacy memory (migration) ------------------------------------------------------
    # The earlier bot's one memory string per channel lives on as the STATE item's
    # `legacy_memory` (recall with memory off) and as one episode marked `legacy`
    # (recall with memory on). See botmemory.ops.migrate.

    def legacy_memory(self, channel_id: str) -> str | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key=state_key(channel_id),
            ProjectionExpression="legacy_memory",
        )
        item = response.get("Item")
        return item["legacy_memory"]["S"] if item and "legacy_memory" in item else None

    def legacy_episodes(self, channel_id: str) -> list[Episode]:
        """The channel's episodes migrated from the earlier bot, oldest first.

        Read strongly consistent, so a migration re-run right after a write sees it.
        """
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :ep)",
            "FilterExpression": "legacy = :yes",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":ep": {"S": keys.EPISODE_PREFIX},
                ":yes": {"BOOL": True},
            },
            "ConsistentRead": True,
        }
        return [Episode.model_validate(from_item(i)) for i in self._query_all(request)]

    def save_legacy_memory(
        self,
        channel_id: str,
        *,
        text: str | None = None,
        episode: Episode | None = None,
        replaced: Sequence[Episode] = (),
        scope: str | None = None,
    ) -> None:
        """Set the legacy memory string, write the legacy episode and delete the legacy
        episodes it replaces, in one transaction, so a failed run leaves the channel as it was.

        Only `legacy_memory` is SET on the STATE item: the lock and the sweep marker
        stay untouched. `scope` is stored on the episode only when known.
        """
        table = self.table_name
        actions: list[dict[str, Any]] = []
        if text is not None:
            actions.append(
                {
                    "Update": {
                        "TableName": table,
                        "Key": state_key(channel_id),
                        "UpdateExpression": "SET legacy_memory = :text",
                        "ExpressionAttributeValues": {":text": {"S": text}},
                    }
                }
            )
        if episode is not None:
            values = episode_values(episode, scope or "")
            if scope is None:
                del values["scope"]
            values["legacy"] = True
            actions.append(
                {
                    "Put": {
                        "TableName": table,
                        "Item": to_item(values),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        stale = [episode_key(old) for old in replaced]
        room = MAX_TRANSACTION_ACTIONS - len(actions)
        actions += [{"Delete": {"TableName": table, "Key": key}} for key in stale[:room]]
        if actions:
            self._transact(actions)
        if stale[room:]:  # only after a pathological pile-up of legacy episodes
            self._delete_keys(stale[room:])
