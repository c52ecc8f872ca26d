"""What every flow is handed: the services a handler, a local run or a test builds once
(botmemory.runtime wires them). It sits below the flows that use it, so answering and the
commands import it without importing the wiring."""

from __future__ import annotations

from dataclasses import dataclass

from botmemory.clock import Clock
from botmemory.consolidation.consolidator import Consolidator
from botmemory.ingest.observe import ObservationRecorder
from botmemory.memory.personas import PersonaDirectory
from botmemory.people.optout import OptOuts
from botmemory.people.retention import RetentionReader
from botmemory.recall.recaller import Recaller
from botmemory.search.index_sync import IndexFollower
from botmemory.search.port import SearchIndex
from botmemory.settings.config import Settings
from botmemory.storage.repository import MemoryRepository


@dataclass
class MemoryServices:
    settings: Settings
    clock: Clock
    repository: MemoryRepository
    opt_outs: OptOuts
    recorder: ObservationRecorder
    consolidator: Consolidator
    recaller: Recaller
    search_index: SearchIndex | None
    index_follower: IndexFollower | None
    personas: PersonaDirectory
    # Servers' retention (cached a minute): what a command or the chat model writes by hand
    # expires by it, as consolidation's writes do.
    retention: RetentionReader
