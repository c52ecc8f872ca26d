"""Failed consolidation attempts: how a batch that keeps failing is retried, split and quarantined.

A channel's STATE item keeps one record of its failures. A batch that fails is retried from
the same head (its oldest observation) after a back-off; after `max_attempts` failures at
that head the batch is split, by bisection over the range that failed: every later round
halves the batch size (a failure says what fails is in that half, a success that it lies
after it), down to a single observation; a single observation that still fails is
quarantined (consumed without facts), and once the range is passed the channel goes back
to whole batches. The back-off grows with every failure since the channel last consolidated
normally, so a channel that fails forever costs a bounded number of model calls a day.

An outage is not a poison batch: a failure where the provider gave no answer at all
(ModelUnavailable) counts against the batch only when the model answered other rounds since
the channel's failures began. Otherwise the channel only waits its back-off and tries the same batch
again: nothing is split or quarantined while the provider answers no one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from botmemory.records import Attempts

MINUTE_MS = 60_000


@dataclass(frozen=True)
class RetryPolicy:
    """The limits: attempts before a batch is split, and the back-off between attempts."""

    max_attempts: int = 3
    backoff_ms: int = 15 * MINUTE_MS
    backoff_max_ms: int = 120 * MINUTE_MS

    def backoff(self, failures: int) -> int:
        """The wait after the `failures`-th failure in a row: doubling, capped."""
        exponent = min(max(failures - 1, 0), 30)
        return int(min(self.backoff_ms * 2**exponent, self.backoff_max_ms))

    def after_failure(
        self,
        previous: Attempts | None,
        batch: list[str],
        error: str,
        now_ms: int,
        *,
        counted: bool = True,
    ) -> tuple[Attempts, bool]:
        """The record after the batch (its observations' sort keys, oldest first) failed,
        and whether the batch is to be quarantined now. `counted=False`: nothing says the
        batch is at fault (an outage): it waits its back-off and is tried again as it was."""
        failures = (previous.failures if previous else 0) + 1
        head = batch[0] if batch else None
        since = previous.failing_since_ms if previous else None
        since = now_ms if since is None else since
        if not counted:
            kept = previous or Attempts(failures=0, head=head)
            waited = replace(kept, failures=failures, error=error, failing_since_ms=since)
            return replace(waited, retry_at_ms=now_ms + self.backoff(failures)), False
        if previous and previous.splitting:
            count = 1
        else:
            count = previous.count + 1 if previous and previous.head == head else 1
        record = Attempts(
            failures=failures,
            error=error,
            head=head,
            count=count,
            retry_at_ms=now_ms + self.backoff(failures),
            split_size=previous.split_size if previous else None,
            split_until=previous.split_until if previous else None,
            failing_since_ms=since,
        )
        if not record.splitting and count < self.max_attempts:
            return record, False  # retried whole, from the same head, after the back-off
        if len(batch) <= 1:
            # Alone and still failing: consumed without facts. Later batches go on at once.
            return Attempts(failures=failures, error=error, failing_since_ms=since), True
        # What fails lies in this batch: bisect it.
        return replace(record, split_size=math.ceil(len(batch) / 2), split_until=batch[-1]), False

    @staticmethod
    def after_success(
        previous: Attempts | None, batch: list[str], model_called: bool
    ) -> Attempts | None:
        """The record after a batch was consumed: None once the channel is healthy again."""
        if previous is None:
            return None
        in_range = (
            previous.splitting
            and previous.split_until is not None
            and bool(batch)
            and batch[-1] < previous.split_until
        )
        if not in_range and model_called:
            return None  # the model answered for a whole batch: the channel is healthy
        # Still inside the failing range (what fails lies after this batch: halve again), or
        # no model call to prove the channel healthy (keep the back-off count).
        return Attempts(
            failures=previous.failures,
            error=previous.error,
            split_size=math.ceil(len(batch) / 2) if in_range else None,
            split_until=previous.split_until if in_range else None,
        )
