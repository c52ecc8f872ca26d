"""The batch a consolidation round reads, prepared and described.

The oldest pending observations of a channel that are still pending: the words of people
who opted out or are being erased dropped unread, such people named by others redacted,
trimmed so that the round fits one transaction, and numbered as the memory model reads them
(a message deleted since is not shown). Beside them, what the model is shown of memory: the
speakers' current facts (with a persona, its memories of them and its knowledge) and the
pins. A batch that deletes messages retires the facts drawn from them before the commit.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

from botmemory.clock import Clock, ttl_alive
from botmemory.consolidation.model.contract import NumberedObservation
from botmemory.memory import fact_history
from botmemory.memory.personas import PersonaDirectory
from botmemory.people.names import NameIndex, NameLookup, nobody_named
from botmemory.people.optout import OptOuts
from botmemory.people.retention import Kept, RetentionReader
from botmemory.records import (
    Candidate,
    Fact,
    HistoryActor,
    MemoryScope,
    Observation,
    ObservationKind,
    Persona,
    scope_of,
)
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.commit import ConsolidationCommit, Lock
from botmemory.storage.repository import MemoryRepository
from botmemory.when.window import said_at
from botmemory.when.zones import DEFAULT_ZONE

log = logging.getLogger(__name__)


# Observation kinds whose text is a person's own words, and so may be a fact's evidence.
WORDS = {ObservationKind.MESSAGE, ObservationKind.EDIT}

# Room a batch leaves in its commit for what the model's answer adds: the episode, the
# episodes it pushes beyond the cap, the channel summary and its archive, and facts.
ROOM_FOR_ANSWER = 26

# A round over a backlog (botmemory.consolidation.backlog) reads at most this many observations:
# about one Query page of them; MEMORY_BATCH_MAX_TOKENS cuts them shorter.
BACKLOG_MAX_OBSERVATIONS = 1_000
# What an observation's line costs beside its words: its number, kind, time, quotes and user id.
LINE_FRAME_TOKENS = 22
# What a current fact's line costs beside its words: its id, user id, kind and scope, and when
# it was first and last said and until when it holds (contract.render_batch).
FACT_FRAME_TOKENS = 45

# People named by others a round guards in its transaction (two checks each); pointers to
# anyone beyond are written after the commit, for those not barred by then. A message naming
# fifty people cannot crowd a batch out of its transaction.
NAMED_GUARDS = 8


@dataclass
class Batch:
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
    # The scope's name registry, read by key for what the round's texts could name.
    name_lookup: NameLookup | None = None
    persona: Persona | None = None  # the persona the channel answers as (servers only)
    staff: set[str] = field(default_factory=set)  # authors who are the server's staff
    redacted: dict[str, str] = field(default_factory=dict)  # sk -> text without barred people
    unindexed: list[str] = field(default_factory=list)  # passages of messages deleted since
    aliases: dict[str, list[str]] = field(default_factory=dict)  # id -> every name they go by
    candidates: list[Candidate] = field(default_factory=list)  # waiting, read this round
    # The model's one-line short-term summaries, by person (botmemory.memory.short_term).
    recent: dict[str, str] = field(default_factory=dict)
    # A backlog's batch: more than one transaction holds, committed in runs that each do
    # (botmemory.consolidation.backlog); its model call has a larger answer and time allowance.
    grown: bool = False
    # The zone every date the model reads is written in: the server's (`/memory-staff
    # timezone`), UTC otherwise (botmemory.when.zones).
    zone: str = DEFAULT_ZONE
    now_ms: int | None = None  # when the batch was read


def estimated_tokens(text: str) -> int:
    """A cautious token count for any language: one token per four ASCII characters, one
    per other character (most scripts take a token or more for each)."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return ascii_chars // 4 + (len(text) - ascii_chars) + 1


