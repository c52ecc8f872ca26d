"""What search reads back of the table (botmemory.search.sources): a message whose delete was
observed counts as gone before that delete is consolidated, both when a round's passages are
written (the index writer withdraws them) and when recall checks a hit. And storage, below
search, imports nothing of consolidation, search or recall."""

from __future__ import annotations

import ast
import threading
from pathlib import Path
from typing import Any

import pytest

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.recall.recaller import respond
from botmemory.records import Observation
from botmemory.search.passages import message_passages, source_keys
from botmemory.search.sources import passage_sources
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.services import MemoryServices
from botmemory.storage import keys
from botmemory.storage.items import observation_values
from botmemory.storage.observations import deletion_keys
from botmemory.storage.table import BATCH_GET_LIMIT, Table
from localrun.storage import put_items
from scripts.make_events import snowflake
from tests.conftest import START_MS

GUILD = "1100000000000000001"
CHANNEL = "1200000000000000001"
ALICE, BOB = "1300000000000000001", "1300000000000000002"
_sequence = iter(range(1, 4096))
STORAGE = Path(__file__).resolve().parents[3] / "layers" / "core" / "botmemory" / "storage"


def said(author: str, content: str, at_ms: int) -> Observation:
    message_id = snowflake(at_ms, next(_sequence))  # Discord ids carry their time
    return Observation(
        channel_id=CHANNEL,
        scope=GUILD,
        sk=keys.observation_sk(at_ms, "msg", message_id),
        kind="msg",
        at_ms=at_ms,
        author_id=author,
        author_name="Alice" if author == ALICE else "Bob",
        message_id=message_id,
        content=content,
        expires_at=epoch_seconds(at_ms + 30 * DAY_MS),
    )


def chat() -> list[Observation]:
    return [
        said(ALICE, "I signed up for a pottery class at the community centre in 2022.", START_MS),
        said(
            BOB,
            "My sister went to Lisbon for her honeymoon last spring and came back with a suitcase "
            "full of tiles, sardine tins and a very sunburnt husband.",
            START_MS + 1,
        ),
    ]


@pytest.fixture
def services(searching: MemoryServices) -> MemoryServices:
    """Here every service runs with the search index (conftest's `searching`)."""
    return searching


def observe_delete(services: MemoryServices, message: Observation) -> None:
    """The message's delete, as ingest stores it: pending, not consolidated yet."""
    event = {
        "t": "MESSAGE_DELETE",
        "d": {"id": message.message_id, "channel_id": CHANNEL, "guild_id": GUILD},
    }
    assert services.recorder.record([event]).stored == 1


def pottery_passages(index: SqliteSearchIndex) -> list[str]:
    return [p.id for p in index.passages() if "pottery" in p.text]


def test_a_passage_whose_message_delete_is_observed_meanwhile_is_withdrawn_by_the_write(
    services: MemoryServices, index: SqliteSearchIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete arrives between the commit and the index write; it is still pending, so
    the message's observation is still in the table, unchanged: the delete alone tells."""
    messages = chat()
    original = index.add

    def add_after_delete(passages: Any) -> int:
        observe_delete(services, messages[0])
        return original(passages)

    monkeypatch.setattr(index, "add", add_after_delete)
    put_items(services.repository, (observation_values(o) for o in messages))
    services.consolidator.consolidate(CHANNEL, force=True)

    assert services.repository.still_pending(CHANNEL, [messages[0].sk]) == set()
    assert pottery_passages(index) == []
    assert any("Lisbon" in p.text for p in index.passages())  # the other message stays


def test_a_hit_whose_message_delete_is_not_consolidated_yet_is_never_shown(
    services: MemoryServices, index: SqliteSearchIndex
) -> None:
    messages = chat()
    put_items(services.repository, (observation_values(o) for o in messages))
    services.consolidator.consolidate(CHANNEL, force=True)
    assert pottery_passages(index)
    observe_delete(services, messages[0])  # no stream follows here: the index keeps it

    status, body = respond(
        services.recaller,
        {
            "guild_id": GUILD,
            "channel_id": CHANNEL,
            "user_id": ALICE,
            "participants": [BOB],
            "query": "pottery class",
        },
    )

    assert status == 200, body
    assert all("pottery" not in p["text"] for p in body["passages"])
    assert pottery_passages(index)  # still in the index: recall's read-back dropped it


def test_storage_imports_nothing_of_the_packages_above_it() -> None:
    allowed = ("storage", "records", "clock", "text", "snowflake", "settings", "providers")
    above: list[str] = []
    for path in sorted(STORAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                parts = name.split(".")
                if parts[0] == "botmemory" and len(parts) > 1 and parts[1] not in allowed:
                    above.append(f"{path.name}: {name}")

    assert above == []


class _Waves(Table):
    """A table whose BatchGetItems each wait for the others of their read-back: read one
    after another, the first waits alone and the barrier breaks."""

    def __init__(self, parties: int) -> None:
        super().__init__(client=None, table_name="t")  # type: ignore[arg-type]
        self.barrier = threading.Barrier(parties, timeout=10)
        self.sizes: list[int] = []

    def _items_at(
        self,
        wanted: list[dict[str, Any]],
        projection: str | None = None,
        names: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        self.sizes.append(len(wanted))
        self.barrier.wait()
        return []


def test_a_read_back_of_more_than_100_keys_sends_its_batches_side_by_side() -> None:
    history = [said(ALICE, f"hiking trip number {n}", START_MS + n) for n in range(60)]
    passages = message_passages(history, GUILD, None)
    wanted = {k for p in passages for k in [*source_keys(p), *deletion_keys(source_keys(p))]}
    batches = -(-len(wanted) // BATCH_GET_LIMIT)
    assert batches >= 2
    table = _Waves(batches)

    sources = passage_sources(table, passages)  # one round trip: every batch at once

    assert sorted(table.sizes) == sorted(
        [BATCH_GET_LIMIT] * (batches - 1) + [len(wanted) - BATCH_GET_LIMIT * (batches - 1)]
    )
    assert all(found == [] for found in sources.values())  # nothing held: nothing shown
