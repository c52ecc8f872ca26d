"""Who asked not to be remembered.

Stored as salted hashes of user ids, so the list itself names nobody and survives a
person's erasure. Ingest reads it through a short-lived cache: one query per minute
per container, never one per event.
"""

from __future__ import annotations

import hashlib
import threading

from botmemory.clock import Clock
from botmemory.repository import MemoryRepository

CACHE_MS = 60_000
_SALT = b"discord-memory/opt-out/v1"


def user_hash(user_id: str) -> str:
    return hashlib.sha256(_SALT + user_id.encode()).hexdigest()


class OptOuts:
    def __init__(self, repository: MemoryRepository, clock: Clock) -> None:
        self._repository = repository
        self._clock = clock
        self._hashes: set[str] = set()
        self._loaded_at: int | None = None
        self._lock = threading.Lock()

    def is_opted_out(self, user_id: str | None) -> bool:
        if not user_id:
            return False
        return user_hash(user_id) in self._current()

    def _current(self) -> set[str]:
        now = self._clock.now_ms()
        with self._lock:
            if self._loaded_at is None or now - self._loaded_at >= CACHE_MS:
                self._hashes = self._repository.opted_out_hashes()
                self._loaded_at = now
            return self._hashes

    def opt_out(self, user_id: str) -> None:
        self._repository.add_opt_out(user_hash(user_id), self._clock.now_ms())
        with self._lock:
            self._hashes.add(user_hash(user_id))

    def opt_in(self, user_id: str) -> None:
        self._repository.remove_opt_out(user_hash(user_id))
        with self._lock:
            self._hashes.discard(user_hash(user_id))
