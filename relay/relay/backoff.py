"""Exponential backoff with jitter, shared by the sink retries and the gateway restarts."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """Delay n grows as base * 2**n up to cap; "equal jitter" keeps at least half of it.

    Half fixed, half random: many relays (or many retries) never synchronise, and a
    delay never collapses to zero the way full jitter can.
    """

    base: float
    cap: float
    random: Callable[[], float] = field(default=random.random)

    def delay(self, attempt: int) -> float:
        ceiling: float = min(self.cap, self.base * (2 ** min(attempt, 32)))
        return ceiling / 2 + self.random() * ceiling / 2
