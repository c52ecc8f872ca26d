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
import uuid
from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import Clock, ttl_alive
from botmemory.consolidation import backlog, dating
from botmemory.consolidation import summary as channel_summary
from botmemory.consolidation.attempts import MINUTE_MS, RetryPolicy
from botmemory.consolidation.batch import Batch, BatchReader, deleted_in, speakers_of
from botmemory.consolidation.failures import FailedRounds
from botmemory.consolidation.indexing import index_round
from botmemory.consolidation.judgement import Judge, Judgement
from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    MemoryModel,
    ModelInput,
    PersonaBrief,
    render_batch,
)
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.consolidation.people_writes import PeopleWriter
from botmemory.consolidation.plan import CommitPlanner
from botmemory.memory import short_term
from botmemory.memory.hot_tier import HotTier
from botmemory.memory.personas import PersonaDirectory
from botmemory.people.optout import OptOuts
from botmemory.people.retention import RetentionReader, clamp_commit
from botmemory.records import ChannelSummary, Fact
from botmemory.search.index_sync import IndexWriter
from botmemory.search.passages import holders
from botmemory.settings.config import Settings
from botmemory.storage.commit import CommitRejected, ConsolidationCommit, Lock, LockRefused
from botmemory.storage.keys import server_scope_of
from botmemory.storage.observations import PendingCount
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)


MAX_ROUNDS_PER_TRIGGER = 4

# What a round needs besides its model call: the table's reads, the commit, the index.
ROUND_MARGIN_MS = 20_000
# Kept for callers that want a fixed figure: a round with the default model settings
# (30 s timeout x 3 attempts) and its margin.
ROUND_RESERVE_MS = 110_000
# A channel with at most this many observations waiting is tiny: the sweep flushes it after
# MEMORY_TINY_FLUSH_MINUTES instead of MEMORY_IDLE_FLUSH_MINUTES (one model call for more).
TINY_PENDING = 5

TimeLeft = Callable[[], int]


def _unbounded() -> int:
    return 2**31


def model_worst_case_ms(settings: Settings) -> int:
    """The longest one memory model call may take: its timeout on every attempt."""
    return int(settings.model_timeout_seconds * 1000) * settings.model_max_attempts


def round_reserve_ms(settings: Settings) -> int:
    """The time a round needs to finish in the worst case; no round starts with less left."""
    return model_worst_case_ms(settings) + ROUND_MARGIN_MS


