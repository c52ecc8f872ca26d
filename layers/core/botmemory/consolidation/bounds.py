"""How long an observation may wait before a round consumes it: invariant 17's bounds.

Every observation is consumed (or skipped with a logged and counted reason: an opt-out, a
delete, a quarantined batch) within a bound of being stored, while the memory model answers.
The bounds follow from the path the template wires: the table's stream hands a channel to the
worker queue within its batching window; SweepFunction runs every SWEEP_PERIOD_MS and hands
out every channel whose place on its list has passed; a worker round takes at most its model
call's worst case and a margin (`round_reserve_ms`).

- A full batch (MEMORY_CONSOLIDATE_EVERY waiting): the stream's window, the window its queue
  message may wait behind (deduplication), and two rounds (one may be running when it comes).
- Below the threshold: the channel joins the sweep's list when the stream hands it out and is
  due MEMORY_IDLE_FLUSH_MINUTES later; a tiny one (1 to 5 waiting) once its oldest observation
  is MEMORY_TINY_FLUSH_MINUTES old. Then one sweep period, the stream's window and a round.
- A batch that fails alone: each failure is followed by a back-off of at most
  MEMORY_RETRY_BACKOFF_MAX_MINUTES, then the next sweep. After MEMORY_BATCH_MAX_ATTEMPTS
  failures at one head the batch is halved until one observation fails alone and is
  quarantined; the next starts again after the idle time. An outage (the model answers no one)
  does not count: the bounds start again when the model answers.
"""

from __future__ import annotations

import math

from botmemory.consolidation.attempts import MINUTE_MS
from botmemory.consolidation.consolidator import round_reserve_ms
from botmemory.consolidation.work import ENQUEUE_WINDOW_MS, SWEEP_WINDOW_MS
from botmemory.settings.config import Settings

# template.yaml: SweepFunction's schedule, rate(5 minutes) (tests/stack checks they agree);
# its deduplication window is the same period.
SWEEP_PERIOD_MS = SWEEP_WINDOW_MS
# template.yaml: ConsolidateFunction's MaximumBatchingWindowInSeconds on the table's stream.
STREAM_WINDOW_MS = ENQUEUE_WINDOW_MS


def full_batch_ms(settings: Settings) -> int:
    """A full batch, while the workers keep up (see docs/architecture.md, invariant 17)."""
    return STREAM_WINDOW_MS + ENQUEUE_WINDOW_MS + 2 * round_reserve_ms(settings)


def quiet_ms(settings: Settings) -> int:
    """An observation of a channel below the threshold, tiny or not."""
    wait = max(settings.idle_flush_minutes, settings.tiny_flush_minutes) * MINUTE_MS
    return wait + SWEEP_PERIOD_MS + STREAM_WINDOW_MS + round_reserve_ms(settings)


def after_outage_ms(settings: Settings) -> int:
    """Once the model answers again after an outage: every channel's next try is at most one
    longest back-off away, then the sweep hands it out and a round consumes it."""
    return (
        settings.retry_backoff_max_minutes * MINUTE_MS
        + SWEEP_PERIOD_MS
        + round_reserve_ms(settings)
    )


def failures_to_quarantine(settings: Settings, batch: int) -> int:
    """Failures before the first observation of a batch of `batch` that fails alone is
    quarantined: the attempts at its head, then one per halving down to one observation."""
    return settings.batch_max_attempts + math.ceil(math.log2(max(batch, 1)))


def failing_ms(settings: Settings, position: int, batch: int) -> int:
    """The `position`-th (1-based) observation of a channel whose every batch fails alone,
    `batch` waiting: each observation before it and itself take their failures, each a
    back-off and a sweep apart, then the idle time before the next batch's first try."""
    per_failure = (
        settings.retry_backoff_max_minutes * MINUTE_MS
        + SWEEP_PERIOD_MS
        + round_reserve_ms(settings)
    )
    per_observation = (
        failures_to_quarantine(settings, batch) * per_failure
        + settings.idle_flush_minutes * MINUTE_MS
        + SWEEP_PERIOD_MS
    )
    return quiet_ms(settings) + position * per_observation