def _within_tokens(
    observations: list[Observation], opted_out: list[Observation], budget: int
) -> tuple[list[Observation], list[Observation], bool]:
    """The oldest observations whose lines fit `budget` estimated tokens (at least one),
    the opted-out words among them, and whether any were left for a later round."""
    used = 0
    kept: list[Observation] = []
    for obs in observations:
        used += estimated_tokens(f"{obs.author_name or ''}{obs.content}") + LINE_FRAME_TOKENS
        if kept and used > budget:
            break
        kept.append(obs)
    if len(kept) == len(observations):
        return kept, opted_out, False
    last = kept[-1].sk
    return kept, [o for o in opted_out if o.sk <= last], True


def leaves_room_for_answer(
    lock: Lock,
    observations: list[Observation],
    opted_out: list[Observation],
    names: NameIndex,
    waiting: list[Candidate] | None = None,
) -> bool:
    """Whether consuming these observations (and deleting the opted-out words), the checks
    that their people are not being erased, the candidates waiting (one action each, and
    the checks on their people) and what the answer adds fit one transaction (their
    profiles and names are written outside it, botmemory.storage.round_people)."""
    waiting = waiting or []
    queued = {p for c in waiting for p in c.people}
    named = {p for o in observations for p in names.named_in(o.content)}
    authors = {o.author_id for o in observations if o.author_id}
    named = set(sorted(named - authors)[:NAMED_GUARDS])
    consuming = ConsolidationCommit(
        lock=lock,
        scope="",
        consumed=observations,
        discarded=opted_out,
        guarded=sorted(authors | named | queued),
        candidate_deletes=[keys.candidate_sk(c.fact.fact_id) for c in waiting],
        now_ms=0,
    )
    return consuming.room_left() >= ROOM_FOR_ANSWER


def _fit_one_transaction(
    lock: Lock,
    observations: list[Observation],
    opted_out: list[Observation],
    names: NameIndex,
    waiting: list[Candidate] | None = None,
) -> tuple[list[Observation], bool]:
    """Trim the batch so that it and what the answer adds fit one transaction
    (`leaves_room_for_answer`). True when it was trimmed."""
    trimmed = False
    while observations and not leaves_room_for_answer(
        lock, observations, opted_out, names, waiting
    ):
        observations = observations[:-1]
        trimmed = True
    return observations, trimmed


def deleted_in(observations: Iterable[Observation]) -> set[str]:
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


def memory_scope(fact: Fact) -> MemoryScope:
    """Whose memory a stored fact is, as its address tells (the scope it is kept in)."""
    if keys.lineage_of(fact.scope) is None:
        return MemoryScope.USER
    return MemoryScope.PERSONA if fact.user_id == keys.PERSONA_SUBJECT else MemoryScope.PERSONA_USER


def with_persona_memories(people: Iterable[tuple[str, str]], batch: Batch) -> list[tuple[str, str]]:
    """These (scope, person) and, with a persona, what it keeps of them and its knowledge."""
    people = list(dict.fromkeys(people))
    if not people or batch.persona is None:
        return people
    held = keys.persona_scope(batch.scope, batch.persona.lineage_id)
    mine = [(held, user_id) for scope, user_id in people if scope == batch.scope]
    return people + mine + [(held, keys.PERSONA_SUBJECT)]


def _aliases(observations: Iterable[Observation]) -> dict[str, list[str]]:
    """Every name each author (not a bot) went by in these observations."""
    aliases: dict[str, list[str]] = {}
    for o in observations:
        if o.author_id and not o.author_is_bot and o.kind != ObservationKind.ANSWER:
            theirs = aliases.setdefault(o.author_id, [])
            theirs += [n for n in o.author_names if n not in theirs]
    return aliases


def speakers_of(batch: Batch) -> dict[tuple[str, str], str]:
    """The people who spoke in the batch, each in the scope of their own observations:
    (scope, user id) -> name."""
    return {
        (obs.scope, obs.author_id): batch.authors[obs.author_id]
        for obs in batch.by_number.values()
        if obs.author_id in batch.authors
    }


def _describe(obs: Observation, deleted: set[str], number_of_message: dict[str, int]) -> str | None:
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
        return f"(reacted {obs.emoji} to {'#' + str(target) if target else 'an earlier message'})"
    return None  # removals and deletions carry nothing to remember


