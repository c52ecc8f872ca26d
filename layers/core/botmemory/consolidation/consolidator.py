"""Consolidation: a batch of pending observations becomes facts and one episode.

Per channel: count what waits; at the threshold take the channel lock (lease and
fencing token), read the batch, call the memory model once, keep only facts that a
person stated about themselves, and commit facts, episode, consumption and lock
release in one transaction. In a channel with a persona (botmemory.memory.personas) the model may
also propose what the persona knows of a person (persona_user, the same evidence rule) and
what it learned that is no one's (persona: no member named, evidence from two people at
least), each kept in the persona's own scope. Any failure before that transaction leaves every
observation pending; the failure is counted against the batch's head, the channel backs
off, and a batch that keeps failing is split and at worst quarantined (botmemory.consolidation.attempts),
so no single member can stop a channel's memory.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import DAY_MS, Clock, epoch_seconds, ttl_alive
from botmemory.consolidation import summary as channel_summary
from botmemory.consolidation.attempts import MINUTE_MS, RetryPolicy
from botmemory.consolidation.candidates import (
    as_fact,
    evidence_messages,
    settle,
    stale,
    what_of,
    within_cap,
)
from botmemory.consolidation.model.contract import (
    MAX_FACTS,
    ConsolidationAnswer,
    KnownFact,
    MemoryModel,
    ModelInput,
    NumberedObservation,
    PersonaBrief,
    ProposedFact,
    render_batch,
)
from botmemory.consolidation.outcome import DiscardedFact, Outcome, Status
from botmemory.memory import fact_history, short_term
from botmemory.memory.behaviour import behaviour_request
from botmemory.memory.hot_tier import HotTier
from botmemory.memory.personas import PersonaDirectory
from botmemory.memory.visibility import Where, learned_where
from botmemory.people.names import NameIndex, names_pattern, nobody_named
from botmemory.people.optout import OptOuts
from botmemory.records import (
    Attempts,
    Candidate,
    ChannelSummary,
    Episode,
    Fact,
    FactChange,
    FactHistory,
    FactPriority,
    FactSource,
    HistoryActor,
    MemoryScope,
    Named,
    Observation,
    ObservationKind,
    Persona,
    Quarantine,
    scope_of,
)
from botmemory.search.index_sync import IndexWriter
from botmemory.search.keywords import tokens
from botmemory.search.passages import (
    episode_passage,
    fact_passage,
    holders,
    message_passages,
    summary_passage,
)
from botmemory.search.port import Passage
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.commit import (
    CommitRejected,
    ConsolidationCommit,
    Lock,
    LockRefused,
    NameSeen,
    PersonaMember,
    newest_evidence_ms,
)
from botmemory.storage.keys import episode_sk
from botmemory.storage.repository import MemoryRepository
from botmemory.text import clean, content_hash, has_pings, normalized, short_id

log = logging.getLogger(__name__)

# Observation kinds whose text is a person's own words, and so may be a fact's evidence.
WORDS = {ObservationKind.MESSAGE, ObservationKind.EDIT}
MAX_ROUNDS_PER_TRIGGER = 4
# Room a batch leaves in its commit for what the model's answer adds: the episode, the
# episodes it pushes beyond the cap, the channel summary and its archive, and facts.
ROOM_FOR_ANSWER = 26
# Time a round may need (a model call with retries); no round starts with less left.
ROUND_RESERVE_MS = 90_000

TimeLeft = Callable[[], int]


def _unbounded() -> int:
    return 2**31


MAX_PROVENANCE = 10
# The name registry read per round (one Query of the scope's NAME# items) stops here: in a
# larger server the names beyond it are not looked for (mentions by id still are).
MAX_REGISTRY_NAMES = 2000
# People named by others a round guards in its transaction (two checks each); pointers to
# anyone beyond are written after the commit, for those not barred by then. A message naming
# fifty people cannot crowd a batch out of its transaction.
NAMED_GUARDS = 8
# A persona's knowledge may hold nothing that looks like a Discord id (a member's, a role's).
SNOWFLAKE_LIKE = re.compile(r"(?<!\d)\d{15,21}(?!\d)")


@dataclass
class _Batch:
    """The observations a round consumes, and what the model is shown of them."""

    observations: list[Observation]
    opted_out: list[Observation]  # words of people who opted out: deleted unread
    numbered: list[NumberedObservation]
    by_number: dict[int, Observation]
    authors: dict[str, str]  # people who spoke (not bots): id -> name
    scope: str
    more: bool  # a backlog waits behind this batch
    waiting: bool  # anything is left pending (a backlog, or rows the index lagged on)
    names: NameIndex | None = None  # who a text names, in this scope
    persona: Persona | None = None  # the persona the channel answers as (servers only)
    staff: set[str] = field(default_factory=set)  # authors who are the server's staff
    redacted: dict[str, str] = field(default_factory=dict)  # sk -> text without barred people
    unindexed: list[str] = field(default_factory=list)  # passages of messages deleted since
    aliases: dict[str, list[str]] = field(default_factory=dict)  # id -> every name they go by
    candidates: list[Candidate] = field(default_factory=list)  # waiting, read this round


@dataclass
class _Judgement:
    """What the model's answer comes to once judged: facts kept, facts superseded, episode."""

    facts: list[Fact] = field(default_factory=list)
    superseded: list[Fact] = field(default_factory=list)
    superseded_by: dict[str, Fact] = field(default_factory=dict)  # old fact id -> newer fact
    episode: Episode | None = None
    summary: channel_summary.RolledSummary = field(default_factory=channel_summary.RolledSummary)
    summary_replaces: str | None = None  # id of the stored summary the new one rewrites
    summary_dropped: bool = False  # the stored one covers a message deleted since: it goes
    deferred: list[Fact] = field(default_factory=list)  # beyond the cap: candidates
    priorities: dict[str, FactPriority] = field(default_factory=dict)  # fact id -> priority


def _fit_one_transaction(
    lock: Lock,
    observations: list[Observation],
    opted_out: list[Observation],
    names: NameIndex,
    waiting: list[Candidate] | None = None,
) -> tuple[list[Observation], bool]:
    """Trim the batch so that consuming it, the profiles of its people, the checks that
    they are not being erased, their names, the candidates waiting (one action each, and the
    checks on their people) and what the answer adds fit one transaction. True when it was
    trimmed."""
    trimmed = False
    waiting = waiting or []
    queued = {p for c in waiting for p in c.people}
    while observations:
        people = {(o.scope, o.author_id, "") for o in observations if o.author_id}
        named = {p for o in observations for p in names.named_in(o.content)}
        authors = {o.author_id for o in observations if o.author_id}
        named = set(sorted(named - authors)[:NAMED_GUARDS])
        # Each name of each author the registry does not have them under yet (_names_seen).
        spoken = {
            (o.author_id, key)
            for o in observations
            if o.author_id
            for n in [o.author_name or "", *o.author_names]
            if (key := normalized(n)) and o.author_id not in names.stored.get(key, ())
        }
        consuming = ConsolidationCommit(
            lock=lock,
            scope="",
            consumed=observations,
            discarded=opted_out,
            people=list(people),
            guarded=sorted(authors | named | queued),
            names=[NameSeen("", a, n, ()) for a, n in spoken],
            candidate_deletes=[keys.candidate_sk(c.fact.fact_id) for c in waiting],
            now_ms=0,
        )
        if consuming.room_left() >= ROOM_FOR_ANSWER:
            break
        observations = observations[:-1]
        trimmed = True
    return observations, trimmed


def _deleted_in(observations: Iterable[Observation]) -> set[str]:
    """The message ids these observations delete."""
    deleted: set[str] = set()
    for obs in observations:
        if obs.kind == ObservationKind.DELETE and obs.message_id:
            deleted.add(obs.message_id)
        deleted.update(obs.message_ids)
    return deleted


def _message_of(observation_sk: str) -> str | None:
    """The message whose words an observation holds (a message or its edit), from its key."""
    parts = keys.observation_parts(observation_sk)
    return keys.message_of(observation_sk) if parts and parts[1] in WORDS else None


