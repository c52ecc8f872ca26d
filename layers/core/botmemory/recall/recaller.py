"""Recall: the bounded memory block for the bot's system prompt.

Pins (global and this channel), the channel's rolling summary, the facts of the people in
the conversation only, what they did lately in the server's other public channels, the
passages a query finds and the channel's recent episodes, and in a direct message only, the
notes kept for direct messages (botmemory.memory.notes), each section within its own
character budget.
Every read is bounded by a Limit, so the cost does not grow with history. This module holds
the reads, side by side in two waves, and `respond()`; the block's format is
botmemory.recall.block, its assembly botmemory.recall.assemble, the request and result
botmemory.recall.contract.

Stored text is data (docs/architecture.md, invariant 11): every stored string enters the block only as
`quote_for_prompt` makes it, one quoted, escaped value that never starts a line and holds
no angle bracket. Only the block's own lines start a line: the markers, the headings and
the `- ` items that carry the quoted values. A new section (passages, say) must quote its
stored strings the same way. Budgets are measured on those emitted lines.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from botmemory.clock import Clock, ttl_alive
from botmemory.memory.notes import DmNotes, Note
from botmemory.memory.personas import PersonaDirectory
from botmemory.memory.short_term import RecentElsewhere, recent_elsewhere
from botmemory.memory.visibility import Visibility
from botmemory.people.names import NameIndex, name_candidates
from botmemory.people.retention import Kept, Retention, RetentionReader
from botmemory.recall.assemble import assemble, assemble_legacy
from botmemory.recall.contract import RecallError, RecallRequest, RecallResult, parse_request
from botmemory.recall.dates import asks_when, date_mentions
from botmemory.recall.search_leg import (
    Found,
    RankedFacts,
    SearchLeg,
    SearchStatus,
    named_first,
    rank_episodes,
    rank_facts,
    search_status,
    shown_here,
)
from botmemory.records import (
    Fact,
    ObservationKind,
    Persona,
    ShortTermEntry,
    scope_of,
)
from botmemory.search.keywords import clip_query
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository
from botmemory.when.facts import current
from botmemory.when.zones import DEFAULT_ZONE

# How many recent observations are read to find the conversation's participants.
PARTICIPANT_TAIL = 30
# Facts read per person before ranking: a small window of the newest, never all of them.
FACT_WINDOW_FACTOR = 2
# With a query, facts are ranked by relevance: each person's newest this many are read.
FACT_WINDOW_WITH_QUERY = 50
MAX_PINS_READ = 20
# In a direct message, its member's own facts from at most this many servers.
MAX_SERVERS_IN_DM = 5
# People named in a query (not in the conversation) whose relevant facts may be shown.
MAX_NAMED_IN_QUERY = 3

log = logging.getLogger(__name__)

_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    # One pool per process: the reads of one recall run side by side, in one round trip.
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="recall")
    return _pool


class Recaller:
    def __init__(
        self,
        repository: MemoryRepository,
        settings: Settings,
        clock: Clock,
        search: SearchLeg | None = None,
        *,
        personas: PersonaDirectory | None = None,
        notes: DmNotes | None = None,
    ) -> None:
        self._repository = repository
        self._personas = personas
        self._notes = notes
        self._settings = settings
        self._clock = clock
        self._search = search
        self._retention = RetentionReader(repository, settings, clock)

    def recall(self, request: RecallRequest, *, persona: Persona | None = None) -> RecallResult:
        """The block for this request. `persona`: the request's persona already resolved by
        the caller (the answer path reads it from the channel), so it is not read again."""
        if not self._settings.memory_enabled:
            return self._legacy(request)
        started = time.monotonic()
        settings = self._settings
        scope = scope_of(request.guild_id)
        repository = self._repository
        pool = _executor()
        now = self._clock.now_ms()
        query, query_note = clip_query(request.query) if request.query else (None, None)
        if request.query is not None and not request.query:
            query_note = "empty query"
        # First wave, side by side: search (index, then its check against the table), pins,
        # the channel summary, episodes, the name registry for people the query names, the
        # conversation's tail.
        search = self._start_search(request, query, now)
        # The server's retention: nothing past it is shown (botmemory.people.retention).
        retention_future = pool.submit(self._retention.of, request.guild_id)
        pin_futures = [
            pool.submit(repository.pins, scope, target, MAX_PINS_READ)
            for target in ("global", request.channel_id)
        ]
        summary_future = (
            pool.submit(repository.channel_summary, request.channel_id)
            if settings.recall_summary_chars > 0
            else None
        )
        episodes_future = pool.submit(
            repository.recent_episodes,
            request.channel_id,
            settings.episodes_per_channel if query else settings.recall_episodes,
        )
        registry_future = (
            # By key, the names the query could hold: found however large the server.
            pool.submit(repository.names_at, scope, name_candidates([query]))
            if query and request.guild_id
            else None
        )
        persona_future = self._start_persona(request, persona)
        # Which of the server's channels are public now: what may cross into this one.
        public_future = (
            pool.submit(repository.public_channels, request.guild_id) if request.guild_id else None
        )
        # In a direct message, the servers its member's own facts are kept in.
        servers_future = (
            None
            if request.guild_id
            else pool.submit(repository.servers_of, request.user_id, MAX_SERVERS_IN_DM)
        )
        # In a direct message only, the deployment's notes (SSM, cached) beside them.
        dm_notes = self._notes if self._notes is not None and self._notes.enabled else None
        ops_notes = pool.submit(dm_notes.deployment) if dm_notes and not request.guild_id else None
        names: dict[str, str] = {}
        participants = self._participants(request, names)
        named_people = _named_in(query, registry_future)
        # Beyond the conversation, a few members the query names get their relevant facts;
        # never in direct messages, whose shared scope holds what each said to the bot alone.
        others = named_people - set(participants) if request.guild_id else set()
        named = sorted(others)[:MAX_NAMED_IN_QUERY]
        # Second wave: the facts of the people in the conversation and of those named, and
        # the conversation's people's short-term entries (servers only).
        window = (
            FACT_WINDOW_WITH_QUERY
            if query
            else settings.recall_facts_per_person * FACT_WINDOW_FACTOR
        )
        fact_futures = {
            user_id: pool.submit(repository.active_facts, scope, user_id, window)
            for user_id in participants + named
        }
        servers = servers_future.result() if servers_future else []
        server_futures = [
            pool.submit(repository.active_facts, server, request.user_id, window)
            for server in servers
        ]
        # Those servers' notes, beside their facts (one BatchGetItem).
        server_notes = pool.submit(dm_notes.of_servers, servers) if dm_notes and servers else None
        # The names people go by here, whatever the caller passed: their profiles.
        names_future = pool.submit(repository.display_names, scope, participants + named)
        # The zone the block's dates are in: the server's (botmemory.when), UTC in a DM.
        zone_future = pool.submit(repository.server_zone, scope) if request.guild_id else None
        persona, persona_note = self._finish_persona(request, persona_future)
        persona_futures = self._start_persona_facts(persona, scope, participants + named, window)
        short_term_future = self._start_short_term(request, scope, participants)
        visibility = Visibility(
            request.channel_id,
            public_future.result() if public_future else frozenset(),
            reader=None if request.guild_id else request.user_id,
        )
        names.update(names_future.result())
        retention = retention_future.result()
        pins = [p for f in pin_futures for p in f.result() if ttl_alive(p.expires_at, now)]
        summary = summary_future.result() if summary_future else None
        if summary is not None and not (
            ttl_alive(summary.expires_at, now)
            and retention.kept(Kept.EPISODES, summary.created_ms, now)
        ):
            summary = None
        elsewhere = self._finish_short_term(request, short_term_future, names, now, visibility)
        found, status = self._finish_search(search, started)
        found.messages = [
            m for m in found.messages if retention.kept(Kept.MESSAGES, m.message.at_ms, now)
        ]
        found.facts = retention.facts_kept(found.facts, now)
        found = shown_here(found, visibility)
        found.messages = named_first(
            found.messages, named_people, date_mentions(query), asks_when(query)
        )
        episodes = rank_episodes(
            [
                e
                for e in episodes_future.result()
                if retention.kept(Kept.EPISODES, e.created_ms, now)
            ],
            query,
            [e for e in found.episodes if retention.kept(Kept.EPISODES, e.created_ms, now)],
            now,
        )
        episodes = episodes.within(settings.recall_episodes)
        for episode in episodes.all():
            for user_id, name in zip(
                episode.participant_ids, episode.participant_names, strict=False
            ):
                names.setdefault(user_id, name)
        for message in found.messages:
            if message.message.author_id and message.message.author_name:
                names.setdefault(message.message.author_id, message.message.author_name)
        # A fact past its valid_until stays kept (listed, in its history), out of the block.
        read = {
            user_id: retention.facts_kept(current(future.result(), now), now)
            for user_id, future in fact_futures.items()
        }
        read[request.user_id] += current(
            [fact for future in server_futures for fact in future.result()], now
        )
        facts = rank_facts(
            {user_id: visibility.facts(user_facts) for user_id, user_facts in read.items()},
            query,
            found.facts,
            now,
            settings.recall_facts_per_person,
            only_relevant=set(named),
            names={**_registered_names(registry_future), **names},
        )
        tiers = self._persona_tiers(
            persona_futures, query, now, set(named), names, visibility, retention
        )
        tiers.append(facts)
        result = assemble(
            settings,
            request,
            pins,
            summary,
            tiers,
            elsewhere,
            found.messages,
            episodes,
            names,
            persona,
            notes=_notes_read(ops_notes, server_notes),
            zone=(zone_future.result() if zone_future else None) or DEFAULT_ZONE,
        )
        result.search, result.query_note = status, query_note
        result.persona_note = persona_note
        result.public_channels = visibility.public_now
        return result

    # Personas -------------------------------------------------------------------------

    def _start_persona(
        self, request: RecallRequest, known: Persona | None
    ) -> Future[Persona | None] | None:
        """The persona asked for, read beside the first wave (servers only)."""
        if request.persona_id is None or self._personas is None or request.guild_id is None:
            return None
        if known is not None and known.persona_id == request.persona_id:
            resolved: Future[Persona | None] = Future()
            resolved.set_result(known)
            return resolved
        return _executor().submit(self._personas.by_id, request.guild_id, request.persona_id)

    def _finish_persona(
        self, request: RecallRequest, future: Future[Persona | None] | None
    ) -> tuple[Persona | None, str | None]:
        if request.persona_id is None:
            return None, None
        persona = future.result() if future is not None else None
        if persona is None:
            where = "in direct messages" if request.guild_id is None else "in this server"
            return None, f"no persona {request.persona_id!r} {where}: recalled without one"
        return persona, None

    def _start_persona_facts(
        self, persona: Persona | None, scope: str, people: list[str], window: int
    ) -> dict[str, Future[list[Fact]]]:
        """With a persona, in the same wave as the people's own facts: what it knows of each
        of them, and its own knowledge (under keys.PERSONA_SUBJECT)."""
        if persona is None:
            return {}
        persona_scope = keys.persona_scope(scope, persona.lineage_id)
        return {
            subject: _executor().submit(
                self._repository.active_facts, persona_scope, subject, window
            )
            for subject in [*people, keys.PERSONA_SUBJECT]
        }

    def _persona_tiers(
        self,
        futures: dict[str, Future[list[Fact]]],
        query: str | None,
        now_ms: int,
        named: set[str],
        names: dict[str, str],
        visibility: Visibility,
        retention: Retention,
    ) -> list[RankedFacts]:
        """The persona's facts, by priority: what it knows of each person, then its own
        knowledge (the people's own facts come after, in the block's facts budget); only
        those that may be shown here."""
        if not futures:
            return []
        read = {
            subject: visibility.facts(
                retention.facts_kept(current(future.result(), now_ms), now_ms)
            )
            for subject, future in futures.items()
        }
        knowledge = read.pop(keys.PERSONA_SUBJECT, [])
        per_person = self._settings.recall_facts_per_person
        of_people = rank_facts(read, query, [], now_ms, per_person, named, names)
        own = rank_facts({keys.PERSONA_SUBJECT: knowledge}, query, [], now_ms, per_person, set())
        return [of_people, own]

    # Short-term cross-channel entries ------------------------------------------------

    def _start_short_term(
        self, request: RecallRequest, scope: str, participants: list[str]
    ) -> Future[dict[str, list[ShortTermEntry]]] | None:
        """The conversation's people's short-term entries: one read (servers only)."""
        if not request.guild_id or self._settings.recall_short_term_chars <= 0:
            return None
        return _executor().submit(self._repository.short_term_of, scope, participants)

    def _finish_short_term(
        self,
        request: RecallRequest,
        entries: Future[dict[str, list[ShortTermEntry]]] | None,
        names: dict[str, str],
        now_ms: int,
        visibility: Visibility,
    ) -> list[RecentElsewhere]:
        """Then the messages those entries were made from, as the table holds them: one
        read; only entries of channels that are public now."""
        if entries is None:
            return []
        elsewhere = recent_elsewhere(
            self._repository,
            {
                person: [e for e in person_entries if e.channel_id in visibility.public_now]
                for person, person_entries in entries.result().items()
            },
            channel_id=request.channel_id,
            now_ms=now_ms,
            per_person=self._settings.short_term_per_person,
            budget_chars=self._settings.recall_short_term_chars,
        )
        for recent in elsewhere:
            if recent.name:
                names.setdefault(recent.entry.user_id, recent.name)
        return elsewhere

    # Search -------------------------------------------------------------------------

    def _start_search(
        self, request: RecallRequest, query: str | None, now_ms: int
    ) -> Future[Found] | SearchStatus:
        if self._search is None:
            return SearchStatus.OFF
        if not query or self._settings.recall_search_chars <= 0:
            return SearchStatus.NO_QUERY
        leg = self._search
        search_query = leg.query_for(request.guild_id, request.channel_id, query, now_ms)
        return _executor().submit(leg.find, search_query, now_ms)

    def _finish_search(
        self, search: Future[Found] | SearchStatus, started: float
    ) -> tuple[Found, SearchStatus]:
        """What search found within its budget; on a timeout or an error, nothing (counted
        by the caller from the status)."""
        if isinstance(search, SearchStatus):
            return Found(), search
        budget_s = self._settings.search_timeout_ms / 1000
        try:
            found = search.result(timeout=max(0.0, budget_s - (time.monotonic() - started)))
        except FutureTimeout:
            log.warning("search over its time budget; recalled without passages")
            return Found(), SearchStatus.TIMEOUT
        except Exception as error:  # the index or the embedding model: fail open
            log.warning(
                "search failed; recalled without passages", extra={"error": repr(error)[:300]}
            )
            return Found(), search_status(None, error)
        return found, search_status(found)

    # Reads --------------------------------------------------------------------------

    def _participants(self, request: RecallRequest, names: dict[str, str]) -> list[str]:
        """The current author first, then the others in the conversation, capped."""
        if request.participants is not None:
            others = request.participants
        else:
            tail = self._repository.recent_observations(request.channel_id, PARTICIPANT_TAIL)
            others = []
            for obs in tail:
                if obs.author_id and not obs.author_is_bot and obs.kind != ObservationKind.ANSWER:
                    others.append(obs.author_id)
                    if obs.author_name:
                        names.setdefault(obs.author_id, obs.author_name)
        ordered = list(dict.fromkeys([request.user_id, *others]))
        return ordered[: self._settings.recall_max_participants]

    def _legacy(self, request: RecallRequest) -> RecallResult:
        """Memory off: the channel's legacy memory string, read-only."""
        legacy = self._repository.legacy_memory(request.channel_id)
        return assemble_legacy(self._settings, request, legacy)


def _notes_read(
    deployment: Future[Note | None] | None, servers: Future[list[Note]] | None
) -> list[Note]:
    """The notes for a direct message, the deployment's first."""
    ops = deployment.result() if deployment is not None else None
    return ([ops] if ops is not None else []) + (servers.result() if servers is not None else [])


def _registered_names(registry: Future[dict[str, list[str]]] | None) -> dict[str, str]:
    """Member id -> a name they go by here (normalized), from the registry read for the query."""
    if registry is None:
        return {}
    return {user_id: name for name, ids in registry.result().items() for user_id in ids}


def _named_in(query: str | None, registry: Future[dict[str, list[str]]] | None) -> set[str]:
    """Who the query names: a mention, or (in a server) a name one member alone goes by."""
    if not query:
        return set()
    return NameIndex(registry.result() if registry else {}, {}).named_in(query)


def respond(recaller: Recaller, payload: Any) -> tuple[int, dict[str, Any]]:
    """A recall request in, an HTTP-style status and a JSON-ready body out."""
    try:
        request = parse_request(payload)
    except RecallError as error:
        return 400, error.as_response()
    return 200, recaller.recall(request).model_dump(mode="json")
