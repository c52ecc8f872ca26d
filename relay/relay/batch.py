"""Batches of encoded events, bounded by count, by bytes and by age.

Events are encoded once, on arrival, so the byte bound is exact: the body sent is the
batch's events joined inside `{"events":[...]}`, nothing re-serialised later.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_HEAD = b'{"events":['
_TAIL = b"]}"
ENVELOPE_BYTES = len(_HEAD) + len(_TAIL)


def encode_event(name: str, payload: dict[str, Any]) -> bytes:
    """One event as compact UTF-8 JSON; ValueError when it cannot be encoded (lone surrogates)."""
    text = json.dumps({"t": name, "d": payload}, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("payload holds text that is not valid UTF-8") from None


def body_of(events: list[bytes]) -> bytes:
    return _HEAD + b",".join(events) + _TAIL


@dataclass(frozen=True)
class Batch:
    events: tuple[bytes, ...]

    @property
    def count(self) -> int:
        return len(self.events)

    def body(self) -> bytes:
        return body_of(list(self.events))


@dataclass(frozen=True)
class BatchLimits:
    max_events: int
    max_bytes: int
    max_seconds: float

    def fits_alone(self, encoded: bytes) -> bool:
        return ENVELOPE_BYTES + len(encoded) <= self.max_bytes


class Batcher:
    """Collects events into the open batch and seals it when a bound is reached.

    Not thread-safe: the forwarder calls it under its own lock.
    """

    def __init__(self, limits: BatchLimits, now: Callable[[], float]) -> None:
        self._limits = limits
        self._now = now
        self._events: list[bytes] = []
        self._bytes = ENVELOPE_BYTES
        self._opened_at = 0.0

    def __len__(self) -> int:
        return len(self._events)

    def add(self, encoded: bytes) -> list[Batch]:
        """Add one event (it must fit alone); the batches this sealed, oldest first."""
        sealed: list[Batch] = []
        separator = 1 if self._events else 0
        if self._events and self._bytes + separator + len(encoded) > self._limits.max_bytes:
            sealed.append(self._seal())
            separator = 0
        if not self._events:
            self._opened_at = self._now()
        self._events.append(encoded)
        self._bytes += separator + len(encoded)
        if len(self._events) >= self._limits.max_events:
            sealed.append(self._seal())
        return sealed

    def deadline(self) -> float | None:
        """When the open batch becomes due by age; None when nothing is open."""
        return self._opened_at + self._limits.max_seconds if self._events else None

    def due(self) -> list[Batch]:
        """The open batch, sealed, when it has waited max_seconds."""
        deadline = self.deadline()
        if deadline is not None and self._now() >= deadline:
            return [self._seal()]
        return []

    def drain(self) -> list[Batch]:
        """Seal whatever is open (shutdown, explicit flush)."""
        return [self._seal()] if self._events else []

    def _seal(self) -> Batch:
        batch = Batch(tuple(self._events))
        self._events = []
        self._bytes = ENVELOPE_BYTES
        return batch
