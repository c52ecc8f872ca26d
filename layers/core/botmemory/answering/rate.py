"""How often the bot answers: per person and per channel, in fixed windows.

Each window (`ANSWER_RATE_WINDOW_SECONDS`) has a counter per channel and one per person,
in the scope's rate partition (botmemory.storage.rate_counters). A check adds one to both,
with one UpdateItem each, sent side by side: one round trip on the answering path. The counters'
values decide, with no other item:

- both within their limits (`ANSWER_RATE_PER_PERSON`, `ANSWER_RATE_PER_CHANNEL`): answer;
- a counter at exactly its limit plus one: the first request over that limit in this window
  is told once, politely (the caller's words);
- beyond: silence until the next window.

The person's own limit is checked first. A request refused for it is taken back off the
channel's counter (one more write, on that path only), so one member asking over and over
cannot use up a channel's answers for everyone else.

Counters expire (TTL) a window after their own ends. The person's counter carries their id
as `user_id`, so an erasure finds and deletes it like any other item of theirs. A DynamoDB
error is not swallowed: the caller decides whether to answer without a limit.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from typing import Protocol

from botmemory.clock import Clock, epoch_seconds
from botmemory.settings.config import Settings


class RateCounters(Protocol):
    """Where the counters live: `MemoryRepository` (botmemory.storage.rate_counters)."""

    def add_to_channel_counter(
        self, scope: str, channel_id: str, window: int, expires_at: int, *, step: int = 1
    ) -> int: ...

    def add_to_person_counter(
        self, scope: str, person: str, window: int, expires_at: int
    ) -> int: ...


class RateDecision(StrEnum):
    ALLOW = "allow"
    REFUSE_ONCE = "refuse_once"  # the first request over a limit in this window
    SILENT = "silent"  # every later one


def decide(count: int, limit: int) -> RateDecision:
    """One counter's verdict, from its value after this request was added."""
    if count <= limit:
        return RateDecision.ALLOW
    return RateDecision.REFUSE_ONCE if count == limit + 1 else RateDecision.SILENT


class AnswerRateLimiter:
    """Counts answers in the table; `check` once per message that calls for an answer."""

    def __init__(self, counters: RateCounters, settings: Settings, clock: Clock) -> None:
        self._counters = counters
        self._window_ms = settings.answer_rate_window_seconds * 1000
        self._per_person = settings.answer_rate_per_person
        self._per_channel = settings.answer_rate_per_channel
        self._clock = clock

    def check(self, scope: str, channel_id: str, user_id: str) -> RateDecision:
        """Count this request, and say whether to answer it, refuse it once, or stay silent."""
        window = self._clock.now_ms() // self._window_ms
        # A window after this one ends: a counter is never read after its window.
        expires_at = epoch_seconds((window + 2) * self._window_ms)
        counters = self._counters
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rate") as pool:
            channel_count = pool.submit(
                counters.add_to_channel_counter, scope, channel_id, window, expires_at
            )
            person_count = counters.add_to_person_counter(scope, user_id, window, expires_at)
            channel = channel_count.result()
        person_decision = decide(person_count, self._per_person)
        if person_decision != RateDecision.ALLOW:
            counters.add_to_channel_counter(scope, channel_id, window, expires_at, step=-1)
            return person_decision
        return decide(channel, self._per_channel)
