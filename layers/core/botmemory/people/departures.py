"""A member who left a server, erased from it after a grace period its staff chose.

Only where the deployment has the privileged GUILD_MEMBERS intent (MEMORY_GUILD_MEMBERS_INTENT,
with the relay's RELAY_GUILD_MEMBERS_INTENT): without it Discord sends no member removals and
nothing here happens. Off by default in every server too: staff choose the grace period
(`/memory-staff retention leavers <days>`, 0 turns it off).

- `GUILD_MEMBER_REMOVE` (IngestFunction, `member_left`) schedules a check when the grace
  period ends: a pointer in the `LEFT` partition, sorted by when it is due.
- The scheduled run (`erase_departed`, ServerPurgeFunction every hour) takes what is due by
  key and asks Discord whether the member is really gone (GET /guilds/{guild}/members/{user}):
  a member still there (they came back, or the removal was forged) is left as they are and
  the pointer goes; 404 Unknown Member (code 10007) means gone, and what was kept of them in
  that server alone is erased, with the erasure's guarantees (botmemory.people.erasure, its
  `server`); any other answer (Discord down, the bot no longer in the server) leaves the
  pointer for the next run (a server the bot left is purged whole anyway). An erasure that
  outlasts the run keeps its checkpoint on the pointer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from botmemory.clock import DAY_MS
from botmemory.people.erasure import Eraser
from botmemory.storage import keys
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)

DUE_PER_RUN = 20
RESERVE_MS = 30_000
# The grace period staff may choose, at most (a year).
MAX_LEAVERS_DAYS = 365

# Whether a member is in a guild, as Discord answers: True (there), False (gone: Unknown
# Member), None (no answer that says either).
MemberCheck = Callable[[str, str], bool | None]


def member_left(
    repository: MemoryRepository, guild_id: str, user_id: str, grace_days: int, now_ms: int
) -> str | None:
    """What a GUILD_MEMBER_REMOVE does: None when it scheduled the check, else why not."""
    if grace_days <= 0:
        return "this server keeps what members who left said (no leavers' grace period)"
    repository.schedule_departure(guild_id, user_id, now_ms + grace_days * DAY_MS)
    log.info(
        "member left: erasure check scheduled", extra={"guild_id": guild_id, "days": grace_days}
    )
    return None


@dataclass
class DepartureReport:
    erased: int = 0  # members erased from a server
    still_members: int = 0  # removals Discord does not confirm: nothing erased
    unconfirmed: int = 0  # no answer either way: tried again next run
    unfinished: bool = False
    servers: list[str] = field(default_factory=list)


def erase_departed(
    repository: MemoryRepository,
    eraser: Eraser,
    is_member: MemberCheck,
    now_ms: int,
    time_left_ms: Callable[[], int] | None = None,
) -> DepartureReport:
    """Check and erase the members whose grace period is over (module docstring)."""

    def short() -> bool:
        return time_left_ms is not None and time_left_ms() < RESERVE_MS

    report = DepartureReport()
    for sk, checkpoint in repository.departures_due(now_ms, DUE_PER_RUN):
        if short():
            report.unfinished = True
            break
        guild_id, user_id = keys.departure_of(sk)
        if checkpoint is None:
            present = is_member(guild_id, user_id)
            if present is None:
                report.unconfirmed += 1
                continue
            if present:
                repository.drop_departure(sk)
                report.still_members += 1
                log.info("member still in the server: nothing erased", extra={"guild_id": guild_id})
                continue
        erased = eraser.erase(
            user_id, checkpoint=checkpoint, time_left_ms=time_left_ms, server=guild_id
        )
        if not erased.finished and erased.checkpoint is not None:
            repository.keep_departure_checkpoint(sk, erased.checkpoint)
            report.unfinished = True
            break
        repository.drop_departure(sk)
        report.erased += 1
        report.servers.append(guild_id)
        log.info("member who left erased from the server", extra={"guild_id": guild_id})
    return report
