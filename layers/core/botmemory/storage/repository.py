"""All DynamoDB access, behind one class, so the logic elsewhere reads as what it does.

`MemoryRepository` is the one class callers use. It is composed of stores, each holding its
methods with their concern: observations and channel state (lock, pending, sweep) in
observations.py; facts, history, pins, recall hits and tiers in facts.py; episodes, channel
summaries, quarantine and legacy memory in episodes.py; the consolidation commit in
commit.py; people (opt-outs, erasure, names) in people.py; what a round writes of each person
outside its transaction in round_people.py; channel visibility in
channels.py; personas, short-term memory, summary archives and deferred candidates in
personas.py, short_term.py, summaries.py and candidates.py; the servers' notes for direct
messages in notes.py; the marker a server's search index purge leaves in index_purges.py;
when the memory model last answered, deployment-wide, in model_health.py; every item of a server,
found and deleted, in server_purge.py;
the client and the shared
helpers in table.py. What search reads back of the table is in botmemory.search.sources.
"""

from __future__ import annotations

from botmemory.storage.candidates import CandidateRepository
from botmemory.storage.channels import ChannelRepository
from botmemory.storage.commit import CommitStore
from botmemory.storage.episodes import EpisodeStore
from botmemory.storage.facts import FactStore
from botmemory.storage.index_purges import IndexPurgeStore
from botmemory.storage.model_health import ModelHealthStore
from botmemory.storage.notes import NotesRepository
from botmemory.storage.observations import ObservationStore
from botmemory.storage.people import PeopleRepository
from botmemory.storage.personas import PersonaRepository
from botmemory.storage.round_people import RoundPeopleStore
from botmemory.storage.server_purge import ServerPurgeStore
from botmemory.storage.short_term import ShortTermRepository
from botmemory.storage.summaries import SummaryRepository


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
):
    """The table, as every flow reaches it: the stores above, over one client and name."""
