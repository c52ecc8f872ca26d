"""All DynamoDB access, behind one class, so the logic elsewhere reads as what it does.

`MemoryRepository` is the one class callers use. It is composed of stores, each holding its
methods with their concern: observations and channel state (lock, pending, sweep) in
observations.py; facts, history, pins, recall hits and tiers in facts.py; episodes, channel
summaries, quarantine and legacy memory in episodes.py; the consolidation commit in
commit.py; people (opt-outs, erasure, names) in people.py; what a round writes of each person
outside its transaction in round_people.py; channel visibility in
channels.py; personas, short-term memory, summary archives and deferred candidates in
personas.py, short_term.py, summaries.py and candidates.py; the servers' notes for direct
messages in notes.py; a server's time zone in zones.py; the marker a server's search index purge leaves in index_purges.py;
when the memory model last answered, deployment-wide, in model_health.py; every item of a
server, found and deleted, in server_purge.py; the answer rate counters in rate_counters.py;
what the migration of facts without channels reads and writes in fact_channels.py; members'
and staff's controls over what is kept (channel switches, consent, pauses) in controls.py; a
server's removal and its scheduled purge, by key, in lifecycle.py; the erasure ledger
(who erased their memory, when: checked by whatever reads the past again) in ledger.py; the client and the shared
helpers in table.py. No module outside this package calls the table
(tests/botmemory/storage/test_storage_owns_the_table.py). What search reads back of the
table is in botmemory.search.sources.
"""

from __future__ import annotations

from typing import Any

from botmemory.storage.candidates import CandidateRepository
from botmemory.storage.channels import ChannelRepository
from botmemory.storage.commit import CommitStore
from botmemory.storage.controls import ControlsStore
from botmemory.storage.episodes import EpisodeStore
from botmemory.storage.fact_channels import FactChannelStore
from botmemory.storage.facts import FactStore
from botmemory.storage.index_purges import IndexPurgeStore
from botmemory.storage.ledger import LedgerStore
from botmemory.storage.lifecycle import ServerLifecycleStore
from botmemory.storage.model_health import ModelHealthStore
from botmemory.storage.notes import NotesRepository
from botmemory.storage.observations import ObservationStore
from botmemory.storage.people import PeopleRepository
from botmemory.storage.personas import PersonaRepository
from botmemory.storage.rate_counters import RateCounterStore
from botmemory.storage.retention import RetentionStore
from botmemory.storage.round_people import RoundPeopleStore
from botmemory.storage.server_purge import ServerPurgeStore
from botmemory.storage.short_term import ShortTermRepository
from botmemory.storage.summaries import SummaryRepository
from botmemory.storage.zones import ZoneStore


class MemoryRepository(
    ObservationStore,
    FactStore,
    EpisodeStore,
    CommitStore,
    PeopleRepository,
    RoundPeopleStore,
    ChannelRepository,
    ShortTermRepository,
    PersonaRepository,
    SummaryRepository,
    CandidateRepository,
    NotesRepository,
    IndexPurgeStore,
    ServerPurgeStore,
    ModelHealthStore,
    RateCounterStore,
    FactChannelStore,
    ControlsStore,
    ServerLifecycleStore,
    ZoneStore,
    LedgerStore,
    RetentionStore,
):
    """The table, as every flow reaches it: the stores above, over one client and name."""


def open_repository(table_name: str, client: Any | None = None) -> MemoryRepository:
    """The repository of `table_name` over `client`, or over a DynamoDB client of this
    environment (created here, so that no module outside storage/ makes one)."""
    if client is None:
        import boto3  # deferred: a handler that never touches the table never pays for it

        client = boto3.client("dynamodb")
    return MemoryRepository(client, table_name)