class BatchReader:
    """Reads a round's batch and what the memory model is shown beside it."""

    def __init__(
        self,
        repository: MemoryRepository,
        settings: Settings,
        clock: Clock,
        opt_outs: OptOuts,
        personas: PersonaDirectory | None,
        retention: RetentionReader,
    ) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock
        self._opt_outs = opt_outs
        # Which persona a channel answers as (botmemory.memory.personas); None: no personas.
        self._personas = personas
        self._retention = retention  # a retired fact's history entry: its server's

    def read(self, lock: Lock, waiting: list[Candidate], *, grow: bool = False) -> Batch | None:
        """The oldest pending observations that are still pending, trimmed to one
        transaction with room for the `waiting` candidates; None when nothing is left. With
        `grow`, a backlog of more than MEMORY_MAX_BATCH is read whole up to
        MEMORY_BATCH_MAX_TOKENS (a grown batch: several transactions)."""
        channel_id = lock.channel_id
        limit = BACKLOG_MAX_OBSERVATIONS if grow else self._settings.max_batch
        if lock.attempts and lock.attempts.split_size:  # a failing batch is being split
            limit = min(limit, lock.attempts.split_size)
        candidates, more = self._repository.pending_observations(channel_id, limit)
        live = self._repository.still_pending(channel_id, (o.sk for o in candidates))
        observations = [o for o in candidates if o.sk in live]
        if not observations:
            return None
        scope = _channel_scope(observations)
        lookup = self._name_lookup(scope, observations)
        names = lookup.index(o.content for o in observations) if lookup else nobody_named()
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
        # No call carries more than MEMORY_BATCH_MAX_TOKENS of observations, grown or not.
        observations, opted_out, cut = _within_tokens(
            observations, opted_out, self._settings.batch_max_tokens
        )
        grown = grow and len(observations) + len(opted_out) > self._settings.max_batch
        if not grown:
            observations, trimmed = _fit_one_transaction(
                lock, observations, opted_out, names, waiting
            )
            cut = cut or trimmed
        more = more or cut
        batch = self.prepare(
            observations,
            opted_out,
            scope=_channel_scope(observations or opted_out),
            more=more,
            # Anything still waiting (a full batch, or a row the index had not caught up on)
            # keeps the channel on the sweep's list.
            waiting=more or len(live) < len(candidates),
        )
        batch.names, batch.name_lookup = names, lookup
        batch.redacted = {sk: t for sk, t in redacted.items() if sk in {o.sk for o in observations}}
        batch.grown = grown
        return batch

    def persona_of(self, batch: Batch) -> Persona | None:
        """The persona the batch's channel answers as, read once per round; none in direct
        messages, none without personas."""
        if self._personas is None or batch.scope == scope_of(None) or not batch.observations:
            return None
        return self._personas.for_channel(batch.scope, batch.observations[0].channel_id)

    def _name_lookup(self, scope: str, observations: list[Observation]) -> NameLookup | None:
        """Who the batch's texts can name: mentions by id anywhere; names only in a server
        (the `dm` scope is everyone who talks to the bot, not one community), read from the
        registry by key for the words the texts hold (people.names.NameLookup)."""
        if scope == scope_of(None):
            return None
        authors = {
            o.author_id: o.author_name
            for o in observations
            if o.author_id and o.author_name and not o.author_is_bot
        }
        return NameLookup(
            partial(self._repository.names_at, scope), authors, _aliases(observations)
        )

    def prepare(
        self,
        observations: list[Observation],
        opted_out: list[Observation],
        *,
        scope: str,
        more: bool,
        waiting: bool,
    ) -> Batch:
        deleted = deleted_in(observations)
        # A delete may sit in another batch, before or after this one: look it up by key.
        words = {o.message_id for o in observations if o.kind in WORDS and o.message_id}
        if words - deleted:
            deleted |= self._repository.deleted_messages(
                observations[0].channel_id, words - deleted
            )
        now = self._clock.now_ms()
        number_of_message: dict[str, int] = {}
        numbered: list[NumberedObservation] = []
        by_number: dict[int, Observation] = {}
        authors: dict[str, str] = {}
        for obs in observations:
            text = _describe(obs, deleted, number_of_message)
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
                    at_ms=self._said_at(obs, now),
                )
            )
            by_number[number] = obs
            if obs.message_id and obs.kind in (ObservationKind.MESSAGE, ObservationKind.ANSWER):
                number_of_message[obs.message_id] = number
            if not obs.author_is_bot and obs.kind != ObservationKind.ANSWER:
                authors.setdefault(obs.author_id, obs.author_name or obs.author_id)
        batch = Batch(
            observations, opted_out, numbered, by_number, authors, scope, more=more, waiting=waiting
        )
        batch.zone, batch.now_ms = self.zone_of(scope), now
        batch.aliases = {a: n for a, n in _aliases(by_number.values()).items() if a in authors}
        return batch

    def zone_of(self, scope: str) -> str:
        """The zone a server's staff chose (botmemory.when.zones); UTC in direct messages."""
        if scope == scope_of(None):
            return DEFAULT_ZONE
        return self._repository.server_zone(scope) or DEFAULT_ZONE

    @staticmethod
    def _said_at(obs: Observation, now_ms: int) -> int:
        """When an observation was said, as the model is shown it: a time before Discord or
        after now (a forged id that got past ingest, a stored value edited) is clamped."""
        at = said_at(obs.at_ms, now_ms)
        if at != obs.at_ms:
            log.warning(
                "observation time out of range: clamped",
                extra={"sk": obs.sk[:80], "at_ms": obs.at_ms, "shown_ms": at},
            )
        return at

    def retire_deleted(self, batch: Batch) -> int:
        """Facts drawn from messages deleted since lose that evidence; a fact left with
        none is deleted, and so is a persona's knowledge that loses any (it was learned from
        those words together). With a persona, the authors' facts in its scope and its
        knowledge are looked at too (the persona the channel answers as now). Returns how
        many facts were deleted."""
        deleted = deleted_in(batch.observations)
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
        for scope, subject in with_persona_memories(sorted(authors), batch):
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
                        retention_days=self._retention.days_of(fact.scope, Kept.FACTS),
                    )
                self._repository.retire_evidence(fact, kept, gone)
                retired += not kept
        if retired:
            log.info("retired facts of deleted messages", extra={"retired": retired})
        return retired

    def known_facts(self, batch: Batch) -> dict[str, Fact]:
        """The speakers' current facts and, with a persona, what it knows of each of them
        and its own knowledge: each the newest MEMORY_FACTS_PER_PERSON_IN_MODEL. A grown
        batch's many speakers share a quarter of MEMORY_BATCH_MAX_TOKENS, a fact of each in
        turn, newest first."""
        now = self._clock.now_ms()
        everyone = [
            [
                fact
                for fact in self._repository.active_facts(
                    scope, user_id, self._settings.facts_per_person_in_model
                )
                if ttl_alive(fact.expires_at, now)
            ]
            for scope, user_id in with_persona_memories(speakers_of(batch), batch)
        ]
        if not batch.grown:
            return {fact.fact_id: fact for theirs in everyone for fact in theirs}
        budget = self._settings.batch_max_tokens // 4
        known: dict[str, Fact] = {}
        for turn in range(max(map(len, everyone), default=0)):
            for theirs in everyone:
                if turn >= len(theirs):
                    continue
                budget -= estimated_tokens(theirs[turn].text) + FACT_FRAME_TOKENS
                if budget < 0:
                    return known
                known[theirs[turn].fact_id] = theirs[turn]
        return known

    def pin_texts(self, scope: str, channel_id: str) -> list[str]:
        budget = self._settings.recall_pin_chars
        texts: list[str] = []
        for target in ("global", channel_id):
            for pin in self._repository.pins(scope, target, limit=20):
                if budget - len(pin.text) < 0:
                    return texts
                budget -= len(pin.text)
                texts.append(pin.text)
        return texts
