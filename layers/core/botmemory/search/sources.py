"""What the table still holds of the items search passages copy: read back strongly
consistent before a passage is kept in the index (botmemory.search.index_sync) or shown by
recall (botmemory.recall.search_leg), through the repository's table.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botmemory.records import ChannelSummary, Episode, Fact, Observation, Record
from botmemory.search.passages import source_keys
from botmemory.search.port import Passage, PassageKind
from botmemory.storage import keys
from botmemory.storage.items import from_item, key
from botmemory.storage.observations import deleted, deletion_keys
from botmemory.storage.table import BATCH_GET_LIMIT, Table

# BatchGetItems of one read-back sent side by side: recall's search leg waits for one round
# trip, not one per 100 keys (on the deployed path the embedding and QueryVectors precede it).
READ_SIDE_BY_SIDE = 4


def passage_sources(table: Table, passages: Iterable[Passage]) -> dict[str, list[Record]]:
    """Each passage's source items that the table still holds, in its sources' order,
    read strongly consistent in one BatchGetItem per 100 keys. A message whose delete
    was observed counts as gone, whether or not that delete was consolidated yet."""
    ordered = list(passages)
    wanted: set[tuple[str, str]] = set()
    for passage in ordered:
        wanted.update(source_keys(passage))
        wanted.update(_deletion_keys(passage))
    found: dict[tuple[str, str], Record] = {}
    for item in _items_side_by_side(table, [key(pk, sk) for pk, sk in sorted(wanted)]):
        plain = from_item(item)
        record = _source_record(plain)
        if record is not None:
            found[(plain["pk"], plain["sk"])] = record
    return {
        p.id: [found[k] for k in source_keys(p) if k in found and not deleted(k, found)]
        for p in ordered
    }


def _items_side_by_side(table: Table, wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items at these keys, each BatchGetItem's share of them read at the same time."""
    chunks = [wanted[i : i + BATCH_GET_LIMIT] for i in range(0, len(wanted), BATCH_GET_LIMIT)]
    if len(chunks) <= 1:
        return table._items_at(wanted)
    with ThreadPoolExecutor(max_workers=min(len(chunks), READ_SIDE_BY_SIDE)) as pool:
        return [item for part in pool.map(table._items_at, chunks) for item in part]


def _deletion_keys(passage: Passage) -> list[tuple[str, str]]:
    """Where the deletes of a message passage's messages would be recorded."""
    if passage.kind != PassageKind.MESSAGE:
        return []
    return deletion_keys(source_keys(passage))


def _source_record(plain: dict[str, Any]) -> Record | None:
    """A search source item as its record: an observation, a fact, an episode or an
    archived channel summary."""
    kind = keys.kind_of(plain["sk"])
    if kind == keys.ItemKind.OBSERVATION:
        return Observation.model_validate(plain)
    if kind == keys.ItemKind.FACT:
        return Fact.model_validate(plain)
    if kind == keys.ItemKind.EPISODE:
        return Episode.model_validate(plain)
    if kind == keys.ItemKind.SUMMARY_ARCHIVE:
        return ChannelSummary.model_validate(plain)
    return None