def _channel_scope(observations: Iterable[Observation]) -> str:
    """The scope of the channel a batch comes from: a channel is in one guild or is a direct
    message, so an event that arrived without its guild id does not make it a DM."""
    dm = scope_of(None)
    guilds = Counter(o.scope for o in observations if o.scope != dm)
    return guilds.most_common(1)[0][0] if guilds else dm


# Judging a proposed fact -------------------------------------------------------------------


def _rejection(candidate: ProposedFact, text: str, batch: _Batch) -> str | None:
    """Why a proposed fact may not be kept (None: it may)."""
    if candidate.scope != MemoryScope.USER and batch.persona is None:
        return f"no persona in this channel (a {candidate.scope.value} fact needs one)"
    names = [batch.persona.name] if batch.persona else []
    if request := behaviour_request(text, names):  # an instruction to the bot, not a fact
        return request
    if candidate.scope == MemoryScope.PERSONA:
        return _knowledge_rejection(text, candidate.evidence, batch)
    reason = _self_rejection(candidate, text, batch)
    if (
        reason is None
        and candidate.scope == MemoryScope.PERSONA_USER
        and batch.by_number[candidate.evidence[0]].scope != batch.scope
    ):
        return "cites observations outside the persona's server"
    return reason


def _self_rejection(candidate: ProposedFact, text: str, batch: _Batch) -> str | None:
    """A fact about a person: from that person's own words only (invariant 4)."""
    if candidate.user_id not in batch.authors:
        return "subject did not speak in this batch"
    if not text:
        return "empty after cleaning"
    if has_pings(text):  # the same filter as `/memory remember`
        return "mentions someone (@everyone, @here or a user, role or channel mention)"
    for number in candidate.evidence:
        cited = batch.by_number.get(number)
        if cited is None:
            return f"cites #{number}, which is not in the batch"
        if cited.author_id != candidate.user_id:
            return f"cites #{number}, written by someone else"
        if cited.kind not in WORDS:
            return f"cites #{number}, which holds no words of theirs"
    if len({batch.by_number[n].scope for n in candidate.evidence}) > 1:
        return "cites observations of different scopes"
    return None


def _knowledge_rejection(text: str, evidence: list[int], batch: _Batch) -> str | None:
    """A persona's knowledge is no one's: it rests on members' words, of two people at
    least or of a staff member (no single member teaches a persona), and names no member."""
    if not text:
        return "empty after cleaning"
    if has_pings(text):
        return "mentions someone (@everyone, @here or a user, role or channel mention)"
    for number in evidence:
        cited = batch.by_number.get(number)
        if cited is None:
            return f"cites #{number}, which is not in the batch"
        if cited.kind not in WORDS or cited.author_id not in batch.authors:
            return f"cites #{number}, which holds no member's words"
        if cited.scope != batch.scope:
            return f"cites #{number}, from outside the persona's server"
    # Only a line that says it teaches it: a cited "good morning" adds no teacher.
    authors = {batch.by_number[n].author_id for n in _teaching(text, evidence, batch)}
    if len(authors) < 2 and not authors & batch.staff:
        return (
            "persona knowledge needs evidence from at least two different people, or staff, "
            "each in a line that says it"
        )
    return _names_a_member(text, batch)


def _teaching(text: str, evidence: list[int], batch: _Batch) -> list[int]:
    """The cited lines that say the knowledge: each shares a content word with it (the
    search's own tokens: stemmed, stopwords out, any script). A greeting or an unrelated line
    shares none and teaches nothing."""
    said = set(tokens(text))
    return [
        number
        for number in dict.fromkeys(evidence)
        if (cited := batch.by_number.get(number)) is not None and said & set(tokens(cited.content))
    ]


def _names_a_member(text: str, batch: _Batch) -> str | None:
    """Why a persona's knowledge names someone: an id, a name the server's registry knows as
    one member's, or any name of anyone who spoke in the batch (their nickname, global name
    or account name) (None: it names no one)."""
    if SNOWFLAKE_LIKE.search(text):
        return "names a member: holds an id"
    if (batch.names or nobody_named()).named_in(text):
        return "names a member of this server"
    names = list(batch.authors.values()) + [n for a in batch.aliases.values() for n in a]
    spoken = names_pattern([*names, *(normalized(n) for n in names)])
    if spoken is not None and (spoken.search(text) or spoken.search(normalized(text))):
        return "names someone who spoke in this batch"
    return None


def _address(candidate: ProposedFact, batch: _Batch) -> tuple[str, str, str | None]:
    """Where a kept fact lives: its scope, its subject and its persona's lineage. A person's
    own fact lives in the scope of the observations it rests on (all of one scope); a
    persona's memories in the persona's scope (keys.persona_scope)."""
    if candidate.scope == MemoryScope.USER or batch.persona is None:
        return batch.by_number[candidate.evidence[0]].scope, candidate.user_id, None
    lineage = batch.persona.lineage_id
    held = keys.persona_scope(batch.scope, lineage)
    if candidate.scope == MemoryScope.PERSONA:
        return held, keys.PERSONA_SUBJECT, lineage
    return held, candidate.user_id, lineage


def _evidence(cited: list[Observation], *, every_author_first: bool) -> list[Observation]:
    """The observations a fact keeps as its provenance (at most MAX_PROVENANCE, each once);
    a persona's knowledge keeps one of each author first, so that its provenance still
    shows the people it was learned from."""
    unique = list({o.sk: o for o in cited}.values())
    if every_author_first:
        firsts: dict[str | None, Observation] = {}
        for observation in unique:
            firsts.setdefault(observation.author_id, observation)
        head = {o.sk for o in firsts.values()}
        unique = [o for o in unique if o.sk in head] + [o for o in unique if o.sk not in head]
    return unique[:MAX_PROVENANCE]


def _memory_scope(fact: Fact) -> MemoryScope:
    """Whose memory a stored fact is, as its address tells (the scope it is kept in)."""
    if keys.lineage_of(fact.scope) is None:
        return MemoryScope.USER
    return MemoryScope.PERSONA if fact.user_id == keys.PERSONA_SUBJECT else MemoryScope.PERSONA_USER


def _with_persona_memories(
    people: Iterable[tuple[str, str]], batch: _Batch
) -> list[tuple[str, str]]:
    """These (scope, person) and, with a persona, what it keeps of them and its knowledge."""
    people = list(dict.fromkeys(people))
    if not people or batch.persona is None:
        return people
    held = keys.persona_scope(batch.scope, batch.persona.lineage_id)
    mine = [(held, user_id) for scope, user_id in people if scope == batch.scope]
    return people + mine + [(held, keys.PERSONA_SUBJECT)]


def _note_priority(
    priorities: dict[str, FactPriority], fact_id: str, priority: FactPriority
) -> None:
    """A fact proposed more than once (or waiting, and proposed again) keeps its highest."""
    current = priorities.get(fact_id)
    if current is None or priority.rank < current.rank:
        priorities[fact_id] = priority


def _aliases(observations: Iterable[Observation]) -> dict[str, list[str]]:
    """Every name each author (not a bot) went by in these observations."""
    aliases: dict[str, list[str]] = {}
    for o in observations:
        if o.author_id and not o.author_is_bot and o.kind != ObservationKind.ANSWER:
            theirs = aliases.setdefault(o.author_id, [])
            theirs += [n for n in o.author_names if n not in theirs]
    return aliases


def _speakers(batch: _Batch) -> dict[tuple[str, str], str]:
    """The people who spoke in the batch, each in the scope of their own observations:
    (scope, user id) -> name."""
    return {
        (obs.scope, obs.author_id): batch.authors[obs.author_id]
        for obs in batch.by_number.values()
        if obs.author_id in batch.authors
    }


