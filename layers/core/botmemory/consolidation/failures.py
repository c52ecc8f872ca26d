"""A round whose model call failed: counted against its batch, backed off, split, at worst
quarantined (botmemory.consolidation.attempts), unless the provider answers no one (an outage),
and the deployment-wide record of when the model last answered that tells the two apart."""

from __future__ import annotations

import logging
from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError

from botmemory.clock import DAY_MS, Clock, epoch_seconds
from botmemory.consolidation.attempts import MINUTE_MS, RetryPolicy
from botmemory.consolidation.batch import Batch
from botmemory.consolidation.model.contract import ModelUnavailable
from botmemory.consolidation.outcome import Outcome, Status
from botmemory.consolidation.plan import CommitPlanner
from botmemory.people.retention import Kept, RetentionReader
from botmemory.records import Attempts, Quarantine
from botmemory.settings.config import Settings
from botmemory.storage.commit import ConsolidationCommit, Lock
from botmemory.storage.repository import MemoryRepository
from botmemory.text import content_hash, short_id

log = logging.getLogger(__name__)

# How a round's commit is sent (Consolidator._commit): the quarantine is one.
CommitRound = Callable[[ConsolidationCommit, Batch, Outcome], Outcome]


class FailedRounds:
    def __init__(
        self,
        repository: MemoryRepository,
        settings: Settings,
        clock: Clock,
        retry: RetryPolicy,
        planner: CommitPlanner,
        retention: RetentionReader,
    ) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock
        self._retry = retry
        self._planner = planner
        self._retention = retention  # a quarantine names messages: kept as long as they are
        self._answer_recorded_ms = -MINUTE_MS  # when this process last recorded the model's health

    @property
    def _idle_ms(self) -> int:
        return self._settings.idle_flush_minutes * MINUTE_MS

    def failed(
        self, lock: Lock, batch: Batch, outcome: Outcome, exc: Exception, commit: CommitRound
    ) -> Outcome:
        """Count the failure against the batch's head and back off; a batch that keeps
        failing is split, and what fails alone is quarantined. A provider that answered
        nobody since the channel began failing is an outage: the channel only backs off."""
        error = str(exc)[:300]
        log.warning("memory model failed", extra={"channel_id": lock.channel_id, "error": error})
        now = self._clock.now_ms()
        counted = self._failure_counts(exc, lock.attempts)
        outcome.model_unavailable = not counted
        outcome.left_pending = len(batch.observations)
        attempts, quarantine = self._retry.after_failure(
            lock.attempts, [o.sk for o in batch.observations], error, now, counted=counted
        )
        outcome.detail = error
        if quarantine:
            return self._quarantine(lock, batch, outcome, attempts, commit)
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

    def answered(self) -> None:
        """Record that the model answers (at most once a minute from this process: a failed
        round elsewhere only needs to know it answered since that round's last failure,
        which is a back-off of minutes ago)."""
        now = self._clock.now_ms()
        if now - self._answer_recorded_ms < MINUTE_MS:
            return
        try:
            self._repository.record_model_answer(now)
        except (ClientError, BotoCoreError) as error:  # the round goes on; the next one tries
            log.warning("model health not recorded", extra={"error": repr(error)[:300]})
            return
        self._answer_recorded_ms = now

    def _failure_counts(self, exc: Exception, previous: Attempts | None) -> bool:
        """Whether a failure counts against the batch: the model answered but not usably, or
        the provider refused this request; or it answered nobody this time but has answered
        other rounds since this channel's failures began (so the batch is what fails)."""
        if not isinstance(exc, ModelUnavailable):
            return True
        if previous is None or previous.failing_since_ms is None:
            return False  # a first failure of this kind says nothing yet
        return self._repository.model_answered_after(previous.failing_since_ms)

    def _quarantine(
        self,
        lock: Lock,
        batch: Batch,
        outcome: Outcome,
        attempts: Attempts,
        commit: CommitRound,
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
            expires_at=epoch_seconds(
                now + self._retention.days_of(batch.scope, Kept.MESSAGES) * DAY_MS
            ),
        )
        quarantined = ConsolidationCommit(
            lock=lock,
            scope=batch.scope,
            consumed=batch.observations,
            discarded=batch.opted_out,
            quarantine=quarantine,
            attempts=attempts,
            guarded=self._planner.guard(quarantine.user_ids),
            redacted=batch.redacted,
            more_pending_since_ms=now if batch.waiting else None,
            now_ms=now,
        )
        outcome.status = Status.QUARANTINED
        log.warning(
            "batch quarantined: consumed without facts",
            extra={"channel_id": lock.channel_id, "observations": sks, "error": attempts.error},
        )
        return commit(quarantined, batch, outcome)
