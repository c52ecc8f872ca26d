"""The one source of time. Lease expiry, retention and TTL filtering read it, so tests
move a ManualClock instead of sleeping."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when told to; safe to share between threads."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now = now_ms

    def advance(self, *, ms: int = 0, seconds: float = 0, days: float = 0) -> None:
        with self._lock:
            self._now += ms + int(seconds * 1000) + int(days * 86_400_000)


HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def epoch_seconds(ms: int) -> int:
    """DynamoDB TTL wants whole epoch seconds."""
    return ms // 1000


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
UNKNOWN_DAY = "unknown date"


def day(ms: int) -> str:
    """The UTC calendar day of an epoch-milliseconds time, as YYYY-MM-DD.

    Total: a time outside the years 1 to 9999 (stored times come from Discord payloads and
    may be anything) is "unknown date", never an error that takes a recall or a listing down.
    """
    try:
        at = _EPOCH + timedelta(milliseconds=ms)
    except (OverflowError, ValueError, TypeError):
        return UNKNOWN_DAY
    return f"{at.year:04d}-{at.month:02d}-{at.day:02d}"


def moment(ms: int) -> str:
    """The UTC day and minute of an epoch-milliseconds time, as YYYY-MM-DD HH:MM UTC (the
    day alone, or "unknown date", when it has no minute to show)."""
    try:
        at = _EPOCH + timedelta(milliseconds=ms)
    except (OverflowError, ValueError, TypeError):
        return UNKNOWN_DAY
    return f"{day(ms)} {at.hour:02d}:{at.minute:02d} UTC"


def ttl_alive(expires_at: int | None, now_ms: int) -> bool:
    """Whether an item with this TTL is still alive at `now_ms`: DynamoDB deletes expired
    items lazily (moto never does), so every read filters them."""
    return expires_at is None or expires_at > epoch_seconds(now_ms)
