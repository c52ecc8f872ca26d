"""A server's history imported by staff's choice: `/memory-staff backfill start [channel]
[days]`, `status`, `cancel` (botmemory.commands.backfill).

A run reads each channel's messages of the last `days` (at most MAX_DAYS) through the same
pages catching up reads (botmemory.catchup.worker, CatchUpFunction's queue), into the same
ingest path live events take: channel privacy, channels whose memory is off, the consent
mode, paused and opted-out members apply as they do live; deleted messages are not there
to read; no answer is started; the erasure ledger keeps out what a member erased. At most
RUN_CAP messages a run, one run a server at a time (a second start reports the one under
way); staff can cancel it, and the workers stop at their next page.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from botmemory.catchup.tasks import CatchUpTask, TaskQueue
from botmemory.clock import DAY_MS
from botmemory.settings.config import MAX_BACKFILL_DAYS
from botmemory.snowflake import snowflake_at
from botmemory.storage.backfill import RUNNING, BackfillRun
from botmemory.storage.catchup import CatchUpStore

MAX_DAYS = MAX_BACKFILL_DAYS  # its owner is the settings, read at cold start
DEFAULT_DAYS = 7
RUN_CAP = 20_000  # messages a run
# Model calls a backfill costs per 1,000 messages it imports (make bench, table 10d): with the
# stream live during the import, each page of 100 is a round at most (10.0); a round may take
# what several pages brought (2.0 when the stream waits for the import's end: grown rounds,
# within MEMORY_BATCH_MAX_TOKENS). Far below a live channel's (table 2d: 50), whose rounds are
# full batches of MEMORY_CONSOLIDATE_EVERY.
MODEL_CALLS_PER_1000 = 10.0
# Who started a run (kept on it, shown by `status`): staff's command, or the bot joining the
# server (botmemory.catchup.on_join).
STAFF = "staff"
ON_JOIN = "on join"


@dataclass(frozen=True)
class Started:
    run: BackfillRun
    started: bool  # False: a run was already under way, and this is it


class Backfiller:
    def __init__(self, store: CatchUpStore, queue: TaskQueue) -> None:
        self._store = store
        self._queue = queue

    def start(
        self,
        guild_id: str,
        channel_id: str | None,
        days: int,
        now_ms: int,
        started_by: str = STAFF,
    ) -> Started:
        """A run over one channel, or every channel the table knows of the server (None)."""
        days = min(max(days, 1), MAX_DAYS)
        channels = [channel_id] if channel_id else self._store.guild_channel_ids(guild_id)
        run = BackfillRun(
            guild_id=guild_id,
            run_ms=now_ms,
            from_ms=now_ms - days * DAY_MS,
            days=days,
            cap=RUN_CAP,
            channels=len(channels),
            status=RUNNING,
            started_by=started_by,
        )
        if not self._store.start_backfill(run):
            under_way = self._store.backfill_run(guild_id)
            return Started(under_way or run, started=False)
        if not channels:
            self._store.end_backfill(guild_id, now_ms, "done")
        first = snowflake_at(run.from_ms)
        try:
            self._queue.send(
                CatchUpTask(
                    kind="backfill",
                    run=now_ms,
                    guild_id=guild_id,
                    channel_id=channel,
                    after=first,
                    from_ms=run.from_ms,
                    to_ms=now_ms,
                )
                for channel in channels
            )
        except Exception:
            # Not left running with no task to end it: a retry (the join's redelivered
            # event, staff's next start) starts it again.
            self._store.end_backfill(guild_id, now_ms, "failed")
            raise
        return Started(run, started=True)

    def status(self, guild_id: str) -> BackfillRun | None:
        return self._store.backfill_run(guild_id)

    def cancel(self, guild_id: str) -> BackfillRun | None:
        """Cancel the run under way; the run as it stood, or None when none was running."""
        run = self._store.backfill_run(guild_id)
        if run is None or not run.running:
            return None
        return run if self._store.end_backfill(guild_id, run.run_ms, "cancelled") else None


def model_calls(messages: int) -> int:
    """The model calls `messages` imported messages are expected to cost, consolidated as
    the stream hands them out while the import goes on (at most)."""
    return math.ceil(messages * MODEL_CALLS_PER_1000 / 1000)


def describe(run: BackfillRun) -> str:
    """Progress as staff read it: channels, messages, pages, model calls so far and
    expected."""
    by = " (started when the bot joined this server)" if run.started_by == ON_JOIN else ""
    return (
        f"Backfill of the last {run.days} days{by}: {run.status}. "
        f"Channels: {run.channels_done} of {run.channels} read"
        + (f" ({run.skipped} the bot cannot read, skipped)" if run.skipped else "")
        + f". Messages imported: {run.messages:,} (at most {run.cap:,} a run), "
        f"in {run.pages:,} pages. Model calls: about {model_calls(run.messages):,} so far, "
        f"about {model_calls(run.cap if run.running else run.messages):,} "
        + ("at most in all." if run.running else "in all.")
    )
