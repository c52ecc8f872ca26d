"""Which proposed facts a consolidation round keeps (docs/architecture.md, invariant 4), and its episode.

A fact about a person is kept only when that person wrote every observation cited as its
evidence; a persona's memory of a person likewise; a persona's knowledge only when members'
words teach it (two people at least, or staff) and it names no member. The round's new facts
and the channel's waiting candidates are then held to each person's cap: those beyond it are
deferred, and a fact its subject forgot is dropped. Every fact not kept is logged and counted.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from botmemory.clock import DAY_MS, Clock, epoch_seconds
from botmemory.consolidation import dating
from botmemory.consolidation import summary as channel_summary
from botmemory.consolidation.batch import WORDS, Batch
from botmemory.consolidation.candidates import (
    as_fact,
    evidence_messages,
    stale,
    what_of,
    within_cap,
)
from botmemory.consolidation.model.contract import MAX_FACTS, ConsolidationAnswer, ProposedFact
from botmemory.consolidation.outcome import DiscardedFact, Outcome
from botmemory.memory.behaviour import behaviour_request
from botmemory.memory.personas import PersonaDirectory
from botmemory.memory.visibility import Where, learned_where
from botmemory.people.names import names_pattern, nobody_named
from botmemory.people.optout import OptOuts
from botmemory.records import (
    Episode,
    Fact,
    FactPriority,
    FactSource,
    MemoryScope,
    Observation,
    Persona,
    scope_of,
)
from botmemory.search.keywords import tokens
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.commit import newest_evidence_ms
from botmemory.storage.keys import episode_sk
from botmemory.storage.repository import MemoryRepository
from botmemory.text import clean, content_hash, has_pings, normalized, short_id

log = logging.getLogger(__name__)


# The observations a kept fact cites as its provenance, at most.
MAX_PROVENANCE = 10

# A persona's knowledge may hold nothing that looks like a Discord id (a member's, a role's).
SNOWFLAKE_LIKE = re.compile(r"(?<!\d)\d{15,21}(?!\d)")


@dataclass
class Judgement:
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


# Judging a proposed fact -------------------------------------------------------------------


def _rejection(candidate: ProposedFact, text: str, batch: Batch) -> str | None:
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


def _self_rejection(candidate: ProposedFact, text: str, batch: Batch) -> str | None:
    """A fact about a person: from that person's own words only (docs/architecture.md, invariant 4)."""
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


def _knowledge_rejection(text: str, evidence: list[int], batch: Batch) -> str | None:
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


def _teaching(text: str, evidence: list[int], batch: Batch) -> list[int]:
    """The cited lines that say the knowledge: each shares a content word with it (the
    search's own tokens: stemmed, stopwords out, any script). A greeting or an unrelated line
    shares none and teaches nothing."""
    said = set(tokens(text))
    return [
        number
        for number in dict.fromkeys(evidence)
        if (cited := batch.by_number.get(number)) is not None and said & set(tokens(cited.content))
    ]


def _names_a_member(text: str, batch: Batch) -> str | None:
    """Why a persona's knowledge names someone: an id, a name the server's registry knows as
    one member's, or any name of anyone who spoke in the batch (their nickname, global name
    or account name) (None: it names no one)."""
    if SNOWFLAKE_LIKE.search(text):
        return "names a member: holds an id"
    # The registry is read by key for the words of this text too (model output).
    index = batch.name_lookup.index([text]) if batch.name_lookup else batch.names
    if (index or nobody_named()).named_in(text):
        return "names a member of this server"
    names = list(batch.authors.values()) + [n for a in batch.aliases.values() for n in a]
    spoken = names_pattern([*names, *(normalized(n) for n in names)])
    if spoken is not None and (spoken.search(text) or spoken.search(normalized(text))):
        return "names someone who spoke in this batch"
    return None


def _address(candidate: ProposedFact, batch: Batch) -> tuple[str, str, str | None]:
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


def _note_priority(
    priorities: dict[str, FactPriority], fact_id: str, priority: FactPriority
) -> None:
    """A fact proposed more than once (or waiting, and proposed again) keeps its highest."""
    current = priorities.get(fact_id)
    if current is None or priority.rank < current.rank:
        priorities[fact_id] = priority