def grown_round_reserve_ms(settings: Settings) -> int:
    """The same for a round over a backlog (botmemory.consolidation.backlog): its call has
    GROWN_CALL_SCALE times the time, and its runs each a commit."""
    return backlog.GROWN_CALL_SCALE * model_worst_case_ms(settings) + 2 * ROUND_MARGIN_MS


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
        self._index_writer = index_writer
        self._settings = settings
        self._retention = RetentionReader(repository, settings, clock)
        self._model = model
        self._clock = clock
        self._opt_outs = opt_outs
        self._hot_tier = HotTier(repository, settings, clock, opt_outs.hash_of, self._retention)
        self._retry = RetryPolicy(
            max_attempts=settings.batch_max_attempts,
            backoff_ms=settings.retry_backoff_minutes * MINUTE_MS,
            backoff_max_ms=settings.retry_backoff_max_minutes * MINUTE_MS,
        )
        # The round's collaborators: the batch read, the judgement, the commit plan. The
        # personas say which persona a channel answers as (botmemory.memory.personas); None:
        # no personas.
        self._reader = BatchReader(repository, settings, clock, opt_outs, personas, self._retention)
        self._judge = Judge(repository, settings, clock, opt_outs, personas)
        self._planner = CommitPlanner(
            repository, settings, clock, opt_outs, self._retry, indexing=index_writer is not None
        )
        self._time_left: TimeLeft = _unbounded  # the running trigger's, while it runs
        self._people = PeopleWriter(repository, clock, opt_outs)
        self._failures = FailedRounds(
            repository, settings, clock, self._retry, self._planner, self._retention
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
            if time_left_ms() < round_reserve_ms(self._settings):
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
        one model call, and only while a round can still finish in the time left (its model
        call's worst case included). The last outcome says whether the channel was left
        behind (`again`: its worker enqueues it once more)."""
        reserve = round_reserve_ms(self._settings)
        if self._enabled and time_left_ms() < reserve:
            return [Outcome(channel_id, Status.OUT_OF_TIME, again=True, detail="no time left")]
        self._time_left = time_left_ms
        try:
            outcomes = [self._round(channel_id, force=force)]
            while (
                outcomes[-1].status == Status.CONSOLIDATED
                and outcomes[-1].more_pending
                # A backlog goes on in grown rounds only: without the time for one, the
                # channel is handed on to an invocation that has it.
                and time_left_ms()
                >= (grown_round_reserve_ms(self._settings) if outcomes[-1].runs else reserve)
                and len(outcomes) < MAX_ROUNDS_PER_TRIGGER
                and (
                    outcomes[-1].splitting  # a split batch goes on below the threshold
                    or self._due(self._repository.pending_count(channel_id, self._threshold))
                )
            ):
                outcomes.append(self._round(channel_id, force=outcomes[-1].splitting))
        finally:
            self._time_left = _unbounded
        self._left_behind(outcomes[-1])
        return outcomes

    def flush(self, channel_id: str, *, time_left_ms: TimeLeft = _unbounded) -> list[Outcome]:
        """The sweep's turn for a quiet channel. How long it waited is read from its oldest
        waiting observation, never from its place on the sweep's list (which says only when
        the sweep was to come back, and moves each time it defers). A tiny one (1 to TINY_PENDING waiting) is consolidated once its oldest waiting
        observation is MEMORY_TINY_FLUSH_MINUTES old; until then it moves down the list to
        that moment, and its one model call takes whatever has come meanwhile. A channel
        that backs off after a failure moves to its next try."""
        if not self._enabled:
            return [Outcome(channel_id, Status.OFF)]
        pending = self._repository.pending_count(channel_id, TINY_PENDING + 1)
        due_ms = self._tiny_due_ms(pending)
        if due_ms is not None and due_ms > self._clock.now_ms():
            self._repository.reschedule_sweep(channel_id, due_ms - self._idle_ms)
            detail = f"tiny: {pending.observations}"
            return [Outcome(channel_id, Status.BELOW_THRESHOLD, detail=detail)]
        rounds = self.consolidate(channel_id, force=True, time_left_ms=time_left_ms)
        deferred_to = rounds[-1].retry_at_ms
        if rounds[-1].status == Status.DEFERRED and deferred_to is not None:
            self._repository.reschedule_sweep(channel_id, deferred_to - self._idle_ms)
        return rounds

    def _tiny_due_ms(self, pending: PendingCount) -> int | None:
        """When a tiny channel's wait ends: its oldest waiting observation's time (never
        later than now, so a clock that jumped back cannot push it away) plus the tiny
        wait; None when the channel is not tiny."""
        if pending.oldest_ms is None or not 0 < pending.observations <= TINY_PENDING:
            return None
        tiny_ms = max(self._settings.tiny_flush_minutes * MINUTE_MS, self._idle_ms)
        return min(pending.oldest_ms, self._clock.now_ms()) + tiny_ms

    def _left_behind(self, last: Outcome) -> None:
        """After the last round: a channel with a full batch still waiting (or a split going
        on) is left behind; one with less waiting stays on the sweep's list. Observations
        stored while the round ran may have had their queue message dropped as a duplicate:
        this count finds them."""
        if last.status == Status.OUT_OF_TIME:
            last.again = True
            return
        if last.status != Status.CONSOLIDATED:
            return
        if last.splitting:
            last.again = True
            return
        every = self._settings.consolidate_every
        waiting = self._repository.count_pending(last.channel_id, every)
        if waiting >= every:
            last.again = True
        elif waiting:
            self._repository.mark_pending_since(last.channel_id, self._clock.now_ms())

    @property
    def _enabled(self) -> bool:
        return self._settings.memory_enabled and self._model is not None

    @property
    def _idle_ms(self) -> int:
        return self._settings.idle_flush_minutes * MINUTE_MS

    @property
    def _threshold(self) -> int:
        return self._settings.consolidate_every

    def _due(self, pending: PendingCount) -> bool:
        """A full batch waits, or (MEMORY_ANSWERED_TURNS_PER_REFRESH) the bot has answered
        often enough since the last round: a conversation with it refreshes the summary and
        the speakers' facts before the batch size is reached."""
        turns = self._settings.answered_turns_per_refresh
        return pending.observations >= self._threshold or (0 < turns <= pending.answers)

    # One round ----------------------------------------------------------------------

    def _round(self, channel_id: str, *, force: bool) -> Outcome:
        if not self._enabled:
            return Outcome(channel_id, Status.OFF)
        settings = self._settings
        pending = self._repository.pending_count(channel_id, self._threshold)
        waiting = pending.observations
        # Candidates alone (botmemory.consolidation.candidates) get the sweep's round, without a model call.
        alone = waiting == 0 and force and self._repository.has_candidates(channel_id)
        if waiting == 0 and not alone:
            if force:
                self._repository.clear_pending_since(channel_id)
            return Outcome(channel_id, Status.NOTHING_PENDING)
        if not force and not self._due(pending):
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
        self._people.repair(lock)  # what the last round's commit could not write after it
        # Read only when the last round left some (its commit says so on the channel's state).
        read = (
            self._repository.read_candidates(channel_id) if lock.candidates or candidates else None
        )
        waiting = read.found if read else []
        # A channel that is behind gets a grown batch when a grown call can still finish.
        grow = self._time_left() >= grown_round_reserve_ms(self._settings)
        batch = self._reader.read(lock, waiting, grow=grow)
        if batch is None and waiting:  # candidates alone: judged already, no model call
            batch = self._reader.prepare(
                [], [], scope=waiting[0].server_scope, more=False, waiting=False
            )
        if batch is None:
            self._repository.release_lock(lock)
            return Outcome(channel_id, Status.NOTHING_PENDING)
        batch.candidates = waiting
        # Before anything of the round exists: erasure finds the channel through them.
        spoken = self._people.spoken(batch)
        outcome = Outcome(channel_id, Status.CONSOLIDATED)
        outcome.candidates_unreadable = read.unreadable if read else 0
        judgement = Judgement()
        batch.persona = self._reader.persona_of(batch)
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
            known = self._reader.known_facts(batch)
            try:
                answer = self._ask_model(batch, known, summary, outcome)
            except Exception as exc:  # counted, retried later, split, at worst quarantined
                return self._failures.failed(lock, batch, outcome, exc, self._commit)
            self._failures.answered()
            batch.recent = {r.user_id: r.line for r in answer.recent}
            judgement = self._judge.judge(answer, batch, known, outcome)
            judgement.summary = self._rolled_summary(summary, answer, batch, outcome)
        elif batch.candidates:
            judgement = self._judge.judge_candidates([], {}, {}, batch, outcome)
        judgement.summary_replaces = stored.episode_id if stored else None
        judgement.summary_dropped = dropped
        # Before the commit, so that a failed commit leaves the deletes pending to retry.
        outcome.retired = self._reader.retire_deleted(batch)
        outcome.summaries_dropped = int(dropped) + self._drop_covering_archives(channel_id, batch)
        if batch.grown:
            return self._commit_runs(lock, batch, judgement, outcome, spoken)
        commit = self._commit_round(lock, batch, judgement, outcome, spoken)
        if outcome.status == Status.CONSOLIDATED:
            self._after_round(commit, batch, outcome, frozenset(f.fact_id for f in commit.facts))
        return outcome

    def _commit_round(
        self,
        lock: Lock,
        batch: Batch,
        judgement: Judgement,
        outcome: Outcome,
        spoken: list[tuple[str, str]],
        *,
        first: bool = True,
        last: bool = True,
    ) -> ConsolidationCommit:
        """Plan and send one commit (a round's, or one run of a backlog's), then index it."""
        commit = self._planner.build(lock, batch, judgement, outcome)
        retention = self._retention.of(server_scope_of(batch.scope))
        if retention.shortened(self._settings):  # planned with the deployment's
            clamp_commit(commit, retention)
        commit.keep_lock = not last
        if not first and not commit.candidate_puts:
            commit.candidates_left = None  # the first run settled those waiting
        passages = self._planner.message_passages(batch)
        commit.holders = holders(passages)
        self._commit(commit, batch, outcome)
        if outcome.status == Status.REJECTED and spoken:
            self._people.refused(lock.channel_id, spoken)
        if outcome.status == Status.CONSOLIDATED:
            index_round(self._index_writer, commit, batch, passages, outcome)
        return commit

    def _commit_runs(
        self,
        lock: Lock,
        batch: Batch,
        judgement: Judgement,
        outcome: Outcome,
        spoken: list[tuple[str, str]],
    ) -> Outcome:
        """A grown batch, committed run by run (botmemory.consolidation.backlog). A run that
        cannot commit ends the round; what was committed before it stays."""
        cut = backlog.runs(lock, batch)
        fresh: set[str] = set()
        done = 0
        for index, (run, part) in enumerate(
            zip(cut, backlog.split_judgement(judgement, cut), strict=True)
        ):
            last = index == len(cut) - 1
            piece = backlog.run_batch(batch, run, first=index == 0, last=last)
            commit = self._commit_round(
                lock, piece, part, outcome, spoken, first=index == 0, last=last
            )
            if outcome.status != Status.CONSOLIDATED:
                break
            done, fresh = done + 1, fresh | {f.fact_id for f in commit.facts}
            if outcome.people_unwritten and not last:  # the next round writes them first
                self._repository.release_lock(lock)
                break
        outcome.runs = done
        if done and done < len(cut):
            log.warning(
                "backlog round cut short; the rest stays pending",
                extra={"channel_id": lock.channel_id, "runs": done, "of": len(cut)},
            )
            outcome.status, outcome.more_pending = Status.CONSOLIDATED, True
        if done:
            self._after_round(commit, batch, outcome, frozenset(fresh))
        return outcome

    def _after_round(
        self, commit: ConsolidationCommit, batch: Batch, outcome: Outcome, fresh: frozenset[str]
    ) -> None:
        """Once the round is committed: its speakers' facts tended, their short-term lines."""
        self._tend_speakers(batch, outcome, fresh)
        outcome.short_term_written = self._short_term(commit, batch)

    def _ask_model(
        self,
        batch: Batch,
        known: dict[str, Fact],
        summary: ChannelSummary | None,
        outcome: Outcome,
    ) -> ConsolidationAnswer:
        """One model call over the batch, the channel's persona, the participants' current
        facts (with a persona, its memories of them and its knowledge), the pins and the
        channel's rolling summary."""
        assert self._model is not None  # nosec B101 # narrows the type for mypy; never guards input; rounds run only when memory is enabled
        persona = batch.persona
        model_input = ModelInput(
            summary=summary.summary if summary else "",
            summary_max_chars=self._settings.summary_max_chars,
            channel_id=outcome.channel_id,
            observations=batch.numbered,
            persona=PersonaBrief(id=persona.persona_id, name=persona.name) if persona else None,
            facts=[dating.known_fact(f) for f in known.values()],
            pins=self._reader.pin_texts(batch.scope, outcome.channel_id),
            now_ms=batch.now_ms,
            zone=batch.zone,
        )
        if batch.grown:  # a backlog's call: more to read, so more room and time to answer
            scale = backlog.GROWN_CALL_SCALE
            model_input.max_output_tokens = scale * self._settings.model_max_output_tokens
            model_input.timeout_seconds = scale * self._settings.model_timeout_seconds
        outcome.model_input_chars = len(render_batch(model_input))
        outcome.model_calls = 1
        return self._model.consolidate(model_input)

    def _rolled_summary(
        self,
        current: ChannelSummary | None,
        answer: ConsolidationAnswer,
        batch: Batch,
        outcome: Outcome,
    ) -> channel_summary.RolledSummary:
        assert self._model is not None  # nosec B101 # narrows the type for mypy: rounds run only when memory is enabled
        if batch.more:  # a backlog round: the channel is behind, the summary waits
            return channel_summary.RolledSummary()
        # The stretch of what the model was shown: a message hidden as deleted is not in it.
        start_ms, end_ms = channel_summary.stretch(batch.by_number.values()) or (
            min(o.at_ms for o in batch.observations),
            max(o.at_ms for o in batch.observations),
        )
        # A recompression is one more model call: made only when it can still finish.
        room = self._time_left() >= model_worst_case_ms(self._settings) + ROUND_MARGIN_MS
        rolled = channel_summary.roll(
            current,
            answer.channel_summary,
            model=self._model if room else None,
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

    def _commit(self, commit: ConsolidationCommit, batch: Batch, outcome: Outcome) -> Outcome:
        """Send one commit and what follows it; the outcome adds what it wrote."""
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

        self._people.after_commit(commit.lock.channel_id, commit.people_due, outcome)
        if commit.history_later:  # idempotent, like the pointers
            barred = self._opt_outs.barred({e.user_id for e in commit.history_later})
            self._repository.put_history(
                [e for e in commit.history_later if e.user_id not in barred]
            )
        if commit.named_later:  # idempotent: written after the commit that needed them
            barred = self._opt_outs.barred({n.user_id for n in commit.named_later})
            self._repository.put_named([n for n in commit.named_later if n.user_id not in barred])
        outcome.consumed += len(commit.consumed)
        outcome.more_pending = batch.more
        outcome.splitting = commit.attempts is not None and commit.attempts.splitting
        outcome.facts_written += len(commit.facts)
        outcome.superseded += len(commit.superseded)
        if commit.episode:
            outcome.episode_id = commit.episode.episode_id
        if commit.quarantine:  # no round follows a quarantine to tend them
            self._after_round(commit, batch, outcome, frozenset())
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

    def _short_term(self, commit: ConsolidationCommit, batch: Batch) -> int:
        """After the commit: in a public server channel, the entry of each speaker the model
        wrote a line for (botmemory.memory.short_term, one UpdateItem each), for people not
        barred by then; each keeps their newest MEMORY_SHORT_TERM_PER_PERSON. A failure costs
        only these entries: logged."""
        keep = self._settings.short_term_per_person
        if keep == 0 or not commit.consumed or not batch.recent:
            return 0
        channel_id = commit.lock.channel_id
        try:
            if not short_term.crosses_channels(self._repository, batch.scope, channel_id):
                return 0
            entries = short_term.entries_for_round(
                [batch.by_number[n] for n in batch.by_number],
                batch.recent,
                scope=batch.scope,
                channel_id=channel_id,
                bot_user_id=self._settings.bot_user_id,
                settings=self._settings,
                now_ms=self._clock.now_ms(),
            )
            barred = self._opt_outs.barred({e.user_id for e in entries})
            entries = [e for e in entries if e.user_id not in barred]
            entries = [e for e in entries if self._repository.record_short_term(e, keep)]
        except Exception as exc:  # short-term memory is never a reason to lose a round
            log.warning(
                "short-term entries not written",
                extra={"channel_id": channel_id, "error": repr(exc)[:300]},
            )
            return 0
        return len(entries)

    def _stored_summary(self, channel_id: str, batch: Batch) -> tuple[ChannelSummary | None, bool]:
        """The channel's summary as stored (read strongly consistent when the round needs
        it), and whether it covers a message this batch deletes: then the round drops it (a
        paraphrase cannot reliably lose one message) and builds the next from the batch."""
        deleted = channel_summary.message_times(deleted_in(batch.observations))
        if not batch.numbered and not deleted:
            return None, False
        stored = self._repository.channel_summary(channel_id, consistent=True)
        return stored, stored is not None and channel_summary.covers(stored, deleted)

    def _drop_covering_archives(self, channel_id: str, batch: Batch) -> int:
        """Delete the archived summaries covering a message this batch deletes (their
        passages leave the search index through the stream). Before the commit, like the
        facts the delete retires: a refused commit leaves the delete pending, and the retry
        finds nothing more to delete."""
        deleted = channel_summary.message_times(deleted_in(batch.observations))
        covering = self._repository.summary_archives_covering(channel_id, deleted)
        if covering:
            self._repository.delete_summary_archives(channel_id, covering)
            log.info(
                "dropped archived summaries covering deleted messages",
                extra={"channel_id": channel_id, "dropped": len(covering)},
            )
        return len(covering)

    def _tend_speakers(self, batch: Batch, outcome: Outcome, fresh: frozenset[str]) -> None:
        """After the commit, one read of each speaker's facts: delete those whose retention
        ran out (TTL is lazy), and keep their hot tier lean (botmemory.memory.hot_tier). The round
        is committed: a tier write that fails is logged and left to the next round."""
        now = self._clock.now_ms()
        expired: list[Fact] = []
        for scope, user_id in speakers_of(batch):
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
