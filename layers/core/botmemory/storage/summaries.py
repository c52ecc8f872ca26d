"""The archived channel summaries a deleted message takes with it (botmemory.consolidation.summary).
Part of `MemoryRepository` (see repository.py), which callers use.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botmemory.clock import DAY_MS
from botmemory.storage import keys
from botmemory.storage.items import from_item, key
from botmemory.storage.table import Table

# An archive is written after the words it covers were said: its key's time (when it was
# archived) is never earlier than its stretch's end, give or take how far in the future ingest
# lets a message's time be (minutes, botmemory.ingest.observe). A day's margin makes that generous.
ARCHIVE_TIME_MARGIN_MS = DAY_MS


class SummaryRepository(Table):
    def summary_archives_covering(self, channel_id: str, times_ms: Sequence[int]) -> list[str]:
        """Sort keys of the channel's archived summaries whose stretch holds any of these
        times: only archives made since the earliest of them can (one key range, strongly
        consistent, page by page, reading the stretch alone)."""
        if not times_ms:
            return []
        since = max(0, min(times_ms) - ARCHIVE_TIME_MARGIN_MS)
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :since AND :until",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":since": {"S": keys.summary_archive_sk(since, "")},
                ":until": {"S": keys.SUMMARY_ARCHIVE_PREFIX + "~"},
            },
            "ProjectionExpression": "sk, start_ms, end_ms",
            "ConsistentRead": True,
        }
        covering: list[str] = []
        for item in self._query_all(request):
            plain = from_item(item)
            start, end = plain.get("start_ms"), plain.get("end_ms")
            if not isinstance(start, int) or not isinstance(end, int):
                covering.append(plain["sk"])  # no readable stretch: it may hold anything
            elif any(start <= t <= end for t in times_ms):
                covering.append(plain["sk"])
        return covering

    def delete_summary_archives(self, channel_id: str, sks: Sequence[str]) -> int:
        """Delete these archived summaries (batched, idempotent); the table's stream takes
        their passages out of the search index."""
        pk = keys.channel_pk(channel_id)
        return self._delete_keys([key(pk, sk) for sk in sks])