def discard(
    outcome: Outcome, user_id: str, text: str, reason: str, fact_id: str | None = None
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


class Judge:
    """Judges the memory model's answer against the batch it was shown."""

    def __init__(
        self,
        repository: MemoryRepository,
        settings: Settings,
        clock: Clock,
        opt_outs: OptOuts,
        personas: PersonaDirectory | None,
    ) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock
        self._opt_outs = opt_outs
        self._personas = personas

    def judge(
        self,
        answer: ConsolidationAnswer,
        batch: Batch,
        known: dict[str, Fact],
        outcome: Outcome,
    ) -> Judgement:
        for rejected in answer.rejected:
            discard(outcome, rejected.user_id, rejected.text, rejected.reason)
        for extra in answer.facts[MAX_FACTS:]:
            discard(
                outcome, extra.user_id, extra.text, f"beyond the answer's cap of {MAX_FACTS} facts"
            )
        proposed = answer.facts[:MAX_FACTS]
        priorities: dict[str, FactPriority] = {}
        facts, superseded, superseded_by = self._accept_facts(
            proposed, batch, known, outcome, priorities
        )
        judged = self.judge_candidates(facts, known, priorities, batch, outcome)
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
        judgement = Judgement(facts, superseded, superseded_by, episode)
        judgement.deferred, judgement.priorities = judged.deferred, priorities
        return judgement

    def judge_candidates(
        self,
        facts: list[Fact],
        known: dict[str, Fact],
        priorities: dict[str, FactPriority],
        batch: Batch,
        outcome: Outcome,
    ) -> Judgement:
        """The round's new facts and the channel's waiting candidates (botmemory.consolidation.candidates)
        that may still be kept, within each person's cap: those beyond it are deferred."""
        queued = self._waiting_facts(batch, outcome, priorities)
        fresh = {f.fact_id for f in facts}
        facts = facts + [f for f in queued if f.fact_id not in fresh]
        facts = self._not_forgotten(facts, outcome)
        kept, over = self._few_new_per_person(
            facts, known, outcome, priorities, [c.fact.fact_id for c in batch.candidates]
        )
        return Judgement(kept, deferred=over, priorities=priorities)

    def _waiting_facts(
        self, batch: Batch, outcome: Outcome, priorities: dict[str, FactPriority]
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
                discard(outcome, fact.user_id, fact.text, reason, fact.fact_id)
                continue
            facts.append(as_fact(candidate, now, self._settings.fact_retention_days))
            _note_priority(priorities, fact.fact_id, candidate.priority)
        return facts

    def _channel_persona(self, batch: Batch, channel_id: str) -> Persona | None:
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
                discard(outcome, fact.user_id, fact.text, "forgotten by its subject", fact.fact_id)
            else:
                kept.append(fact)
        return kept

    def _accept_facts(
        self,
        proposed: list[ProposedFact],
        batch: Batch,
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
            cited_here = [batch.by_number[n] for n in candidate.evidence if n in batch.by_number]
            reason = _rejection(candidate, text, batch) or dating.unsound_dates(
                text, cited_here, batch, now
            )
            if reason:
                discard(outcome, candidate.user_id, candidate.text, reason)
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
            fact = Fact(
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
            accepted[fact_id] = dating.with_times(fact, evidence, candidate.valid_until, batch, now)
            replaced: list[Fact] = []
            for old_id in candidate.supersedes:
                old = known.get(old_id)
                if old is None or old.user_id != subject or old.scope != scope:
                    log.info(
                        "ignored supersession of an unknown or foreign fact",
                        extra={"fact_id": old_id},
                    )
                    continue
                replaced.append(old)
            # Only a later statement replaces: words said before what they would replace (a
            # late batch, a backfill) are out of date, and dropped (botmemory.when).
            if any(
                old.fact_id != fact_id and not dating.said_after(accepted[fact_id], old)
                for old in replaced
            ):
                del accepted[fact_id], cited[fact_id]
                discard(
                    outcome,
                    candidate.user_id,
                    candidate.text,
                    "said before the fact it would replace was last said",
                    fact_id,
                )
                continue
            for old in replaced:
                superseded[old.fact_id] = old
                superseded_by[old.fact_id] = accepted[fact_id]
        for fact_id in accepted:  # restating a fact keeps it active
            superseded.pop(fact_id, None)
        return list(accepted.values()), list(superseded.values()), superseded_by

    def _learned_where(self, batch: Batch) -> Where:
        """The channel fields of the facts this round learns (botmemory.memory.visibility): its
        channel, public when @everyone can view it now (never a direct message)."""
        channel_id = batch.observations[0].channel_id if batch.observations else ""
        public = batch.scope != scope_of(None) and self._repository.channel_is_public(
            batch.scope, channel_id
        )
        return learned_where(channel_id, public)

    def _episode(
        self, channel_id: str, batch: Batch, summary: str, participants: list[str]
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
