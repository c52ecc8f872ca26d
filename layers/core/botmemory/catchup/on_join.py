"""The bot added to a server: the server's past imported, when chosen (issue 52, point 5).

Off by default: members did not expect the bot to read what was said before it came. A
deployment's default (MEMORY_BACKFILL_ON_JOIN_DAYS, 0: never) applies to a server whose staff
never chose; staff choose their own with `/memory-staff backfill on-join days:<0..30>`. Staff
can only run that with the bot in the server, so their choice matters when the bot is
removed and added again (a removed server's items, this choice among them, are kept for
MEMORY_SERVER_PURGE_DAYS, and a return within that cancels the purge).

A join, not a reconnect: every connection replays a GUILD_CREATE for every guild, so a
GUILD_CREATE is a join only when its `joined_at` (Discord: when the bot joined the guild,
sent only in GUILD_CREATE; the relay forwards it) is later than the one recorded on the
server's known-servers entry (botmemory.storage.lifecycle). An entry without one (a server
known from before this was recorded, or none at all) is joined only when `joined_at` is
recent (JOIN_RECENT_MS): an upgrade never reads the past of every server the bot was already
in. A `joined_at` malformed or in the future is no join, and the event is counted as
skipped for it (IngestResult.ignored); one missing (a relay from before it forwarded it) is no
join either, counted apart (a metric), since Discord always sends it. The rest of the event
applies all the same.

A join starts one run over every channel the table knows of the server, as staff's `start`
without a channel does (botmemory.catchup.backfill, the one owner), recorded as started on
join, shown by `status`, cancelled by `cancel`. A second GUILD_CREATE of the same join (a
redelivered batch, a part of a split one) is no join; two at once meet the rule of one run
a server at a time. So a server whose GUILD_CREATE the relay splits (too large for one
batch) has its run cover the channels recorded when the first part to arrive was read.
The joined_at is recorded after the run started: an invoke that failed in between is
retried as a join again (a run whose tasks could not be sent ended `failed`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from botmemory.catchup.backfill import ON_JOIN, Backfiller
from botmemory.catchup.tasks import TaskQueue
from botmemory.clock import DAY_MS, Clock
from botmemory.settings.config import Settings
from botmemory.snowflake import DISCORD_EPOCH_MS
from botmemory.storage.catchup import CatchUpStore
from botmemory.storage.repository import MemoryRepository
from botmemory.when.window import FUTURE_TOLERANCE_MS

log = logging.getLogger(__name__)

# A server with no `joined_at` recorded is joined only if the bot joined it this recently:
# a first join's GUILD_CREATE comes within seconds; a day allows for a relay that was down.
JOIN_RECENT_MS = DAY_MS
NO_JOINED_AT = "no valid joined_at: not taken as a join"
_MAX_TIMESTAMP_CHARS = 64


def joined_at_ms(payload: dict[str, Any], now_ms: int) -> int | None:
    """When the bot joined, as a GUILD_CREATE says (ISO 8601); None when it does not say so
    in a form to trust (absent, malformed, before Discord, or in the future)."""
    value = payload.get("joined_at")
    if not isinstance(value, str) or len(value) > _MAX_TIMESTAMP_CHARS:
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:  # read as UTC, as Discord's timestamps are
            moment = moment.replace(tzinfo=UTC)
        joined = int(moment.timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        return None
    if not DISCORD_EPOCH_MS <= joined <= now_ms + FUTURE_TOLERANCE_MS:
        return None
    return joined


def is_join(joined_ms: int, recorded_ms: int | None, now_ms: int) -> bool:
    """Whether a GUILD_CREATE saying `joined_ms` is the bot joining (module docstring)."""
    if recorded_ms is not None:
        return joined_ms > recorded_ms
    return joined_ms >= now_ms - JOIN_RECENT_MS


def on_join_days(own: int | None, settings: Settings) -> int:
    """The days a join imports: the server's own choice, else the deployment's."""
    return settings.backfill_on_join_days if own is None else own


def describe_on_join(own: int | None, settings: Settings) -> str:
    """What happens when the bot joins this server again, in one sentence."""
    days = on_join_days(own, settings)
    whose = "the deployment's default" if own is None else "this server's choice"
    if days <= 0:
        return f"When the bot joins this server again, it reads no history ({whose})."
    return (
        f"When the bot joins this server again, it imports the last {days} days of every "
        f"channel it can read ({whose})."
    )


@dataclass(frozen=True)
class Joined:
    record_ms: int | None  # the `joined_at` the known-servers entry keeps
    skip: str | None = None  # why the event's `joined_at` was not read
    missing: bool = False  # it had none
    started: bool = False  # a backfill started


class JoinBackfills:
    """What a GUILD_CREATE does for the server's past (module docstring)."""

    def __init__(self, repository: MemoryRepository, settings: Settings, clock: Clock) -> None:
        self._repository = repository
        self._settings = settings
        self._clock = clock

    def guild_created(
        self, guild_id: str, payload: dict[str, Any], *, available: bool = True
    ) -> Joined:
        """Call after the event's channels are recorded: a run reads those."""
        now = self._clock.now_ms()
        recorded = self._repository.server_joined_at(guild_id)
        if not available:
            return Joined(recorded)
        if "joined_at" not in payload:
            return Joined(recorded, missing=True)
        joined = joined_at_ms(payload, now)
        if joined is None:
            return Joined(recorded, skip=NO_JOINED_AT)
        if not is_join(joined, recorded, now):
            return Joined(max(joined, recorded or joined))
        days = on_join_days(
            self._repository.guild_controls(guild_id).backfill_on_join_days, self._settings
        )
        if days <= 0:
            return Joined(joined)
        if not self._settings.catchup_queue_url:
            log.warning("the bot joined a server: no catch-up queue to backfill it")
            return Joined(joined)
        backfiller = Backfiller(
            CatchUpStore(self._repository.client, self._repository.table_name),
            TaskQueue(self._settings.catchup_queue_url),
        )
        started = backfiller.start(guild_id, None, days, now, started_by=ON_JOIN)
        log.info(
            "the bot joined a server: backfill",
            extra={
                "guild_id": guild_id,
                "days": days,
                "started": started.started,
                "channels": started.run.channels,
            },
        )
        return Joined(joined, started=started.started)