class Consolidator:
    def __init__(
        self,
        repository: MemoryRepository,
        settings: Settings,
        model: MemoryModel | None,
        clock: Clock,
        opt_outs: OptOuts,
        index_writer: IndexWriter | None = None,
        *,
        personas: PersonaDirectory | None = None,
    ) -> None:
        self._repository = repository
        # Which persona a channel answers as (botmemory.memory.personas); None: no personas.
        self._personas = personas
        self._index_writer = index_writer
        self._settings = settings
        self._model = model
        self._clock = clock
        self._opt_outs = opt_outs
        self._hot_tier = HotTier(repository, settings, clock, opt_outs.hash_of)
        self._retry = RetryPolicy(
            max_attempts=settings.batch_max_attempts,
            backoff_ms=settings.retry_backoff_minutes * MINUTE_MS,
            backoff_max_ms=settings.retry_backoff_max_minutes * MINUTE_MS,
        )

    # Entry points -------------------------------------------------------------------

    def sweep(self, limit: int = 50, time_left_ms: TimeLeft = _unbounded) -> list[Outcome]:
        """Schedule trigger: consolidate quiet channels whose observations have waited too long.

        Channels come longest waiting first, `limit` at a time, page after page while time is
        left; each is visited once. A channel that fails backs off: its place on the list
        moves to its next try, so channels that keep failing never starve the others.
        """
        if not self._enabled:
            return []
        before = self._clock.now_ms() - self._idle_ms
        outcomes: list[Outcome] = []
        visited: set[str] = set()
        for channel_id in self._repository.channels_due(before, limit):
            if channel_id in visited:
                continue  # moved on the list while this sweep ran
            if time_left_ms() < ROUND_RESERVE_MS:
                break  # the next sweep takes the rest
            visited.add(channel_id)
            rounds = self.consolidate(channel_id, force=True, time_left_ms=time_left_ms)
            outcomes += rounds
            deferred_to = rounds[-1].retry_at_ms
            if rounds[-1].status == Status.DEFERRED and deferred_to is not None:
                self._repository.reschedule_sweep(channel_id, deferred_to - self._idle_ms)
        return outcomes

    def consolidate(
        self, channel_id: str, *, force: bool = False, time_left_ms: TimeLeft = _unbounded
    ) -> list[Outcome]:
        """Consolidate one channel (the stream trigger; the sweep forces it below the
        threshold). Rounds go on while a full batch keeps waiting (a backlog), each round
        one model call."""
        outcomes = [self._round(channel_id, force=force)]
        while (
            outcomes[-1].status == Status.CONSOLIDATED
            and outcomes[-1].more_pending
            and time_left_ms() >= ROUND_RESERVE_MS
            and len(outcomes) < MAX_ROUNDS_PER_TRIGGER
            and (
                outcomes[-1].splitting  # a split batch goes on below the threshold
                or self._repository.count_pending(channel_id, self._settings.consolidate_every)
                >= self._settings.consolidate_every
            )
        ):
            outcomes.append(self._round(channel_id, force=outcomes[-1].splitting))
        return outcomes

    @property
    def _enabled(self) -> bool:
        return self._settings.memory_enabled and self._model is not None

    @property
    def _idle_ms(self) -> int:
        return self._settings.idle_flush_minutes * MINUTE_MS

    # One round ----------------------------------------------------------------------

    def _round(self, channel_id: str, *, force: bool) -> Outcome:
        if not self._enabled:
            return Outcome(channel_id, Status.OFF)
        settings = self._settings
        waiting = self._repository.count_pending(channel_id, settings.consolidate_every)
        # Candidates alone (botmemory.consolidation.candidates) get the sweep's round, without a model call.
        alone = waiting == 0 and force and self._repository.has_candidates(channel_id)
        if waiting == 0 and not alone:
            if force:
                self._repository.clear_pending_since(channel_id)
            return Outcome(channel_id, Status.NOTHING_PENDING)
        if waiting < settings.consolidate_every and not force:
            self._repository.mark_pending_since(channel_id, self._clock.now_ms())
            return Outcome(channel_id, Status.BELOW_THRESHOLD, detail=f"{waiting} waiting")

        lock = self._repository.acquire_lock(
            channel_id,
            owner=uuid.uuid4().hex,
            now_ms=self._clock.now_ms(),
            lease_ms=settings.lock_lease_seconds * 1000,
        )
        if isinstance(lock, LockRefused):
            if lock.retry_at_ms is None:
                return Outcome(channel_id, Status.BUSY)
            return Outcome(channel_id, Status.DEFERRED, retry_at_ms=lock.retry_at_ms)
        try:
            return self._locked_round(lock, candidates=alone)
        except BaseException:
            # Whatever went wrong, nothing was committed: give the lock back for the retry.
            self._repository.release_lock(lock)
            raise

    def _locked_round(self, lock: Lock, *, candidates: bool = False) -> Outcome:
        """Read the batch (and the candidates waiting, when the channel's state or the
        caller says some do), ask the model, judge its answer, and commit: one round."""
        channel_id = lock.channel_id
        # Read only when the last round left some (its commit says so on the channel's state).
        read = (
            self._repository.read_candidates(channel_id) if lock.candidates or candidates else None
        )
        waiting = read.found if read else []
        batch = self._read_batch(lock, waiting)
        if batch is None and waiting:  # candidates alone: judged already, no model call
            batch = self._prepare([], [], scope=waiting[0].server_scope, more=False, waiting=False)
        if batch is None:
            self._repository.release_lock(lock)
            return Outcome(channel_id, Status.NOTHING_PENDING)
        batch.candidates = waiting
        outcome = Outcome(channel_id, Status.CONSOLIDATED)
        outcome.candidates_unreadable = read.unreadable if read else 0
        judgement = _Judgement()
        batch.persona = self._persona_of(batch)
        if batch.persona is not None:  # staff may teach it on their own
            staff = self._repository.guild_staff(batch.scope)
            batch.staff = {
                o.author_id
                for o in batch.observations
                if o.author_id and staff.includes(o.author_id, o.author_roles)
            }
        stored, dropped = self._stored_summary(channel_id, batch)
        summary = None if dropped else stored  # a dropped summary is never shown to the model
        if batch.numbered:  # a batch of reactions and deletions alone needs no model
            known = self._known_facts(batch)
            try:
                answer = self._ask_model(batch, known, summary, outcome)
            except Exception as exc:  # counted, retried later, split, at worst quarantined
                return self._failed(lock, batch, outcome, str(exc)[:300])
            judgement = self._judge(answer, batch, known, outcome)
            judgement.summary = self._rolled_summary(summary, answer, batch, outcome)
        elif batch.candidates:
            judgement = self._judge_candidates([], {}, {}, batch, outcome)
        judgement.summary_replaces = stored.episode_id if stored else None
        judgement.summary_dropped = dropped
        # Before the commit, so that a failed commit leaves the deletes pending to retry.
        outcome.retired = self._retire_deleted(batch)
        outcome.summaries_dropped = int(dropped) + self._drop_covering_archives(channel_id, batch)
        commit = self._build_commit(lock, batch, judgement, outcome)
        passages = self._message_passages(batch)
        commit.holders = holders(passages)
        outcome = self._commit(commit, batch, outcome)
        if outcome.status == Status.CONSOLIDATED:
            self._index(commit, batch, passages, outcome)
        return outcome

    def _read_batch(self, lock: Lock, waiting: list[Candidate]) -> _Batch | None:
        """The oldest pending observations that are still pending, trimmed to one
        transaction with room for the `waiting` candidates; None when nothing is left."""
        channel_id = lock.channel_id
        limit = self._settings.max_batch
        if lock.attempts and lock.attempts.split_size:  # a failing batch is being split
            limit = min(limit, lock.attempts.split_size)
        candidates, more = self._repository.pending_observations(channel_id, limit)
        live = self._repository.still_pending(channel_id, (o.sk for o in candidates))
        observations = [o for o in candidates if o.sk in live]
        if not observations:
            return None
        scope = _channel_scope(observations)
        names = self._names(scope, observations)
        # Opted out or being erased, read fresh (never from ingest's cache): the words of
        # such an author are dropped unread; such a person named by others is redacted.
        authors = {o.author_id for o in observations if o.author_id and not o.author_is_bot}
        named = {p for o in observations for p in names.named_in(o.content)}
        barred = self._opt_outs.barred(authors | named)
        opted_out = [o for o in observations if o.author_id in barred]
        observations = [o for o in observations if o not in opted_out]
        redacted: dict[str, str] = {}
        if barred:
            for index, obs in enumerate(observations):
                text = names.redact(obs.content, barred) if obs.content else obs.content
                if text != obs.content:
                    redacted[obs.sk] = text
                    observations[index] = obs.model_copy(update={"content": text})
        observations, trimmed = _fit_one_transaction(lock, observations, opted_out, names, waiting)
        more = more or trimmed
        batch = self._prepare(
            observations,
            opted_out,
            scope=_channel_scope(observations or opted_out),
            more=more,
            # Anything still waiting (a full batch, or a row the index had not caught up on)
            # keeps the channel on the sweep's list.
            waiting=more or len(live) < len(candidates),
        )
        batch.names = names
        batch.redacted = {sk: t for sk, t in redacted.items() if sk in {o.sk for o in observations}}
        return batch

    def _persona_of(self, batch: _Batch) -> Persona | None:
        """The persona the batch's channel answers as, read once per round; none in direct
        messages, none without personas."""
        if self._personas is None or batch.scope == scope_of(None) or not batch.observations:
            return None
        return self._personas.for_channel(batch.scope, batch.observations[0].channel_id)

    def _names(self, scope: str, observations: list[Observation]) -> NameIndex:
        """Who the batch's texts can name: mentions by id anywhere; names only in a server
        (the `dm` scope is everyone who talks to the bot, not one community)."""
        if scope == scope_of(None):
            return nobody_named()
        authors = {
            o.author_id: o.author_name
            for o in observations
            if o.author_id and o.author_name and not o.author_is_bot
        }
        aliases = _aliases(observations)
        registry = self._repository.name_registry(scope, MAX_REGISTRY_NAMES)
        return NameIndex(registry, authors, aliases)

    def _ask_model(
        self,
        batch: _Batch,
        known: dict[str, Fact],
        summary: ChannelSummary | None,
        outcome: Outcome,
    ) -> ConsolidationAnswer:
        """One model call over the batch, the channel's persona, the participants' current
        facts (with a persona, its memories of them and its knowledge), the pins and the
        channel's rolling summary."""
        assert self._model is not None  # rounds run only when memory is enabled
        persona = batch.persona
        model_input = ModelInput(
            summary=summary.summary if summary else "",
            summary_max_chars=self._settings.summary_max_chars,
            channel_id=outcome.channel_id,
            observations=batch.numbered,
            persona=PersonaBrief(id=persona.persona_id, name=persona.name) if persona else None,
            facts=[
                KnownFact(
                    fact_id=f.fact_id,
                    user_id=f.user_id,
                    kind=f.kind.value,
                    text=f.text,
                    scope=_memory_scope(f),
                )
                for f in known.values()
            ],
            pins=self._pin_texts(batch.scope, outcome.channel_id),
        )
        outcome.model_input_chars = len(render_batch(model_input))
        outcome.model_calls = 1
        return self._model.consolidate(model_input)

    def _rolled_summary(
        self,
        current: ChannelSummary | None,
        answer: ConsolidationAnswer,
        batch: _Batch,
        outcome: Outcome,
    ) -> channel_summary.RolledSummary:
        assert self._model is not None
        # The stretch of what the model was shown: a message hidden as deleted is not in it.
        start_ms, end_ms = channel_summary.stretch(batch.by_number.values()) or (
            min(o.at_ms for o in batch.observations),
            max(o.at_ms for o in batch.observations),
        )
        rolled = channel_summary.roll(
            current,
            answer.channel_summary,
            model=self._model,
            settings=self._settings,
            channel_id=outcome.channel_id,
            speakers=batch.authors,
            start_ms=start_ms,
            end_ms=end_ms,
            now_ms=self._clock.now_ms(),
        )
        outcome.model_calls += rolled.recompressed
        outcome.summary_recompressed = rolled.recompressed
        return rolled

    def _judge(
        self,
        answer: ConsolidationAnswer,
        batch: _Batch,
        known: dict[str, Fact],
        outcome: Outcome,
    ) -> _Judgement:
        for rejected in answer.rejected:
            self._discard(outcome, rejected.user_id, rejected.text, rejected.reason)
        for extra in answer.facts[MAX_FACTS:]:
            self._discard(
                outcome, extra.user_id, extra.text, f"beyond the answer's cap of {MAX_FACTS} facts"
            )
        proposed = answer.facts[:MAX_FACTS]
        priorities: dict[str, FactPriority] = {}
        facts, superseded, superseded_by = self._accept_facts(
            proposed, batch, known, outcome, priorities
        )
        judged = self._judge_candidates(facts, known, priorities, batch, outcome)
        facts = judged.facts
        superseded_by = {k: v for k, v in superseded_by.items() if v in facts}
        superseded = [old for old in superseded if old.fact_id in superseded_by]
        if self._settings.supersession == "shadow" and superseded:
            # Watched, not done: the older facts stay active; ids only (texts are personal).
            log.info(
                "supersession shadowed",
                extra={
                    "channel_id": outcome.channel_id,
                    "would_supersede": {k: v.fact_id for k, v in superseded_by.items()},
                },
            )
            outcome.shadow_superseded = len(superseded)
            superseded, superseded_by = [], {}
        episode = self._episode(
            outcome.channel_id, batch, answer.episode.summary, answer.episode.participants
        )
        judgement = _Judgement(facts, superseded, superseded_by, episode)
        judgement.deferred, judgement.priorities = judged.deferred, priorities
        return judgement

    def _judge_candidates(
        self,
        facts: list[Fact],
        known: dict[str, Fact],
        priorities: dict[str, FactPriority],
        batch: _Batch,
        outcome: Outcome,
    ) -> _Judgement:
        """The round's new facts and the channel's waiting candidates (botmemory.consolidation.candidates)
        that may still be kept, within each person's cap: those beyond it are deferred."""
        queued = self._waiting_facts(batch, outcome, priorities)
        fresh = {f.fact_id for f in facts}
        facts = facts + [f for f in queued if f.fact_id not in fresh]
        facts = self._not_forgotten(facts, outcome)
        kept, over = self._few_new_per_person(
            facts, known, outcome, priorities, [c.fact.fact_id for c in batch.candidates]
        )
        return _Judgement(kept, deferred=over, priorities=priorities)

    def _waiting_facts(
        self, batch: _Batch, outcome: Outcome, priorities: dict[str, FactPriority]
    ) -> list[Fact]:
        """The facts of the channel's waiting candidates that may still be kept: one read of
        their people's opt-outs and erasures and one of their messages' deletes."""
        if not batch.candidates:
            return []
        channel_id = batch.candidates[0].channel_id
        barred = self._opt_outs.barred({p for c in batch.candidates for p in c.people})
        deleted = self._repository.deleted_messages(channel_id, evidence_messages(batch.candidates))
        persona = batch.persona if batch.observations else self._channel_persona(batch, channel_id)
        now = self._clock.now_ms()
        facts: list[Fact] = []
        for candidate in batch.candidates:
            reason = stale(
                candidate,
                barred=barred,
                deleted=deleted,
                lineage_id=persona.lineage_id if persona else None,
                now_s=now // 1000,
            )
            fact = candidate.fact
            if reason is not None:
                self._discard(outcome, fact.user_id, fact.text, reason, fact.fact_id)
                continue
            facts.append(as_fact(candidate, now, self._settings.fact_retention_days))
            _note_priority(priorities, fact.fact_id, candidate.priority)
        return facts

    def _channel_persona(self, batch: _Batch, channel_id: str) -> Persona | None:
        """The persona the channel answers as, for a round without observations."""
        if self._personas is None or batch.scope == scope_of(None):
            return None
        return self._personas.for_channel(batch.scope, channel_id)

    def _few_new_per_person(
        self,
        facts: list[Fact],
        known: dict[str, Fact],
        outcome: Outcome,
        priorities: dict[str, FactPriority],
        queued: list[str],
    ) -> tuple[list[Fact], list[Fact]]:
        """At most MEMORY_NEW_FACTS_PER_PERSON new facts per person and scope (a person's
        own, what the persona knows of them, and the persona's knowledge, each counted apart),
        the highest priority first (candidates.within_cap); a fact the model was shown and
        restated is not new. Those beyond are deferred, not lost (botmemory.consolidation.candidates)."""
        cap = self._settings.new_facts_per_person
        kept, over = within_cap(facts, known, cap, priorities, queued)
        for fact in over:
            log.info(
                "fact deferred",
                extra={
                    "channel_id": outcome.channel_id,
                    "user_id": fact.user_id,
                    "fact_id": fact.fact_id,
                    "reason": f"beyond {cap} new {what_of(fact)}facts in one batch",
                },
            )
        return kept, over

    def _not_forgotten(self, facts: list[Fact], outcome: Outcome) -> list[Fact]:
        """Drop a fact its subject forgot after its newest evidence was said (one consistent
        BatchGetItem of the candidates' tombstones; the commit checks them again)."""
        if not facts:
            return facts
        forgotten = self._repository.forgotten_times((f.scope, f.user_id, f.fact_id) for f in facts)
        kept: list[Fact] = []
        for fact in facts:
            at = forgotten.get((fact.scope, fact.user_id, fact.fact_id))
            if at is not None and at >= newest_evidence_ms(fact):
                self._discard(
                    outcome, fact.user_id, fact.text, "forgotten by its subject", fact.fact_id
                )
            else:
                kept.append(fact)
        return kept

    def _pointers(self, batch: _Batch, judgement: _Judgement) -> list[Named]:
        """A pointer under each person an observation of someone else, the episode or the
        channel summary names: erasure finds those items by the person's id."""
        episode = judgement.episode
        names = batch.names or nobody_named()
        channel_id = batch.observations[0].channel_id if batch.observations else ""
        pointers: dict[tuple[str, str], Named] = {}
        targets: list[tuple[str, str, set[str], int | None]] = [
            (o.sk, o.content, {o.author_id or ""}, o.expires_at) for o in batch.observations
        ]
        if episode is not None:
            targets.append((episode.sk, episode.summary, set(), episode.expires_at))
        # A summary's own speakers need none: erasure reads the summaries of their channels.
        for summary in (judgement.summary.summary, judgement.summary.archived):
            if summary is not None:
                speakers = set(summary.participant_ids)
                targets.append((summary.sk, summary.summary, speakers, summary.expires_at))
        for sk, text, unneeded, expires_at in targets:
            for person in sorted(names.named_in(text) - unneeded if text else set()):
                if person == self._settings.bot_user_id:
                    continue
                pointers[(person, sk)] = Named(
                    scope=batch.scope,
                    user_id=person,
                    channel_id=channel_id,
                    target_sk=sk,
                    expires_at=expires_at,
                )
        return list(pointers.values())

    def _names_seen(self, batch: _Batch) -> list[NameSeen]:
        """Registry entries that learn a member: each author under each of their current names
        (nickname, global name, account name), when the registry does not have them under it
        yet (servers only)."""
        if batch.names is None or batch.scope == scope_of(None):
            return []
        grouped: dict[str, tuple[str, set[str]]] = {}
        for (scope, user_id), name in _speakers(batch).items():
            for each in dict.fromkeys([name, *batch.aliases.get(user_id, [])]):
                key = normalized(each)
                if scope != batch.scope or not key or user_id in batch.names.stored.get(key, ()):
                    continue
                grouped.setdefault(key, (each, set()))[1].add(user_id)
        return [
            NameSeen(batch.scope, key, name, tuple(sorted(users)))
            for key, (name, users) in sorted(grouped.items())
        ]

    def _guard(self, people: Iterable[str]) -> list[str]:
        """Person hashes of everyone a commit writes anything of."""
        return sorted(
            {self._opt_outs.hash_of(p) for p in people if p and p != self._settings.bot_user_id}
        )

    def _build_commit(
        self, lock: Lock, batch: _Batch, judgement: _Judgement, outcome: Outcome
    ) -> ConsolidationCommit:
        """Everything the round writes; facts beyond what one transaction holds are dropped,
        pointers beyond it are written right after the commit."""
        now = self._clock.now_ms()
        episode = judgement.episode
        pointers = self._pointers(batch, judgement)
        speakers = _speakers(batch)
        commit = ConsolidationCommit(
            lock=lock,
            scope=batch.scope,
            consumed=batch.observations,
            discarded=batch.opted_out,
            people=[(scope, user_id, name) for (scope, user_id), name in speakers.items()],
            episode=episode,
            dropped_episodes=self._episodes_beyond_cap(lock.channel_id) if episode else [],
            summary=judgement.summary.summary,
            summary_replaces=judgement.summary_replaces,
            archived_summary=judgement.summary.archived,
            summary_dropped=judgement.summary_dropped,
            more_pending_since_ms=now if batch.waiting else None,
            now_ms=now,
            attempts=self._retry.after_success(
                lock.attempts, [o.sk for o in batch.observations], outcome.model_calls > 0
            ),
            guarded=self._guard(
                [user_id for _, user_id in speakers]
                + [f.user_id for f in judgement.facts if f.user_id != keys.PERSONA_SUBJECT]
                + [user_id for f in judgement.facts for user_id in f.evidence_user_ids]
                + (episode.participant_ids if episode else [])
                # What waits on as a candidate holds its people's words too.
                + [f.user_id for f in judgement.deferred if f.user_id != keys.PERSONA_SUBJECT]
                + [user_id for f in judgement.deferred for user_id in f.evidence_user_ids]
            ),
            names=self._names_seen(batch),
            redacted=batch.redacted,
            # Each candidate read costs one action, whatever becomes of it (reserved).
            candidate_deletes=[keys.candidate_sk(c.fact.fact_id) for c in batch.candidates],
        )
        facts, superseded = self._fitting(
            judgement.facts, judgement.superseded, commit.room_left(), outcome
        )
        commit.facts, commit.superseded = facts, superseded
        self._settle_candidates(commit, batch, judgement, outcome)
        commit.members = list(dict.fromkeys(m for f in facts if (m := PersonaMember.of(f))))
        # Their history entries, in the transaction while they fit (the erasure and opt-out
        # checks then cover them as they cover the facts); those beyond are written right
        # after it, for people not barred by then, as the pointers below are. Facts come
        # first: recording a change never costs a fact its place.
        history = self._history(facts, superseded, judgement.superseded_by, now)
        fits = max(0, commit.room_left())
        commit.history, commit.history_later = history[:fits], history[fits:]
        # Pointers, person by person while they and the checks on that person fit.
        guarded = set(commit.guarded)
        by_person: dict[str, list[Named]] = {}
        for pointer in pointers:
            by_person.setdefault(pointer.user_id, []).append(pointer)
        named: list[Named] = []
        later: list[Named] = []
        for person, theirs in by_person.items():
            person_hash = self._opt_outs.hash_of(person)
            cost = len(theirs) + (0 if person_hash in guarded else 2)
            if cost <= commit.room_left() - len(named) - 2 * (len(guarded) - len(commit.guarded)):
                named += theirs
                guarded.add(person_hash)
            else:
                later += theirs
        commit.guarded, commit.named, commit.named_later = sorted(guarded), named, later
        return commit

    def _settle_candidates(
        self, commit: ConsolidationCommit, batch: _Batch, judgement: _Judgement, outcome: Outcome
    ) -> None:
        """The round's candidates (botmemory.consolidation.candidates): the facts beyond the cap or the
        room are queued, the waiting ones kept deleted or rewritten, the rest dropped, each
        drop logged with its id and reason. Keeps the channel on the sweep's list while any
        waits."""
        written = {f.fact_id for f in commit.facts}
        unfitted = [f for f in judgement.facts if f.fact_id not in written]
        settled = settle(
            batch.candidates,
            commit.facts,
            judgement.deferred + unfitted,
            channel_id=commit.lock.channel_id,
            server_scope=batch.scope,
            priorities=judgement.priorities,
            names=batch.authors,
            room=commit.room_left(),
            now_ms=commit.now_ms,
            retention_days=self._settings.fact_retention_days,
        )
        commit.candidate_puts, commit.candidate_deletes = settled.puts, settled.deletes
        commit.candidates_rewritten = frozenset(settled.rewritten)
        commit.candidates_left = bool(settled.puts)
        for fact, reason in settled.dropped:
            self._discard(outcome, fact.user_id, fact.text, reason, fact.fact_id)
        outcome.deferred, outcome.candidates_kept = len(settled.queued), settled.kept
        outcome.candidates_waiting = len(settled.puts)
        if settled.puts and commit.more_pending_since_ms is None:
            commit.more_pending_since_ms = commit.now_ms  # the sweep comes back for them

    def _fitting(
        self, facts: list[Fact], superseded: list[Fact], room: int, outcome: Outcome
    ) -> tuple[list[Fact], list[Fact]]:
        """The facts and supersessions that fit the transaction's room, in the order given
        (the highest priority first); the facts beyond become candidates (_settle_candidates).
        A fact takes two actions (its write, the check of its forget tombstone), and a
        persona's first fact of a person one more (its member marker)."""
        kept: list[Fact] = []
        members: set[PersonaMember] = set()
        used = 0
        for fact in facts:
            member = PersonaMember.of(fact)
            cost = 2 + (member is not None and member not in members)
            if used + cost > room:
                log.info(
                    "fact deferred",
                    extra={
                        "channel_id": outcome.channel_id,
                        "user_id": fact.user_id,
                        "fact_id": fact.fact_id,
                        "reason": "over the per-batch transaction cap",
                    },
                )
                continue
            kept.append(fact)
            used += cost
            if member is not None:
                members.add(member)
        return kept, superseded[: max(0, room - used)]

    def _history(
        self,
        facts: list[Fact],
        superseded: list[Fact],
        superseded_by: dict[str, Fact],
        now_ms: int,
    ) -> list[FactHistory]:
        """The history entries of what the round writes: a fact created, restated with new
        text or after it was superseded (one consistent read of what is stored), and each
        fact superseded, with the newer fact's text. A fact stated again as it is: none."""
        stored = self._repository.facts_at((f.scope, f.user_id, f.fact_id) for f in facts)
        retention = self._settings.fact_retention_days
        entries = [
            entry
            for fact in facts
            if (
                entry := fact_history.written(
                    stored.get((fact.scope, fact.user_id, fact.fact_id)),
                    fact,
                    actor=HistoryActor.CONSOLIDATION,
                    at_ms=now_ms,
                    retention_days=retention,
                )
            )
            is not None
        ]
        for old in superseded:
            newer = superseded_by.get(old.fact_id)
            entries.append(
                fact_history.history_entry(
                    old,
                    FactChange.SUPERSEDED,
                    actor=HistoryActor.CONSOLIDATION,
                    at_ms=now_ms,
                    retention_days=retention,
                    old=old.text,
                    new=newer.text if newer else None,
                    superseded_by=newer.fact_id if newer else None,
                )
            )
        return entries

    def _commit(self, commit: ConsolidationCommit, batch: _Batch, outcome: Outcome) -> Outcome:
        try:
            self._repository.commit_consolidation(commit)
        except CommitRejected as rejected:
            log.warning(
                "consolidation commit rejected; nothing consumed",
                extra={"channel_id": outcome.channel_id, "reasons": rejected.reasons},
            )
            self._repository.release_lock(commit.lock)
            outcome.status = Status.REJECTED
            outcome.detail = str(rejected)
            return outcome

        if commit.history_later:  # idempotent, like the pointers
            barred = self._opt_outs.barred({e.user_id for e in commit.history_later})
            self._repository.put_history(
                [e for e in commit.history_later if e.user_id not in barred]
            )
        if commit.named_later:  # idempotent: written after the commit that needed them
            barred = self._opt_outs.barred({n.user_id for n in commit.named_later})
            self._repository.put_named([n for n in commit.named_later if n.user_id not in barred])
        outcome.consumed = len(commit.consumed)
        outcome.more_pending = batch.more
        outcome.splitting = commit.attempts is not None and commit.attempts.splitting
        outcome.facts_written = len(commit.facts)
        outcome.superseded = len(commit.superseded)
        outcome.episode_id = commit.episode.episode_id if commit.episode else None
        self._tend_speakers(batch, outcome, frozenset(f.fact_id for f in commit.facts))
        outcome.short_term_written = self._short_term(commit, batch)
        log.info(
            "consolidated",
            extra={
                "channel_id": outcome.channel_id,
                "consumed": outcome.consumed,
                "facts": outcome.facts_written,
                "superseded": outcome.superseded,
                "discarded": len(outcome.discarded),
            },
        )
        return outcome

    def _short_term(self, commit: ConsolidationCommit, batch: _Batch) -> int:
        """After the commit: in a public server channel, each speaker's entry for it
        (botmemory.memory.short_term, one UpdateItem each), for people not barred by then; each keeps
        their newest MEMORY_SHORT_TERM_PER_PERSON. A failure costs only these entries: logged."""
        keep = self._settings.short_term_per_person
        if keep == 0 or not commit.consumed:
            return 0
        channel_id = commit.lock.channel_id
        try:
            if not short_term.crosses_channels(self._repository, batch.scope, channel_id):
                return 0
            entries = short_term.entries_for_round(
                [batch.by_number[n] for n in batch.by_number],
                scope=batch.scope,
                channel_id=channel_id,
                bot_user_id=self._settings.bot_user_id,
                settings=self._settings,
                now_ms=self._clock.now_ms(),
            )
            barred = self._opt_outs.barred({e.user_id for e in entries})
            entries = [e for e in entries if e.user_id not in barred]
            for entry in entries:
                self._repository.record_short_term(entry, keep)
        except Exception as exc:  # short-term memory is never a reason to lose a round
            log.warning(
                "short-term entries not written",
                extra={"channel_id": channel_id, "error": repr(exc)[:300]},
            )
            return 0
        return len(entries)

    # The search index ----------------------------------------------------------------

    def _message_passages(self, batch: _Batch) -> list[Passage]:
        if self._index_writer is None:
            return []
        # The words the model was shown: never a message deleted before it was consolidated.
        shown = batch.by_number.values()
        return message_passages(shown, batch.scope, self._settings.bot_user_id)

    def _index(
        self,
        commit: ConsolidationCommit,
        batch: _Batch,
        passages: list[Passage],
        outcome: Outcome,
    ) -> None:
        """After the commit: the round's messages, facts and episode go to the search index.
        A failure leaves the memory whole (the table has it all) and is counted
        (SearchIndexFailed); those passages stay out of search."""
        if self._index_writer is None:
            return
        names = {c.fact.user_id: c.subject_name or "" for c in batch.candidates} | batch.authors
        # A person's own facts only: a persona's memories stay out of the shared index.
        facts = [
            fact_passage(f, names.get(f.user_id))
            for f in commit.facts
            if f.memory_scope == MemoryScope.USER
        ]
        everything = passages + [p for p in facts if p is not None]
        if commit.episode is not None:
            everything.append(episode_passage(commit.episode, batch.scope))
        if commit.archived_summary is not None:
            everything.append(summary_passage(commit.archived_summary, batch.scope))
        try:
            report = self._index_writer.write(everything, remove=batch.unindexed)
        except Exception as exc:  # the search index is never a reason to lose a round
            log.warning(
                "search indexing failed",
                extra={"channel_id": outcome.channel_id, "error": repr(exc)[:300]},
            )
            outcome.index_failed = True
            return
        outcome.index_writes = report.written
        outcome.index_withdrawn = report.withdrawn

    # A round that failed --------------------------------------------------------------

    def _failed(self, lock: Lock, batch: _Batch, outcome: Outcome, error: str) -> Outcome:
        """Count the failure against the batch's head and back off; a batch that keeps
        failing is split, and what fails alone is quarantined."""
        log.warning("memory model failed", extra={"channel_id": lock.channel_id, "error": error})
        now = self._clock.now_ms()
        attempts, quarantine = self._retry.after_failure(
            lock.attempts, [o.sk for o in batch.observations], error, now
        )
        outcome.detail = error
        if quarantine:
            return self._quarantine(lock, batch, outcome, attempts)
        retry_at = attempts.retry_at_ms or now
        self._repository.record_failure(lock, attempts, sweep_since_ms=retry_at - self._idle_ms)
        outcome.status = Status.MODEL_FAILED
        outcome.retry_at_ms = retry_at
        log.info(
            "batch failed; retried later",
            extra={
                "channel_id": lock.channel_id,
                "head": attempts.head,
                "attempts": attempts.count,
                "failures": attempts.failures,
                "split_size": attempts.split_size,
                "retry_at_ms": retry_at,
            },
        )
        return outcome

    def _quarantine(
        self, lock: Lock, batch: _Batch, outcome: Outcome, attempts: Attempts
    ) -> Outcome:
        """Consume a batch that failed even alone, without facts, and record it for staff.
        The poison is gone: later batches go on at once; the back-off count stays."""
        now = self._clock.now_ms()
        sks = [o.sk for o in batch.observations]
        quarantine = Quarantine(
            channel_id=lock.channel_id,
            quarantine_id=short_id(content_hash(lock.channel_id, *sks)),
            scope=batch.scope,
            observation_sks=sks,
            user_ids=list(dict.fromkeys(o.author_id for o in batch.observations if o.author_id)),
            error=attempts.error,
            attempts=attempts.failures,
            quarantined_ms=now,
            expires_at=epoch_seconds(now + self._settings.observation_retention_days * DAY_MS),
        )
        commit = ConsolidationCommit(
            lock=lock,
            scope=batch.scope,
            consumed=batch.observations,
            discarded=batch.opted_out,
            quarantine=quarantine,
            attempts=attempts,
            guarded=self._guard(quarantine.user_ids),
            redacted=batch.redacted,
            more_pending_since_ms=now if batch.waiting else None,
            now_ms=now,
        )
        outcome.status = Status.QUARANTINED
        log.warning(
            "batch quarantined: consumed without facts",
            extra={"channel_id": lock.channel_id, "observations": sks, "error": attempts.error},
        )
        return self._commit(commit, batch, outcome)

    # Building the model's view ------------------------------------------------------

    def _prepare(
        self,
        observations: list[Observation],
        opted_out: list[Observation],
        *,
        scope: str,
        more: bool,
        waiting: bool,
    ) -> _Batch:
        deleted = _deleted_in(observations)
        # A delete may sit in another batch, before or after this one: look it up by key.
        words = {o.message_id for o in observations if o.kind in WORDS and o.message_id}
        if words - deleted:
            deleted |= self._repository.deleted_messages(
                observations[0].channel_id, words - deleted
            )
        number_of_message: dict[str, int] = {}
        numbered: list[NumberedObservation] = []
        by_number: dict[int, Observation] = {}
        authors: dict[str, str] = {}
        for obs in observations:
            text = self._describe(obs, deleted, number_of_message)
            if text is None or not obs.author_id:
                continue
            number = len(numbered) + 1
            numbered.append(
                NumberedObservation(
                    number=number,
                    author_id=obs.author_id,
                    author_name=obs.author_name or obs.author_id,
                    kind="bot"
                    if obs.author_is_bot or obs.kind == ObservationKind.ANSWER
                    else obs.kind.value,
                    text=text,
                )
            )
            by_number[number] = obs
            if obs.message_id and obs.kind in (ObservationKind.MESSAGE, ObservationKind.ANSWER):
                number_of_message[obs.message_id] = number
            if not obs.author_is_bot and obs.kind != ObservationKind.ANSWER:
                authors.setdefault(obs.author_id, obs.author_name or obs.author_id)
        batch = _Batch(
            observations, opted_out, numbered, by_number, authors, scope, more=more, waiting=waiting
        )
        batch.aliases = {a: n for a, n in _aliases(by_number.values()).items() if a in authors}
        return batch

    @staticmethod
    def _describe(
        obs: Observation, deleted: set[str], number_of_message: dict[str, int]
    ) -> str | None:
        """What the model reads for one observation; None when it should not see it."""
        if obs.message_id in deleted and obs.kind in (
            ObservationKind.MESSAGE,
            ObservationKind.EDIT,
        ):
            return None  # deleted before consolidation: its words are not kept
        if obs.kind in (ObservationKind.MESSAGE, ObservationKind.ANSWER):
            if not obs.content:
                return None
            if obs.reply_to and obs.reply_to in number_of_message:
                return f"(reply to #{number_of_message[obs.reply_to]}) {obs.content}"
            return obs.content
        if obs.kind == ObservationKind.EDIT:
            target = number_of_message.get(obs.message_id or "")
            return f"(edited {'#' + str(target) if target else 'an earlier message'}) {obs.content}"
        if obs.kind == ObservationKind.REACTION_ADD:
            target = number_of_message.get(obs.message_id or "")
            return (
                f"(reacted {obs.emoji} to {'#' + str(target) if target else 'an earlier message'})"
            )
        return None  # removals and deletions carry nothing to remember

    def _retire_deleted(self, batch: _Batch) -> int:
        """Facts drawn from messages deleted since lose that evidence; a fact left with
        none is deleted, and so is a persona's knowledge that loses any (it was learned from
        those words together). With a persona, the authors' facts in its scope and its
        knowledge are looked at too (the persona the channel answers as now). Returns how
        many facts were deleted."""
        deleted = _deleted_in(batch.observations)
        if not deleted:
            return 0
        channel_id = batch.observations[0].channel_id
        for bulk in batch.observations:
            if bulk.kind == ObservationKind.BULK_DELETE:
                self._repository.mark_deleted(bulk)
        messages = self._repository.message_observations(channel_id, deleted)
        # Deleted means never remembered: their search passages go too (after the commit).
        batch.unindexed = sorted(
            {keys.message_passage_id(channel_id, m) for m in deleted}
            | {p for message in messages for p in message.passages}
        )
        authors = {
            (message.scope, message.author_id)
            for message in messages
            if message.author_id and not message.author_is_bot
        }
        retired = 0
        for scope, subject in _with_persona_memories(sorted(authors), batch):
            for fact in self._repository.all_facts(scope, subject):
                kept = [sk for sk in fact.provenance if _message_of(sk) not in deleted]
                if len(kept) == len(fact.provenance):
                    continue
                if fact.user_id == keys.PERSONA_SUBJECT:
                    kept = []
                gone = None
                if not kept:
                    gone = fact_history.deleted(
                        fact,
                        actor=HistoryActor.CONSOLIDATION,
                        at_ms=self._clock.now_ms(),
                        retention_days=self._settings.fact_retention_days,
                    )
                self._repository.retire_evidence(fact, kept, gone)
                retired += not kept
        if retired:
            log.info("retired facts of deleted messages", extra={"retired": retired})
        return retired

    def _stored_summary(self, channel_id: str, batch: _Batch) -> tuple[ChannelSummary | None, bool]:
        """The channel's summary as stored (read strongly consistent when the round needs
        it), and whether it covers a message this batch deletes: then the round drops it (a
        paraphrase cannot reliably lose one message) and builds the next from the batch."""
        deleted = channel_summary.message_times(_deleted_in(batch.observations))
        if not batch.numbered and not deleted:
            return None, False
        stored = self._repository.channel_summary(channel_id, consistent=True)
        return stored, stored is not None and channel_summary.covers(stored, deleted)

    def _drop_covering_archives(self, channel_id: str, batch: _Batch) -> int:
        """Delete the archived summaries covering a message this batch deletes (their
        passages leave the search index through the stream). Before the commit, like the
        facts the delete retires: a refused commit leaves the delete pending, and the retry
        finds nothing more to delete."""
        deleted = channel_summary.message_times(_deleted_in(batch.observations))
        covering = self._repository.summary_archives_covering(channel_id, deleted)
        if covering:
            self._repository.delete_summary_archives(channel_id, covering)
            log.info(
                "dropped archived summaries covering deleted messages",
                extra={"channel_id": channel_id, "dropped": len(covering)},
            )
        return len(covering)

    def _known_facts(self, batch: _Batch) -> dict[str, Fact]:
        """The speakers' current facts and, with a persona, what it knows of each of them
        and its own knowledge: each the newest MEMORY_FACTS_PER_PERSON_IN_MODEL."""
        known: dict[str, Fact] = {}
        now = self._clock.now_ms()
        for scope, user_id in _with_persona_memories(_speakers(batch), batch):
            for fact in self._repository.active_facts(
                scope, user_id, self._settings.facts_per_person_in_model
            ):
                if ttl_alive(fact.expires_at, now):
                    known[fact.fact_id] = fact
        return known

    def _pin_texts(self, scope: str, channel_id: str) -> list[str]:
        budget = self._settings.recall_pin_chars
        texts: list[str] = []
        for target in ("global", channel_id):
            for pin in self._repository.pins(scope, target, limit=20):
                if budget - len(pin.text) < 0:
                    return texts
                budget -= len(pin.text)
                texts.append(pin.text)
        return texts

    # Judging the model's answer -----------------------------------------------------

    def _accept_facts(
        self,
        proposed: list[ProposedFact],
        batch: _Batch,
        known: dict[str, Fact],
        outcome: Outcome,
        priorities: dict[str, FactPriority] | None = None,
    ) -> tuple[list[Fact], list[Fact], dict[str, Fact]]:
        """Keep a fact only when its subject wrote every observation cited as its evidence
        (a persona's knowledge: when members wrote it, two at least, and it names none of
        them). Returns the facts kept, the facts they supersede, and which kept fact
        supersedes each (one of the same subject in the same scope)."""
        now = self._clock.now_ms()
        expires = epoch_seconds(now + self._settings.fact_retention_days * DAY_MS)
        accepted: dict[str, Fact] = {}
        cited: dict[str, list[Observation]] = {}  # fact id -> the observations it rests on
        superseded: dict[str, Fact] = {}
        superseded_by: dict[str, Fact] = {}
        where = self._learned_where(batch)
        for candidate in proposed:
            text = clean(candidate.text, self._settings.fact_chars)
            reason = _rejection(candidate, text, batch)
            if reason:
                self._discard(outcome, candidate.user_id, candidate.text, reason)
                continue
            scope, subject, lineage = _address(candidate, batch)
            fact_id = short_id(content_hash(scope, subject, normalized(text)))
            if priorities is not None:
                _note_priority(priorities, fact_id, candidate.priority)
            # Persona knowledge rests only on the lines that say it (its teachers).
            numbers = (
                _teaching(text, candidate.evidence, batch)
                if candidate.scope == MemoryScope.PERSONA
                else candidate.evidence
            )
            evidence = _evidence(
                cited.get(fact_id, []) + [batch.by_number[n] for n in numbers],
                every_author_first=candidate.scope == MemoryScope.PERSONA,
            )
            cited[fact_id] = evidence
            accepted[fact_id] = Fact(
                fact_id=fact_id,
                scope=scope,
                user_id=subject,
                text=text,
                kind=candidate.kind,
                source=FactSource.SELF,
                provenance=[o.sk for o in evidence],
                created_ms=now,
                updated_ms=now,
                expires_at=expires,
                memory_scope=candidate.scope,
                lineage_id=lineage,
                evidence_user_ids=(
                    list(dict.fromkeys(o.author_id for o in evidence if o.author_id))
                    if candidate.scope == MemoryScope.PERSONA
                    else []
                ),
                learned_in=where.learned_in,
                learned_in_public=where.learned_in_public,
            )
            for old_id in candidate.supersedes:
                old = known.get(old_id)
                if old is None or old.user_id != subject or old.scope != scope:
                    log.info(
                        "ignored supersession of an unknown or foreign fact",
                        extra={"fact_id": old_id},
                    )
                    continue
                superseded[old_id] = old
                superseded_by[old_id] = accepted[fact_id]
        for fact_id in accepted:  # restating a fact keeps it active
            superseded.pop(fact_id, None)
        return list(accepted.values()), list(superseded.values()), superseded_by

    def _learned_where(self, batch: _Batch) -> Where:
        """The channel fields of the facts this round learns (botmemory.memory.visibility): its
        channel, public when @everyone can view it now (never a direct message)."""
        channel_id = batch.observations[0].channel_id if batch.observations else ""
        public = batch.scope != scope_of(None) and self._repository.channel_is_public(
            batch.scope, channel_id
        )
        return learned_where(channel_id, public)

    def _discard(
        self, outcome: Outcome, user_id: str, text: str, reason: str, fact_id: str | None = None
    ) -> None:
        """A fact not kept: logged with its id and reason, and counted (FactsDiscarded). A
        proposal refused before it had an address is named `p-` and a hash of its subject and
        text."""
        fact_id = fact_id or "p-" + short_id(content_hash(user_id, normalized(text)))
        log.info(
            "discarded fact",
            extra={
                "channel_id": outcome.channel_id,
                "user_id": user_id,
                "fact_id": fact_id,
                "reason": reason,
            },
        )
        outcome.discarded.append(DiscardedFact(user_id, clean(text, 120), reason, fact_id))

    def _episode(
        self, channel_id: str, batch: _Batch, summary: str, participants: list[str]
    ) -> Episode | None:
        text = clean(summary, self._settings.episode_chars)
        if not text:
            return None
        people = [p for p in dict.fromkeys(participants) if p in batch.authors] or list(
            batch.authors
        )
        now = self._clock.now_ms()
        episode_id = short_id(content_hash(channel_id, *(o.sk for o in batch.observations)))
        return Episode(
            channel_id=channel_id,
            episode_id=episode_id,
            sk=episode_sk(now, episode_id),
            summary=text,
            participant_ids=people,
            participant_names=[batch.authors[p] for p in people],
            start_ms=min(o.at_ms for o in batch.observations),
            end_ms=max(o.at_ms for o in batch.observations),
            created_ms=now,
            expires_at=epoch_seconds(now + self._settings.episode_retention_days * DAY_MS),
        )

    def _episodes_beyond_cap(self, channel_id: str) -> list[str]:
        """Sort keys of the episodes that fall off once one more is added."""
        keep = self._settings.episodes_per_channel - 1
        newest = self._repository.recent_episodes(channel_id, keep + 5)
        return [e.sk for e in newest[keep:]]

    def _tend_speakers(self, batch: _Batch, outcome: Outcome, fresh: frozenset[str]) -> None:
        """After the commit, one read of each speaker's facts: delete those whose retention
        ran out (TTL is lazy), and keep their hot tier lean (botmemory.memory.hot_tier). The round
        is committed: a tier write that fails is logged and left to the next round."""
        now = self._clock.now_ms()
        expired: list[Fact] = []
        for scope, user_id in _speakers(batch):
            facts = self._repository.all_facts(scope, user_id)
            expired += [f for f in facts if not ttl_alive(f.expires_at, now)]
            try:
                alive = [f for f in facts if ttl_alive(f.expires_at, now)]
                tier = self._hot_tier.tend(alive, fresh)
            except (ClientError, BotoCoreError) as error:
                log.warning(
                    "hot tier not tended",
                    extra={"user_id": user_id, "error": repr(error)[:300]},
                )
                continue
            outcome.demoted += tier.demoted
            outcome.evicted += tier.evicted
        outcome.purged = self._repository.delete_facts(expired) if expired else 0
