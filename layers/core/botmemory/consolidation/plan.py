"""What a consolidation round writes: the one transaction and what follows it.

From the batch and the judgement: the facts that fit the transaction and the supersessions,
their history entries, the episode and the episodes it pushes beyond the cap, the channel
summary, the pointers under each person a text names (erasure finds those items by the
person's id), the checks on everyone written of, and the candidates settled. What does not
fit is written right after the commit, for people not barred by then, as the speakers'
profiles and the registry's new names always are (botmemory.consolidation.people_writes).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from botmemory.clock import Clock
from botmemory.consolidation.attempts import RetryPolicy
from botmemory.consolidation.batch import Batch, speakers_of
from botmemory.consolidation.candidates import settle
from botmemory.consolidation.judgement import Judgement, discard
from botmemory.consolidation.outcome import Outcome
from botmemory.memory import fact_history
from botmemory.memory.visibility import Where
from botmemory.people.names import nobody_named
from botmemory.people.optout import OptOuts
from botmemory.records import Fact, FactChange, FactHistory, HistoryActor, Named, scope_of
from botmemory.search.passages import message_passages
from botmemory.search.port import Passage
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.commit import ConsolidationCommit, Lock, NameSeen, PersonaMember
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.round_people import RoundPeople
from botmemory.text import normalized
from botmemory.when.facts import merged

log = logging.getLogger(__name__)


def _names_seen(batch: Batch) -> list[NameSeen]:
    """Registry entries that learn a member: each author under each of their current names
    (nickname, global name, account name), when the registry does not have them under it
    yet (servers only)."""
    if batch.names is None or batch.scope == scope_of(None):
        return []
    grouped: dict[str, tuple[str, set[str]]] = {}
    for (scope, user_id), name in speakers_of(batch).items():
        for each in dict.fromkeys([name, *batch.aliases.get(user_id, [])]):
            key = normalized(each)
            if scope != batch.scope or not key or user_id in batch.names.stored.get(key, ()):
                continue
            grouped.setdefault(key, (each, set()))[1].add(user_id)
    return [
        NameSeen(batch.scope, key, name, tuple(sorted(users)))
        for key, (name, users) in sorted(grouped.items())
    ]


def _places_within_cap(fact: Fact, stored: Fact | None) -> Fact:
    """`fact` adding to the stored fact's channel sets (the commit ADDs them) only the
    channels that fit their cap (botmemory.memory.visibility.MAX_FACT_CHANNELS)."""
    fits = Where.of(fact).within_cap(stored)
    if fits == Where.of(fact):
        return fact
    log.info(
        "fact's channel set full: this channel not added",
        extra={"fact_id": fact.fact_id, "channels": fact.learned_in},
    )
    return fact.model_copy(update=fits.fields())


def _fitting(
    facts: list[Fact], superseded: list[Fact], room: int, outcome: Outcome
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


class CommitPlanner:
    """Builds the commit of a round from its batch and its judgement."""

    def __init__(
        self,
        repository: MemoryRepository,
        settings: Settings,
        clock: Clock,
        opt_outs: OptOuts,
        retry: RetryPolicy,
        *,
        indexing: bool,
    ) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock
        self._opt_outs = opt_outs
        self._retry = retry
        # Whether the round writes a search index (its messages' passages are planned then).
        self._indexing = indexing

    def build(
        self, lock: Lock, batch: Batch, judgement: Judgement, outcome: Outcome
    ) -> ConsolidationCommit:
        """Everything the round writes; facts beyond what one transaction holds are dropped,
        pointers beyond it are written right after the commit."""
        now = self._clock.now_ms()
        episode = judgement.episode
        pointers = self._pointers(batch, judgement)
        speakers = speakers_of(batch)
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
            guarded=self.guard(
                [user_id for _, user_id in speakers]
                + [f.user_id for f in judgement.facts if f.user_id != keys.PERSONA_SUBJECT]
                + [user_id for f in judgement.facts for user_id in f.evidence_user_ids]
                + (episode.participant_ids if episode else [])
                # What waits on as a candidate holds its people's words too.
                + [f.user_id for f in judgement.deferred if f.user_id != keys.PERSONA_SUBJECT]
                + [user_id for f in judgement.deferred for user_id in f.evidence_user_ids]
            ),
            names=_names_seen(batch),
            redacted=batch.redacted,
            # Each candidate read costs one action, whatever becomes of it (reserved).
            candidate_deletes=[keys.candidate_sk(c.fact.fact_id) for c in batch.candidates],
        )
        # Written after the commit (botmemory.storage.round_people): kept on the channel's
        # state by it until they are.
        owed = RoundPeople(tuple(commit.people), tuple(commit.names), now)
        commit.people_due = owed.to_json() if owed else None
        facts, superseded = _fitting(
            judgement.facts, judgement.superseded, commit.room_left(), outcome
        )
        stored = self._repository.facts_at((f.scope, f.user_id, f.fact_id) for f in facts)
        facts = [
            merged(_places_within_cap(f, known), known)
            for f in facts
            for known in [stored.get((f.scope, f.user_id, f.fact_id))]
        ]
        commit.facts, commit.superseded = facts, superseded
        self._settle_candidates(commit, batch, judgement, outcome)
        commit.members = list(dict.fromkeys(m for f in facts if (m := PersonaMember.of(f))))
        # Their history entries, in the transaction while they fit (the erasure and opt-out
        # checks then cover them as they cover the facts); those beyond are written right
        # after it, for people not barred by then, as the pointers below are. Facts come
        # first: recording a change never costs a fact its place.
        history = self._history(facts, stored, superseded, judgement.superseded_by, now)
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

    def guard(self, people: Iterable[str]) -> list[str]:
        """Person hashes of everyone a commit writes anything of."""
        return sorted(
            {self._opt_outs.hash_of(p) for p in people if p and p != self._settings.bot_user_id}
        )

    def message_passages(self, batch: Batch) -> list[Passage]:
        if not self._indexing:
            return []
        # The words the model was shown: never a message deleted before it was consolidated.
        shown = batch.by_number.values()
        return message_passages(shown, batch.scope, self._settings.bot_user_id)

    def _pointers(self, batch: Batch, judgement: Judgement) -> list[Named]:
        """A pointer under each person an observation of someone else, the episode or the
        channel summary names: erasure finds those items by the person's id."""
        episode = judgement.episode
        texts = [episode.summary] if episode else []
        texts += [s.summary for s in (judgement.summary.summary, judgement.summary.archived) if s]
        # The model's words may name someone the batch's did not: their names are read too.
        names = (
            batch.name_lookup.index(texts) if batch.name_lookup else batch.names or nobody_named()
        )
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

    def _settle_candidates(
        self, commit: ConsolidationCommit, batch: Batch, judgement: Judgement, outcome: Outcome
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
            discard(outcome, fact.user_id, fact.text, reason, fact.fact_id)
        # Added up: a round over a backlog settles candidates in each of its commits.
        outcome.deferred += len(settled.queued)
        outcome.candidates_kept += settled.kept
        outcome.candidates_waiting += len(settled.puts)
        if settled.puts and commit.more_pending_since_ms is None:
            commit.more_pending_since_ms = commit.now_ms  # the sweep comes back for them

    def _history(
        self,
        facts: list[Fact],
        stored: dict[tuple[str, str, str], Fact],
        superseded: list[Fact],
        superseded_by: dict[str, Fact],
        now_ms: int,
    ) -> list[FactHistory]:
        """The history entries of what the round writes: a fact created, restated with new
        text or after it was superseded (`stored`: one consistent read of what is), and each
        fact superseded, with the newer fact's text. A fact stated again as it is: none."""
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

    def _episodes_beyond_cap(self, channel_id: str) -> list[str]:
        """Sort keys of the episodes that fall off once one more is added."""
        keep = self._settings.episodes_per_channel - 1
        newest = self._repository.recent_episodes(channel_id, keep + 5)
        return [e.sk for e in newest[keep:]]
