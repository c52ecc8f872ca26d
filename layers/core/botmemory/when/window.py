"""The sane windows a time drawn from a message must lie in.

- When something was said: never before Discord began, never more than
  FUTURE_TOLERANCE_MS after now (ingest refuses an id made further ahead; a stored value
  is clamped again here).
- A date the memory model resolved from relative words ("next Friday (2026-03-06)", the
  contract's form: a date in parentheses) lies within RESOLVED_WINDOW_DAYS of the day it was
  said: a "next Friday" a year away is a misreading, and the fact is rejected.
- A fact's `valid_until` lies on or after the day its evidence was said and at most
  MAX_VALID_DAYS after it; any other is dropped (logged): the fact stands without it.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta, tzinfo

from botmemory.when.zones import local

# Discord's epoch (2015-01-01 UTC): no message is older.
DISCORD_EPOCH_MS = 1_420_070_400_000
# How far ahead of the clock an event's time may be: Discord's clock and ours may differ a
# little; a snowflake further ahead is forged or broken, and would sort after everything
# (ingest refuses it: botmemory.ingest.observe).
FUTURE_TOLERANCE_MS = 5 * 60_000
# How far from the day it was said a resolved relative date may lie: "in six months" fits,
# a "next Friday" read as a year away does not.
RESOLVED_WINDOW_DAYS = 190
# How far ahead of its evidence a fact may be said to hold until (a lease, a contract).
MAX_VALID_DAYS = 5 * 366
# A resolved date, as the contract asks for it: in parentheses after the words said.
RESOLVED_DATE = re.compile(r"\((\d{4})-(\d{2})-(\d{2})\)")


def said_at(at_ms: int, now_ms: int) -> int:
    """When something was said, within Discord's lifetime and the clocks' tolerance."""
    return min(max(at_ms, DISCORD_EPOCH_MS), now_ms + FUTURE_TOLERANCE_MS)


def said_day(at_ms: int, zone: tzinfo) -> date | None:
    at = local(at_ms, zone)
    return at.date() if at else None


def unresolvable(text: str, said_ms: int, zone: tzinfo) -> str | None:
    """Why a fact's resolved dates cannot be right (not a date, or too far from the day it
    was said); None when each is sane."""
    day = said_day(said_ms, zone)
    for match in RESOLVED_DATE.finditer(text):
        try:
            resolved = date(int(match[1]), int(match[2]), int(match[3]))
        except ValueError:
            return f"resolved date {match[0]} is not a date"
        if day is None or abs((resolved - day).days) > RESOLVED_WINDOW_DAYS:
            return (
                f"resolved date {match[0]} is more than {RESOLVED_WINDOW_DAYS} days from "
                "when it was said"
            )
    return None


def until_ms(value: str, said_ms: int, zone: tzinfo) -> tuple[int | None, str | None]:
    """The end of the day `value` (YYYY-MM-DD) names in the zone, as epoch milliseconds,
    when it lies in its window after the day it was said; else None and why ("" or absent:
    none given, no reason)."""
    value = value.strip()
    if not value:
        return None, None
    try:
        last = date.fromisoformat(value[:10])
    except ValueError:
        return None, "valid_until is not a date"
    day = said_day(said_ms, zone)
    if day is None or last < day:
        return None, "valid_until lies before its evidence was said"
    if (last - day).days > MAX_VALID_DAYS:
        return None, f"valid_until lies more than {MAX_VALID_DAYS} days after its evidence"
    # The next local midnight, whatever length a daylight-saving change gives that day.
    end = datetime.combine(last + timedelta(days=1), time(0), tzinfo=zone)
    return int(end.timestamp() * 1000), None
