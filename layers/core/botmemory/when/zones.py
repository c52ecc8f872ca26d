"""Time zones by their IANA names, and dates and times written in one.

The names come from the `tzdata` package (shipped in the layer: Lambda's image holds no zone
files, and `zoneinfo` falls back to that package when the system has none). A name staff
type is matched against that list, case aside, before anything opens a file: a path, a
control character or a made-up name is refused with `UnknownZone`, never looked up.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

log = logging.getLogger(__name__)

# The zone of a server whose staff chose none, and of direct messages.
DEFAULT_ZONE = "UTC"
# The longest IANA name is about 30 characters ("America/Argentina/ComodRivadavia").
MAX_ZONE_NAME_CHARS = 64
# What a zone name may look like before the list is even read: Area/Location[/More].
_ZONE_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+){0,2}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class UnknownZone(ValueError):
    """A name that is no IANA time zone."""


@lru_cache(maxsize=1)
def _known() -> dict[str, str]:
    """Every zone name the layer knows, by its case-folded spelling."""
    return {name.casefold(): name for name in available_timezones()}


def zone_name(typed: str) -> str:
    """The IANA name staff meant ("europe/paris" is "Europe/Paris"); UnknownZone when none."""
    name = typed.strip()
    if len(name) > MAX_ZONE_NAME_CHARS or not _ZONE_SHAPE.fullmatch(name):
        raise UnknownZone("not a time zone name")
    known = _known().get(name.casefold())
    if known is None:
        raise UnknownZone("no such time zone")
    return known


@lru_cache(maxsize=256)
def zone_of(name: str | None) -> tzinfo:
    """The zone a stored name names; UTC for none, or for a name this layer does not know
    (a stored value is data: logged, never an error that takes an answer down)."""
    if not name or name == DEFAULT_ZONE:
        return UTC
    try:
        return ZoneInfo(zone_name(name))
    except (UnknownZone, ZoneInfoNotFoundError, ValueError, OSError):
        log.warning("unknown stored time zone: UTC instead", extra={"zone": name[:80]})
        return UTC


def label(name: str | None) -> str:
    """How a prompt names the zone: the IANA name (UTC for none or an unknown one)."""
    zone = zone_of(name)
    return str(zone.key) if isinstance(zone, ZoneInfo) else DEFAULT_ZONE


def local(ms: int, zone: tzinfo) -> datetime | None:
    """An epoch-milliseconds time in a zone; None outside the years datetime holds (stored
    times come from payloads and may be anything)."""
    try:
        return (_EPOCH + timedelta(milliseconds=ms)).astimezone(zone)
    except (OverflowError, ValueError, TypeError):
        return None


def local_day(ms: int, zone: tzinfo) -> str:
    """The calendar day of a time in a zone, YYYY-MM-DD ("unknown date" when it has none)."""
    at = local(ms, zone)
    return at.date().isoformat() if at else "unknown date"


def local_minute(ms: int, zone: tzinfo) -> str:
    """The day and minute of a time in a zone ("2026-03-02 14:05")."""
    at = local(ms, zone)
    return at.strftime("%Y-%m-%d %H:%M") if at else "unknown date"


def stamp(ms: int, zone: tzinfo) -> str:
    """A time as the memory model reads it: day, weekday and minute in the zone
    ("2026-03-02 Mon 14:05")."""
    at = local(ms, zone)
    return at.strftime("%Y-%m-%d %a %H:%M") if at else "unknown time"


def today_line(now_ms: int, name: str | None) -> str:
    """What an answer prompt says of now: the weekday, date and time, the zone named with
    its offset ("Monday 2026-03-02, 14:05 (Europe/Paris, UTC+01:00)")."""
    at = local(now_ms, zone_of(name))
    if at is None:
        return "unknown"
    offset = at.strftime("%z")
    offset = f"UTC{offset[:3]}:{offset[3:]}" if offset else "UTC"
    return f"{at.strftime('%A %Y-%m-%d, %H:%M')} ({label(name)}, {offset})"
